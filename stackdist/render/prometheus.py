"""``stackdist watch``'s answers as Prometheus metrics: one list of metric families built from a
watch record (:func:`metric_families`), written as text-format (:func:`prometheus_text`, for a
node exporter's textfile collector; no dependency) or served over HTTP by ``prometheus_client``
(:func:`serve`, the optional extra ``pip install 'stackdist[watch]'``), the same families both
ways.

Names carry their unit (``_ratio``, ``_blocks``, ``_tokens``, ``_bytes``, ``_total``); every
sample carries the watch's constant labels (``trace``, ``semantics``, ``unit``, and ``model`` /
``kv_dtype`` when the bytes come from a model) and ``window``: ``all`` for everything so far,
or the trailing window (``10m``). A window with no accesses has no hit rate: its samples are
left out (a scrape shows no sample, never a 0 that reads as "the cache died"). Format of the
text: https://prometheus.io/docs/instrumenting/exposition_formats/ (HELP, TYPE, escaped label
values).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stackdist.errors import UsageError

__all__ = ["Exporter", "MetricFamily", "metric_families", "prometheus_text", "serve"]

PREFIX = "stackdist_kv_"


@dataclass
class MetricFamily:
    """One metric: its full ``name`` (a counter's ends in ``_total``), ``type`` (gauge or
    counter), ``help`` line and ``samples`` (labels, value)."""

    name: str
    type: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


def _scopes(record: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    info = record.get("window_info") or {}
    return [("all", record["cumulative"]), (str(info.get("label", "interval")), record.get("window") or {})]


def metric_families(record: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> list[MetricFamily]:
    """The metric families of one ``watch`` record (its ``cumulative`` and ``window`` answers);
    ``labels``: the constant labels of every sample. Samples with no value (an empty window, an
    unreachable target) are left out. O(targets + capacities).

    >>> fams = metric_families({"cumulative": {"accesses": 4, "ceiling_hit_rate": 0.5, "working_set": {"0.9": 2}},
    ...                         "window": {"accesses": 0, "ceiling_hit_rate": None, "working_set": {"0.9": None}}},
    ...                        {"trace": "t.csv"})
    >>> [(f.name, len(f.samples)) for f in fams]
    [('stackdist_kv_accesses_total', 1), ('stackdist_kv_window_accesses', 2), ('stackdist_kv_ceiling_hit_ratio', 1), ('stackdist_kv_working_set_units', 1)]
    """
    const = dict(labels or {})
    unit = const.get("unit", "units")
    suffix = "blocks" if unit == "blocks" else "units"
    fams: dict[str, MetricFamily] = {}

    def add(name: str, kind: str, help: str, value: Any, **extra: str) -> None:
        fam = fams.setdefault(name, MetricFamily(name, kind, help))
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            fam.samples.append(({**const, **extra}, float(value)))

    cum = record["cumulative"]
    add(PREFIX + "accesses_total", "counter", f"Accesses replayed so far ({unit}; every block of a request is one).",
        cum["accesses"])
    if "coverage" in cum:
        add(PREFIX + "requests_total", "counter", "Requests replayed so far.", cum["coverage"]["requests"])
    if cum.get("tokens") is not None:
        add(PREFIX + "block_tokens_total", "counter", "Tokens in the blocks replayed so far (full blocks).", cum["tokens"])
    for window, ans in _scopes(record):
        n = ans.get("accesses")
        add(PREFIX + "window_accesses", "gauge", f"Accesses in the window ({unit}; window=all: everything so far).", n,
            window=window)
        if not n:  # nothing to answer from: no sample, not a 0
            continue
        add(PREFIX + "ceiling_hit_ratio", "gauge", "Hit ratio of an infinite cache (every reuse hits) over the window.",
            ans.get("ceiling_hit_rate"), window=window)
        of = str(ans.get("targets_of", "ceiling"))
        for key, name, what in (("working_set", f"working_set_{suffix}", unit), ("working_set_tokens", "working_set_tokens", "tokens"),
                                ("working_set_bytes", "working_set_bytes", "KV bytes")):
            for target, v in (ans.get(key) or {}).items():
                add(PREFIX + name, "gauge", f"Smallest LRU capacity ({what}) whose hit ratio reaches the target fraction "
                    f"of the {of}'s hit ratio over the window.", v, window=window, target=target, of=of)
        for cap, v in (ans.get("hit_rate") or {}).items():
            add(PREFIX + "hit_ratio", "gauge", "LRU hit ratio at the capacity over the window.", v, window=window,
                capacity=cap)
        for q, v in (ans.get("coverage") or {}).items():
            if q.startswith("p"):
                add(PREFIX + f"request_reuse_depth_{suffix}", "gauge", f"Quantile of the LRU capacity ({unit}) a request "
                    "needs for all its reuse to hit, over the requests with reuse in the window.", v, window=window,
                    quantile=f"{float(q[1:]) / 100:g}")
    if record.get("state_bytes") is not None:
        add("stackdist_watch_state_bytes", "gauge", "Memory of the watch's replay state.", record["state_bytes"])
    if record.get("sample_rate") is not None:
        add("stackdist_watch_sample_ratio", "gauge", "SHARDS sampling rate (1: exact).", record["sample_rate"])
    if record.get("time_s") is not None:
        add("stackdist_watch_last_answer_timestamp_seconds", "gauge", "When the answers were computed (Unix time).",
            record["time_s"])
    return [f for f in fams.values() if f.samples]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def prometheus_text(record: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> str:
    """A watch record as Prometheus text-format metrics with HELP and TYPE lines. O(samples).

    >>> print(prometheus_text({"cumulative": {"accesses": 5, "ceiling_hit_rate": 0.5, "working_set": {"0.9": 4}}},
    ...                       {"trace": "a.csv"}), end="")
    # HELP stackdist_kv_accesses_total Accesses replayed so far (units; every block of a request is one).
    # TYPE stackdist_kv_accesses_total counter
    stackdist_kv_accesses_total{trace="a.csv"} 5
    # HELP stackdist_kv_window_accesses Accesses in the window (units; window=all: everything so far).
    # TYPE stackdist_kv_window_accesses gauge
    stackdist_kv_window_accesses{trace="a.csv",window="all"} 5
    # HELP stackdist_kv_ceiling_hit_ratio Hit ratio of an infinite cache (every reuse hits) over the window.
    # TYPE stackdist_kv_ceiling_hit_ratio gauge
    stackdist_kv_ceiling_hit_ratio{trace="a.csv",window="all"} 0.5
    # HELP stackdist_kv_working_set_units Smallest LRU capacity (units) whose hit ratio reaches the target fraction of the ceiling's hit ratio over the window.
    # TYPE stackdist_kv_working_set_units gauge
    stackdist_kv_working_set_units{trace="a.csv",window="all",target="0.9",of="ceiling"} 4
    """
    out = []
    for fam in metric_families(record, labels):
        out += [f"# HELP {fam.name} {_escape(fam.help)}", f"# TYPE {fam.name} {fam.type}"]
        for lab, value in fam.samples:
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in lab.items())
            out.append(f"{fam.name}{{{text}}} {_number(value)}" if text else f"{fam.name} {_number(value)}")
    return "\n".join(out) + "\n"


class _Latest:
    """The last record, swapped under a lock (the HTTP thread reads it at each scrape)."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = dict(labels)
        self.record: Mapping[str, Any] | None = None
        self.lock = threading.Lock()

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.lock:
            record = self.record
        if record is None:
            return
        for fam in metric_families(record, self.labels):
            names = list(fam.samples[0][0])
            if fam.type == "counter":
                metric: Any = CounterMetricFamily(fam.name.removesuffix("_total"), fam.help, labels=names)
            else:
                metric = GaugeMetricFamily(fam.name, fam.help, labels=names)
            for lab, value in fam.samples:
                metric.add_metric([lab[k] for k in names], value)
            yield metric


class Exporter:
    """A running HTTP endpoint: :meth:`update` with each new record; :attr:`port` is the bound
    port (0 picks a free one); :meth:`close` stops it."""

    def __init__(self, host: str, port: int, labels: Mapping[str, str], flag: str) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.latest = _Latest(labels)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.latest)  # type: ignore[arg-type]
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise UsageError(f"{flag} {host}:{port}: cannot listen there ({exc.strerror or exc}).") from None
        self.port = int(self.server.server_address[1])

    def update(self, record: Mapping[str, Any]) -> None:
        """Serve ``record`` from the next scrape on. O(1)."""
        with self.latest.lock:
            self.latest.record = record

    def close(self) -> None:
        """Stop serving. O(1)."""
        self.server.shutdown()
        self.server.server_close()


def serve(host: str, port: int, labels: Mapping[str, str], flag: str) -> Exporter:
    """Start the HTTP endpoint (``prometheus_client``) asked for by ``flag``; a UsageError with
    the install hint when ``prometheus_client`` is missing. O(1)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise UsageError(f"{flag} serves metrics with prometheus_client; install it with: "
                         "pip install 'stackdist[watch]' (the Prometheus textfile needs nothing)") from None
    return Exporter(host, port, labels, flag)
