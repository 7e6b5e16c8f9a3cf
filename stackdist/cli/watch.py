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
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from stackdist.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError, require_data
from stackdist.output import tool_header, write_atomic
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


def follow_lines(stream: IO[bytes], follow: bool, poll_s: float, stop: threading.Event) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every complete non-blank line, waiting at the end for more when
    ``follow`` (a partial last line waits for its newline). Ends at EOF otherwise, or on ``stop``.

    >>> import io; list(follow_lines(io.BytesIO(b"a\\n\\nb"), False, 0.1, threading.Event()))
    [(1, b'a'), (3, b'b')]
    """
    lineno, pending = 0, b""
    while not stop.is_set():
        raw = stream.readline()
        if not raw:
            if not follow:
                break
            time.sleep(poll_s)
            continue
        pending += raw
        if not pending.endswith(b"\n") and follow:
            continue
        lineno += 1
        line, pending = pending.rstrip(b"\r\n"), b""
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line.strip():
            yield lineno, line
    if pending.strip() and not stop.is_set():
        yield lineno + 1, pending.rstrip(b"\r\n")


class _Watcher:
    """The state of one watch: the sampler, coverage counters and the last snapshot."""

    def __init__(self, args: argparse.Namespace) -> None:
        from stackdist.engine.scale.estimate import QuantileCounter
        from stackdist.engine.scale.sampling import ShardsSampler
        from stackdist.traces.stream_input import AccessLineParser

        self.args = args
        self.requests = is_request_format(args.format)
        rate = args.sample_rate if args.sample_rate is not None or args.sample_size is not None else 1.0
        self.sampler = ShardsSampler(rate, args.sample_size, args.seed)
        self.sampled = args.sample_rate is not None or args.sample_size is not None
        self.parser = None if self.requests else AccessLineParser(args.trace if args.trace != "-" else "-", args.format)
        self.cover_all, self.cover_window = QuantileCounter(), QuantileCounter()
        self.n_requests = [0, 0]
        self.last = self.sampler.curve()
        self.targets = fraction_list(args.targets, "--targets")
        self.caps = None if args.capacities is None else int_list(args.capacities, "--capacities")
        self.intervals = 0
        self.pending: list[tuple[int, bytes]] = []  # lines taken from the reader, not replayed yet

    def flush(self) -> None:
        """Replay the pending lines."""
        batch, self.pending = self.pending, []
        self.feed(batch)

    def feed(self, lines: list[tuple[int, bytes]]) -> None:
        from stackdist.traces.stream_input import parse_request_lines

        if not lines:
            return
        if self.parser is not None:
            keys, sizes = self.parser.parse(lines)
            self.sampler.feed(keys, sizes)
            return
        trace = parse_request_lines(self.args.trace, lines, self.args.format, self.args.block_size)
        if getattr(self.args, "semantics", "per-access") == "engine":  # effective depths, already scaled
            d = self.sampler.feed_requests(trace.block_ids, trace.offsets)
            scaled = np.where((d >= 0) & (d != np.iinfo(np.int64).max), d, -1)
        else:
            got = self.sampler.feed(trace.block_ids)
            assert got is not None
            rate = self.sampler.rate
            scaled = np.where((got >= 0) & (got != np.iinfo(np.int64).max), np.ceil(got / rate), -1).astype(np.int64)
        lengths = np.diff(trace.offsets)
        has = lengths > 0
        needs = np.full(trace.n_requests, -1, np.int64)
        if trace.n_blocks:
            needs[has] = np.maximum.reduceat(scaled, trace.offsets[:-1][has])
        reused = needs[needs > 0]
        self.cover_all.add(reused)
        self.cover_window.add(reused)
        self.n_requests[0] += trace.n_requests
        self.n_requests[1] += trace.n_requests

    def _answers(self, curve: Any, cover: Any, n_requests: int) -> dict[str, Any]:
        unit = self.args.bytes_per_unit
        ws = {f"{t:g}": curve.min_capacity_for(hit_rate=t) for t in self.targets}
        out: dict[str, Any] = {"accesses": curve.n_accesses, "ceiling_hit_rate": curve.ceiling_hit_rate, "working_set": ws}
        if unit:
            out["working_set_bytes"] = {k: None if v is None else v * unit for k, v in ws.items()}
        if self.caps is not None:
            out["hit_rate"] = {str(c): float(curve.hit_rate_at(c)) for c in self.caps}
        if self.requests:
            out["coverage"] = {"requests": n_requests, "requests_with_reuse": cover.count,
                               **{f"p{q * 100:g}": cover.quantile(q) for q in (0.5, 0.9, 0.99)}}
        return out

    def snapshot(self, final: bool) -> dict[str, Any]:
        now = self.sampler.curve()
        record = {**tool_header("watch"), "time_s": round(time.time(), 3), "interval": self.intervals, "final": final,
                  "sampled": self.sampled, "sample_rate": now.rate, "sample_size": self.args.sample_size,
                  "state_bytes": self.sampler.state_nbytes,
                  "window": self._answers(now.since(self.last), self.cover_window, self.n_requests[1]),
                  "cumulative": self._answers(now, self.cover_all, self.n_requests[0])}
        self.last, self.intervals = now, self.intervals + 1
        self.cover_window = type(self.cover_window)()
        self.n_requests[1] = 0
        return record


def prometheus_text(record: dict[str, Any]) -> str:
    """A JSON line of ``watch`` as Prometheus text-format metrics (cumulative answers). O(targets).

    >>> print(prometheus_text({"cumulative": {"accesses": 5, "ceiling_hit_rate": 0.5, "working_set": {"0.9": 4},
    ...                                       "working_set_bytes": {"0.9": 64}}}), end="")
    # TYPE kv_accesses_total counter
    kv_accesses_total 5
    # TYPE kv_ceiling_hit_rate gauge
    kv_ceiling_hit_rate 0.5
    # TYPE kv_working_set_units gauge
    kv_working_set_units{target="0.9"} 4
    # TYPE kv_working_set_bytes gauge
    kv_working_set_bytes{target="0.9"} 64
    """
    c = record["cumulative"]
    lines = ["# TYPE kv_accesses_total counter", f"kv_accesses_total {c['accesses']}",
             "# TYPE kv_ceiling_hit_rate gauge", f"kv_ceiling_hit_rate {c['ceiling_hit_rate']:.6g}"]
    for name, key in (("kv_working_set_units", "working_set"), ("kv_working_set_bytes", "working_set_bytes")):
        if key in c:
            lines.append(f"# TYPE {name} gauge")
            lines += [f'{name}{{target="{t}"}} {v}' for t, v in c[key].items() if v is not None]
    if "hit_rate" in c:
        lines.append("# TYPE kv_hit_rate gauge")
        lines += [f'kv_hit_rate{{capacity="{k}"}} {v:.6g}' for k, v in c["hit_rate"].items()]
    return "\n".join(lines) + "\n"


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
    watcher = _Watcher(args)
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


def _drain(watcher: _Watcher, lines: queue.Queue) -> None:
    while True:
        try:
            item = lines.get_nowait()
        except queue.Empty:
            break
        if isinstance(item, tuple):
            watcher.pending.append(item)
    watcher.flush()


def _loop(watcher: _Watcher, lines: queue.Queue, out: IO[str], args: argparse.Namespace) -> int:
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
