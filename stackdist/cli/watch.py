"""``stackdist watch``: online capacity planning over a growing trace (a file being appended to,
or standard input), and a Prometheus exporter of its answers.

Every ``--every`` (a duration: ``10s``) one JSON line is written (and flushed, in one write, so a
finished line is never lost): the working set for each target (a fraction of the ceiling: the
capacity reaching 90% of an infinite cache's hits), the hit rate at the listed capacities, the
infinite-cache ceiling and, for request traces, the request coverage, each for the trailing
``--window`` and for everything so far (``cumulative``); a window with no access has no answers
(nulls; no Prometheus sample), never 0. Capacities and working sets are in blocks, tokens and KV
bytes of ``--model`` (request traces; the default model, said on stderr, when none is given) or
of ``--bytes-per-unit``. ``--listen HOST:PORT`` serves the answers as Prometheus metrics over
HTTP (``prometheus_client``, the ``watch`` extra); ``--prometheus FILE`` rewrites a Prometheus
text file atomically for a node exporter's textfile collector (no dependency); both carry HELP,
TYPE and the labels of :mod:`stackdist.render.prometheus`. The replay is per-access LRU (block
by block for request traces), or for request traces with ``--semantics engine`` the engine's
prefix semantics (a block counts as a hit when its whole prefix hits: its effective depth);
memory is O(distinct keys), or O(S) with ``--sample-size S``. Ctrl-C stops cleanly: the lines
already read are replayed and a last line is written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import re
import sys
import threading
import time
from typing import IO, Any

from stackdist.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError, require_data
from stackdist.output import write_atomic
from stackdist.render.prometheus import prometheus_text
from stackdist.traces.follow import follow_lines
from stackdist.traces.formats import is_request_format

from .args import (
    InputPath,
    OutputPath,
    add_format_argument,
    bounded_int,
    finite_float,
    fraction_list,
)
from .common import add_version

__all__ = ["add_watch_parser", "follow_lines", "prometheus_text", "run_watch"]

EXAMPLES = """examples:
  # an HTTP /metrics endpoint (needs: pip install 'stackdist[watch]')
  stackdist watch /var/log/prefix-cache.jsonl --format mooncake --model qwen3-8b --every 60s --window 10m \\
      --capacities 80GiB,1TiB --listen 0.0.0.0:9400
  stackdist watch /var/log/prefix-cache.jsonl --format mooncake --every 1m --prometheus /var/lib/node_exporter/kv.prom
  tail -F access.csv | stackdist watch - --format csv --sample-size 100000 --targets 90%,0.95
  stackdist watch trace.csv --no-follow --output answers.jsonl
"""
_EOF = None


def add_watch_parser(sub: Any) -> None:
    """Register ``watch`` on the subcommand parsers ``sub``."""
    from stackdist.planning.budgets import BUDGET_UNITS
    from stackdist.planning.geometry import KV_DTYPES

    w = sub.add_parser("watch", help="follow a growing trace and write the current answers every interval",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Online planning: working sets, hit rates and coverage per trailing window and "
                       "cumulative, as JSON lines and Prometheus metrics.")
    add_version(w)
    w.add_argument("trace", type=InputPath, help="a trace file that grows (followed from its start), or - for standard input")
    add_format_argument(w, line_records=True, help="the trace format, one whose lines are records on their own (default: "
                        "from the extension; csv for standard input)")
    w.add_argument("--block-size", type=bounded_int("--block-size", 1), help="tokens per block (request formats)")
    w.add_argument("--semantics", choices=["per-access", "engine"], default="per-access",
                   help="request traces: per-access LRU block by block (default), or engine: each request reads the "
                   "cache as it found it, a block hits when its whole prefix does, committed tail first")
    w.add_argument("--every", metavar="DURATION", help="time between answers, with its unit: 500ms, 10s, 1m, 1h (default 10s)")
    w.add_argument("--interval", type=finite_float("--interval", 0, 86400, lo_open=True), metavar="SECONDS",
                   help="deprecated: --every with a unit")
    w.add_argument("--window", metavar="DURATION", help="the trailing window of the window answers, a whole number of "
                   "--every intervals (e.g. 10m; default one interval); cumulative answers cover everything so far")
    w.add_argument("--targets", default="0.5,0.9,0.95,0.99", metavar="F1,F2,...",
                   help="working-set targets as fractions of the ceiling (an infinite cache's hits), 0.9 or 90%% "
                   "(default 0.5,0.9,0.95,0.99)")
    w.add_argument("--capacities", metavar="C1,C2,...",
                   help=f"also report the hit rate at these capacities; units: {BUDGET_UNITS}; a bare number is in the "
                   "trace's unit (blocks of a request trace)")
    model = w.add_mutually_exclusive_group()
    model.add_argument("--model", help="request traces: the model whose KV bytes per token give the _bytes answers "
                       "(a bundled model or Hugging Face repo id, as plan's; default qwen2.5-1.5b, said on stderr)")
    model.add_argument("--model-config", type=InputPath, metavar="FILE", help="a Hugging Face config.json instead of --model")
    w.add_argument("--kv-dtype", choices=KV_DTYPES, metavar="DTYPE",
                   help=f"KV-cache element type: {', '.join(KV_DTYPES)} (default auto: the model's dtype)")
    w.add_argument("--bytes-per-unit", type=bounded_int("--bytes-per-unit", 1), metavar="B",
                   help="bytes per capacity unit (per block of a request trace), instead of a model's")
    w.add_argument("--output", "-o", type=OutputPath, default="-", metavar="FILE", help="append the JSON lines here (default stdout)")
    w.add_argument("--listen", metavar="HOST:PORT", help="serve the answers as Prometheus metrics over HTTP at "
                   "http://HOST:PORT/metrics (port 0: a free one, said on stderr; needs pip install 'stackdist[watch]')")
    w.add_argument("--prometheus", type=OutputPath, metavar="FILE", help="rewrite this Prometheus text file every interval "
                   "(atomically, for a node exporter's textfile collector; needs no extra)")
    w.add_argument("--sample-rate", type=finite_float("--sample-rate", 0, 1, lo_open=True), metavar="R",
                   help="SHARDS sampling rate (approximate answers)")
    w.add_argument("--sample-size", type=bounded_int("--sample-size", 1), metavar="S",
                   help="SHARDS fixed size: at most S keys in memory (approximate answers)")
    w.add_argument("--seed", type=bounded_int("--seed", 0), default=0, help="hash seed for sampling (default 0)")
    w.add_argument("--poll", type=finite_float("--poll", 0, 60, lo_open=True), default=0.2, metavar="SECONDS",
                   help="how often to look for new lines at the end of a file (default 0.2)")
    w.add_argument("--no-follow", action="store_true", help="stop at the end of the file instead of waiting for more")


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)")
_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_with_unit(text: str, flag: str) -> float:
    """Seconds from a duration that names its unit (``500ms``, ``10s``, ``1.5m``, ``2h``); a
    bare number is a UsageError naming ``flag`` (which unit was meant is not guessed). O(1).

    >>> parse_duration_with_unit("10s", "--every"), parse_duration_with_unit("1.5m", "--every")
    (10.0, 90.0)
    """
    match = _DURATION.fullmatch(text.strip())
    value = float(match.group(1)) * _SECONDS[match.group(2)] if match else -1.0
    if not (0 < value <= 7 * 86400) or not math.isfinite(value):
        raise UsageError(f"{flag} must be a positive duration with its unit (ms, s, m, h) up to a week, "
                         f"e.g. 10s or 5m; got {text!r}.")
    return value


def parse_listen(text: str, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6; port 0: a free one); UsageError naming ``flag``. O(1).

    >>> parse_listen("127.0.0.1:0"), parse_listen("[::1]:9400")
    (('127.0.0.1', 0), ('::1', 9400))
    """
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"{flag} must be HOST:PORT with a port 0 to 65535 (0: any free port), e.g. 0.0.0.0:9400; "
                         f"got {text!r}.")
    return host, int(port)


def percent_fractions(text: str, flag: str) -> list[float]:
    """Fractions in (0, 1] from ``"90%,0.95"``; a UsageError naming ``flag`` otherwise. O(n).

    >>> percent_fractions("90%, 0.95", "--targets")
    [0.9, 0.95]
    """
    parts = []
    for part in text.split(","):
        part = part.strip()
        if part.endswith("%"):
            try:
                part = repr(float(part[:-1]) / 100)
            except ValueError:
                pass
        parts.append(part)
    try:
        return fraction_list(",".join(parts), flag)
    except UsageError:
        raise UsageError(f"{flag} must be comma-separated fractions of the ceiling in (0, 1] or percentages "
                         f"(0.9 or 90%); got {text!r}.") from None


def capacities_in_units(text: str, block_size: int | None, bytes_per_unit: int | None) -> tuple[list[str], list[int]]:
    """``--capacities`` as (labels as given, capacities in the trace's unit): a bare integer is in
    the trace's unit; bytes need ``bytes_per_unit`` (a capacity holds the whole units that fit:
    floor), tokens and blocks a request trace (``block_size``). O(n).

    >>> capacities_in_units("3,1KiB,40tokens,2blocks", 16, 256)
    (['3', '1KiB', '40tokens', '2blocks'], [3, 4, 2, 2])
    """
    from stackdist.planning.budgets import BUDGET_UNITS, parse_budgets
    from stackdist.traces.counting import parse_int

    labels, values = [], []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.isdigit():
            labels.append(part)
            values.append(parse_int(part, "--capacities"))
            continue
        (budget,) = parse_budgets(part, "--capacities")
        if budget.unit == "bytes":
            if not bytes_per_unit:
                raise UsageError(f"--capacities {part}: bytes need the bytes per unit: give --bytes-per-unit "
                                 "(or --model for a request trace).")
            values.append(budget.amount // bytes_per_unit)
        elif block_size is None:
            raise UsageError(f"--capacities {part}: {budget.unit} need a request trace; an access trace's capacities are "
                             f"bare numbers (its unit) or bytes with --bytes-per-unit ({BUDGET_UNITS}).")
        else:
            values.append(budget.amount // block_size if budget.unit == "tokens" else budget.amount)
        labels.append(part)
    if not values:
        raise UsageError(f"--capacities must be comma-separated sizes; got {text!r}.")
    return labels, values


class _Sinks:
    """Where each record goes: the JSON lines, the textfile, the HTTP exporter."""

    def __init__(self, out: IO[str], prometheus: str | None, exporter: Any, labels: dict[str, str]) -> None:
        self.out, self.prometheus, self.exporter, self.labels = out, prometheus, exporter, labels

    def emit(self, record: dict[str, Any]) -> None:
        self.out.write(json.dumps(record, separators=(",", ":")) + "\n")  # one write per line
        self.out.flush()
        if self.prometheus:
            write_atomic(self.prometheus, prometheus_text(record, self.labels))
        if self.exporter is not None:
            self.exporter.update(record)


def _reader(args: argparse.Namespace, lines: queue.Queue, stop: threading.Event) -> threading.Thread:
    from stackdist.traces.stream_input import open_input

    # Standard input through a file of its own (a duplicate of fd 0): the reader thread blocks in
    # its readline holding that file's lock, and the interpreter's exit, which closes sys.stdin,
    # would otherwise wait for the lock and abort ("could not acquire lock ... at interpreter
    # shutdown") instead of exiting 130 after Ctrl-C.
    stream = os.fdopen(os.dup(sys.stdin.fileno()), "rb") if args.trace == "-" else open_input(args.trace)

    def run() -> None:
        try:
            for item in follow_lines(stream, not args.no_follow and args.trace != "-", args.poll, stop):
                lines.put(item)
        except Exception as exc:  # noqa: BLE001 - handed to the main thread
            lines.put(exc)
        finally:
            lines.put(_EOF)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_watch(args: argparse.Namespace) -> int:
    """Follow the trace; write one JSON line per interval (and the Prometheus file / endpoint)."""
    from stackdist.traces.formats import (
        ACCESSES,
        REQUESTS,
        SNIFFED_SUFFIX,
        format_names,
        formats,
    )

    ext = os.path.splitext(args.trace)[1].lower()
    if args.trace != "-" and args.format is None and ext != SNIFFED_SUFFIX and not any(
            ext in f.suffixes for f in formats(ACCESSES, line_records=True)):
        raise UsageError(f"watch: give --format ({', '.join(format_names(line_records=True))}) for this file name.")
    if args.trace == "-" and args.format is None:
        args.format = "csv"
    if getattr(args, "semantics", "per-access") == "engine" and not is_request_format(args.format):
        raise UsageError(f"watch: --semantics engine needs a request trace (--format "
                         f"{', '.join(format_names(REQUESTS, line_records=True))}).")
    listen = parse_listen(args.listen) if args.listen else None
    watcher, labels, every = _online_plan(args)
    exporter = None
    if listen is not None:
        from stackdist.render.prometheus import serve

        exporter = serve(*listen, labels, "--listen")
        print(f"stackdist watch: serving metrics at http://{listen[0]}:{exporter.port}/metrics", file=sys.stderr, flush=True)
    out = sys.stdout if args.output == "-" else open(args.output, "a", encoding="utf-8")  # noqa: SIM115
    sinks = _Sinks(out, args.prometheus, exporter, labels)
    stop = threading.Event()
    lines: queue.Queue = queue.Queue(maxsize=1 << 20)
    _reader(args, lines, stop)
    print(f"stackdist watch: following {args.trace}, an answer every {every:g} s, window "
          f"{watcher.options.window_label} ({watcher.options.window_intervals} interval(s)) (Ctrl-C to stop)",
          file=sys.stderr, flush=True)
    status = EXIT_OK
    try:
        status = _loop(watcher, lines, sinks, args, every)
    except KeyboardInterrupt:
        stop.set()
        _drain(watcher, lines)
        sinks.emit(watcher.snapshot(final=True))
        print("stackdist watch: interrupted; the last answers are written", file=sys.stderr)
        status = EXIT_INTERRUPTED
    finally:
        if out is not sys.stdout:
            out.close()
        if exporter is not None:
            exporter.close()
    return status


def _every(args: argparse.Namespace) -> float:
    """Seconds between answers: ``--every`` (with a unit) or the deprecated ``--interval``."""
    if args.interval is not None:
        if args.every is not None:
            raise UsageError(f"--interval {args.interval:g} (deprecated) and --every {args.every}: give --every only.")
        print(f"stackdist watch: note: --interval is deprecated; use --every {args.interval:g}s", file=sys.stderr)
        return float(args.interval)
    return parse_duration_with_unit(args.every or "10s", "--every")


def _online_plan(args: argparse.Namespace) -> tuple[Any, dict[str, str], float]:
    """The library's online planner (:class:`stackdist.methods.watch.OnlinePlan`) from the
    flags, the constant labels of its metrics, and the seconds between answers."""
    from stackdist.methods.method import method_of
    from stackdist.methods.watch import OnlinePlan, WatchOptions
    from stackdist.traces.formats import REQUESTS, get, unit_of

    every = _every(args)
    intervals, window_label = 1, (args.every or f"{every:g}s")
    if args.window is not None:
        window = parse_duration_with_unit(args.window, "--window")
        intervals = round(window / every)
        if intervals < 1 or abs(intervals * every - window) > 1e-6 * window:
            raise UsageError(f"--window {args.window} must be a whole number of --every intervals ({every:g} s).")
        window_label = args.window.strip()
    request = is_request_format(args.format)
    block_size = (args.block_size or get(args.format, REQUESTS).block_size) if request else None
    labels = {"trace": args.trace, "semantics": args.semantics, "unit": "blocks" if request else "units"}
    if request:
        labels["block_tokens"] = str(block_size)
    bytes_per_unit = args.bytes_per_unit
    given_model = args.model or args.model_config or args.kv_dtype
    if not request and given_model:
        raise UsageError("--model, --model-config and --kv-dtype give KV bytes per token: they need a request trace "
                         f"(this is an access trace: its unit is {unit_of(args.format)}); use --bytes-per-unit.")
    if request and bytes_per_unit is not None and given_model:
        raise UsageError("--bytes-per-unit and --model/--model-config/--kv-dtype both give the bytes per block: give one.")
    if request and bytes_per_unit is None:
        from .budget_args import kv_dtype_text, model_note, resolve_spec

        spec = resolve_spec(args)
        model_note("watch", args, spec)
        assert block_size is not None
        bytes_per_unit = int(spec.geometry.kv_bytes_per_token) * block_size
        labels["model"], labels["kv_dtype"] = spec.name, kv_dtype_text(args, spec)
    caps = labels_caps = None
    if args.capacities is not None:
        labels_caps, caps = capacities_in_units(args.capacities, block_size, bytes_per_unit)
    method = method_of(args.sample_rate, args.sample_size, 1, args.seed)
    options = WatchOptions(args.trace, args.format, args.block_size, args.semantics, method,
                           percent_fractions(args.targets, "--targets"), caps, bytes_per_unit, intervals, labels_caps,
                           window_label)
    return OnlinePlan(options), labels, every


def _drain(watcher: Any, lines: queue.Queue) -> None:
    while True:
        try:
            item = lines.get_nowait()
        except queue.Empty:
            break
        if isinstance(item, tuple):
            watcher.pending.append(item)
    watcher.flush()


def _loop(watcher: Any, lines: queue.Queue, sinks: _Sinks, args: argparse.Namespace, every: float) -> int:
    deadline = time.monotonic() + every
    while True:
        try:
            item = lines.get(timeout=max(0.0, min(deadline - time.monotonic(), 0.5)))
        except queue.Empty:
            item = ()
        if isinstance(item, Exception):
            raise item
        if item is _EOF:
            watcher.flush()
            record = watcher.snapshot(final=True)
            require_data(record["cumulative"]["accesses"], args.trace, "the trace ended with no accesses")
            sinks.emit(record)
            return EXIT_OK
        if item:
            watcher.pending.append(item)
        if len(watcher.pending) >= 1 << 16:
            watcher.flush()
        if time.monotonic() >= deadline:
            watcher.flush()
            sinks.emit(watcher.snapshot(final=False))
            deadline = time.monotonic() + every