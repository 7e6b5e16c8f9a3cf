"""``stackdist watch``: online capacity planning over a growing trace (a file being appended to,
or standard input).

Every ``--interval`` seconds one JSON line is written (and flushed, in one write, so a finished
line is never lost): the working set for each target, the hit rate at the listed capacities, the
infinite-cache ceiling and, for request traces, the request coverage, each for the last
interval (``window``) and for everything so far (``cumulative``). ``--prometheus FILE`` also
rewrites a Prometheus text-format file atomically (``kv_working_set_bytes{target="0.95"}``) for a
node exporter's textfile collector. The replay is per-access LRU (block by block for request
traces), or for request traces with ``--semantics engine`` the engine's prefix semantics (a
block counts as a hit when its whole prefix hits: its effective depth); memory is O(distinct keys), or O(S) with ``--sample-size S``. Ctrl-C stops cleanly: the
lines already read are replayed and a last line is written.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
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
    int_list,
)

__all__ = ["add_watch_parser", "follow_lines", "prometheus_text", "run_watch"]

EXAMPLES = """examples:
  stackdist watch /var/log/prefix-cache.jsonl --format mooncake --interval 60 --prometheus /var/lib/node_exporter/kv.prom
  tail -F access.csv | stackdist watch - --format csv --sample-size 100000 --targets 0.9,0.95
  stackdist watch trace.csv --no-follow --output answers.jsonl
"""
_EOF = None


def add_watch_parser(sub: Any) -> None:
    """Register ``watch`` on the subcommand parsers ``sub``."""
    w = sub.add_parser("watch", help="follow a growing trace and write the current answers every interval",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Online planning: working sets, hit rates and coverage per interval and cumulative.")
    w.add_argument("trace", type=InputPath, help="a trace file that grows (followed from its start), or - for standard input")
    add_format_argument(w, line_records=True, help="the trace format, one whose lines are records on their own (default: "
                        "from the extension; csv for standard input)")
    w.add_argument("--block-size", type=bounded_int("--block-size", 1), help="tokens per block (request formats)")
    w.add_argument("--semantics", choices=["per-access", "engine"], default="per-access",
                   help="request traces: per-access LRU block by block (default), or engine: each request reads the "
                   "cache as it found it, a block hits when its whole prefix does, committed tail first")
    w.add_argument("--interval", type=finite_float("--interval", 0, 86400, lo_open=True), default=10.0,
                   metavar="SECONDS", help="seconds between answers (default 10)")
    w.add_argument("--targets", default="0.5,0.9,0.95,0.99", help="hit-rate targets (default 0.5,0.9,0.95,0.99)")
    w.add_argument("--capacities", metavar="C1,C2,...", help="also report the hit rate at these capacities")
    w.add_argument("--bytes-per-unit", type=bounded_int("--bytes-per-unit", 1), metavar="B",
                   help="bytes per capacity unit (per block for request traces), for the _bytes answers")
    w.add_argument("--output", "-o", type=OutputPath, default="-", metavar="FILE", help="append the JSON lines here (default stdout)")
    w.add_argument("--prometheus", type=OutputPath, metavar="FILE", help="rewrite this Prometheus text file every interval")
    w.add_argument("--sample-rate", type=finite_float("--sample-rate", 0, 1, lo_open=True), metavar="R",
                   help="SHARDS sampling rate (approximate answers)")
    w.add_argument("--sample-size", type=bounded_int("--sample-size", 1), metavar="S",
                   help="SHARDS fixed size: at most S keys in memory (approximate answers)")
    w.add_argument("--seed", type=bounded_int("--seed", 0), default=0, help="hash seed for sampling (default 0)")
    w.add_argument("--poll", type=finite_float("--poll", 0, 60, lo_open=True), default=0.2, metavar="SECONDS",
                   help="how often to look for new lines at the end of a file (default 0.2)")
    w.add_argument("--no-follow", action="store_true", help="stop at the end of the file instead of waiting for more")


def _emit(out: IO[str], record: dict[str, Any], prometheus: str | None) -> None:
    out.write(json.dumps(record, separators=(",", ":")) + "\n")  # one write per line
    out.flush()
    if prometheus:
        write_atomic(prometheus, prometheus_text(record))


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
    """Follow the trace; write one JSON line per interval (and the Prometheus file)."""
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
    watcher = _online_plan(args)
    out = sys.stdout if args.output == "-" else open(args.output, "a", encoding="utf-8")  # noqa: SIM115
    stop = threading.Event()
    lines: queue.Queue = queue.Queue(maxsize=1 << 20)
    _reader(args, lines, stop)
    print(f"stackdist watch: following {args.trace}, an answer every {args.interval:g} s (Ctrl-C to stop)",
          file=sys.stderr, flush=True)
    status = EXIT_OK
    try:
        status = _loop(watcher, lines, out, args)
    except KeyboardInterrupt:
        stop.set()
        _drain(watcher, lines)
        _emit(out, watcher.snapshot(final=True), args.prometheus)
        print("stackdist watch: interrupted; the last answers are written", file=sys.stderr)
        status = EXIT_INTERRUPTED
    finally:
        if out is not sys.stdout:
            out.close()
    return status


def _online_plan(args: argparse.Namespace) -> Any:
    """The library's online planner (:class:`stackdist.methods.watch.OnlinePlan`) from the flags."""
    from stackdist.methods.method import method_of
    from stackdist.methods.watch import OnlinePlan, WatchOptions

    method = method_of(args.sample_rate, args.sample_size, 1, args.seed)
    return OnlinePlan(WatchOptions(args.trace, args.format, args.block_size, args.semantics, method,
                                   fraction_list(args.targets, "--targets"),
                                   None if args.capacities is None else int_list(args.capacities, "--capacities"),
                                   args.bytes_per_unit))


def _drain(watcher: Any, lines: queue.Queue) -> None:
    while True:
        try:
            item = lines.get_nowait()
        except queue.Empty:
            break
        if isinstance(item, tuple):
            watcher.pending.append(item)
    watcher.flush()


def _loop(watcher: Any, lines: queue.Queue, out: IO[str], args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.interval
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
            _emit(out, record, args.prometheus)
            return EXIT_OK
        if item:
            watcher.pending.append(item)
        if len(watcher.pending) >= 1 << 16:
            watcher.flush()
        if time.monotonic() >= deadline:
            watcher.flush()
            _emit(out, watcher.snapshot(final=False), args.prometheus)
            deadline = time.monotonic() + args.interval
