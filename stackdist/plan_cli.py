"""``stackdist plan``: the capacity planner on a request trace (table, JSON, PNG)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from ._args import fraction_list
from ._io import Progress, write_json
from .errors import UsageError
from .report import PlanOptions, build_report, parse_duration

EXAMPLES = """examples:
  stackdist plan data/traces/mooncake_conversation_trace.jsonl
  stackdist plan trace.jsonl --reblock 16 --semantics engine --model llama-3.1-8b
  stackdist plan trace.jsonl --model-config config.json --targets 0.8,0.9 --warmup 10m --window 10m
  stackdist plan tokens.jsonl --format tokens --block-size 16 --json plan.json --plot plan.png
  stackdist plan trace.jsonl --json - | jq '.semantics.engine.working_set'

Capacities are exact for every size (one replay per semantics). --targets are prefix token
hit rates; each is answered both as an absolute rate and as a fraction of the infinite-cache
ceiling. Prices are per GB (1e9 bytes) and are assumptions unless you set --prices.
"""


def add_plan_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan", help="KV-cache capacity plan for a request trace", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="How much KV-cache memory buys each prefix hit rate, per semantics, in blocks, tokens and GiB.",
    )
    p.add_argument("trace", help="request trace (Mooncake JSONL by default)")
    p.add_argument("--format", choices=["mooncake", "tokens", "qwen", "csv"], default="mooncake",
                   help="mooncake (hash_ids), tokens (token-id JSONL), qwen (Qwen-Bailian), csv (key[,size]: one block per request)")
    p.add_argument("--block-size", type=int, help="tokens per block (default: 512 mooncake, 16 tokens/qwen)")
    p.add_argument("--reblock", type=int, metavar="TOKENS", help="split blocks into finer pages first (e.g. 512 -> 16)")
    p.add_argument("--partial-last-block", action="store_true", help="tokens format: also hash a final partial block")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed lines (and count them) instead of stopping")
    p.add_argument("--semantics", choices=["engine", "per-access", "both"], default="both")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", help="a known model name (default qwen2.5-1.5b, the lab's measured model)")
    model.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json for KV bytes per token")
    p.add_argument("--targets", default="0.9,0.95,0.99", help="prefix token hit-rate targets (default 0.9,0.95,0.99)")
    p.add_argument("--coverage", type=float, default=1.0, help="request coverage target Y in (0, 1] (default 1.0)")
    p.add_argument("--warmup", default="0", help="exclude the first N requests, or a duration like 10m (default 0)")
    p.add_argument("--window", metavar="DURATION", help="also answer per time window of this width (e.g. 10m), and cumulatively")
    p.add_argument("--tier-targets", default="0.5,0.9,0.99",
                   help="HBM, +DRAM, +SSD targets: fractions of the ceiling's prefix tokens, and (second plan) of requests covered")
    p.add_argument("--prices", metavar="hbm=P,dram=P,ssd=P", help="US$ per GB for the tier plan (defaults are assumptions)")
    p.add_argument("--json", metavar="OUT", help="write the full report as JSON to OUT ('-' for stdout instead of the table)")
    p.add_argument("--plot", metavar="PNG", help="draw the hit curves against GiB with the target lines (needs matplotlib)")


def _prices(text: str | None) -> dict[str, float] | None:
    if text is None:
        return None
    prices = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if name.strip() not in ("hbm", "dram", "ssd") or price < 0:
            raise UsageError(f"--prices must look like hbm=187.5,dram=3.5,ssd=0.08 (non-negative US$ per GB); got {text!r}.")
        prices[name.strip()] = price
    return prices


def _options(args: argparse.Namespace) -> PlanOptions:
    from .geometry import DEFAULT_MODEL, from_hf_config, geometry_for

    if args.model_config:
        geometry = from_hf_config(args.model_config)
    elif args.model:
        geometry = geometry_for(args.model)
    else:
        geometry = DEFAULT_MODEL
    if not 0 < args.coverage <= 1:
        raise UsageError(f"--coverage must be in (0, 1]; got {args.coverage}.")
    warm = args.warmup.strip()
    try:
        if warm.isdigit():
            warm_requests, warm_seconds = int(warm), 0.0
        else:
            warm_requests, warm_seconds = 0, parse_duration(warm, "--warmup")
        window = parse_duration(args.window, "--window") if args.window else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if window is not None and window <= 0:
        raise UsageError(f"--window must be a positive duration; got {args.window!r}.")
    tiers = fraction_list(args.tier_targets, "--tier-targets")
    if tiers != sorted(tiers) or len(tiers) > 3:
        raise UsageError(f"--tier-targets must be 1 to 3 non-decreasing fractions (HBM, DRAM, SSD); got {args.tier_targets!r}.")
    return PlanOptions(
        semantics=("engine", "per-access") if args.semantics == "both" else (args.semantics,),
        geometry=geometry,
        targets=fraction_list(args.targets, "--targets"),
        coverage_target=args.coverage,
        warmup_requests=warm_requests,
        warmup_seconds=warm_seconds,
        window_seconds=window,
        tier_targets=tiers,
        prices_per_gb=_prices(args.prices),
        extra={"format": args.format, "reblocked_to": args.reblock},
    )


def _load(args: argparse.Namespace):
    from .prefix import reblock
    from .traces import RequestTrace, read_access_trace, read_requests

    if args.block_size is not None and args.block_size < 1:
        raise UsageError(f"--block-size must be a positive integer; got {args.block_size}.")
    if args.format == "csv":  # a key[,size] stream: every access is a one-block request
        from .distances import dense_keys

        access = read_access_trace(args.trace)
        n = access.n_accesses
        tokens = np.ones(n, np.int64) if access.sizes is None else access.sizes
        block_size = args.block_size or int(tokens.max(initial=1))
        if n and int(tokens.max()) > block_size:
            raise UsageError(f"--block-size ({block_size}) must be at least the largest size in {args.trace} ({int(tokens.max())}).")
        trace = RequestTrace(dense_keys(access.keys).ids, np.arange(n + 1), tokens, np.zeros(n), tokens,
                             np.zeros(n, np.int64), block_size=block_size, source=str(args.trace))
    else:
        trace = read_requests(args.trace, args.format, args.block_size, args.skip_bad, args.partial_last_block)
    if args.reblock is not None:
        trace = reblock(trace, args.reblock)
    return trace


def _fmt_cap(cap: dict[str, Any] | None) -> str:
    if cap is None:
        return "unreachable"
    return f"{cap['blocks']:>9,} blocks  {cap['tokens']:>12,} tokens  {cap['gib']:9.2f} GiB"


def render_table(report: dict[str, Any]) -> str:
    """The report as a readable text table."""
    t, m = report["trace"], report["model"]
    lines = [
        f"trace   {t['source']}: {t['requests']:,} requests, {t['blocks']:,} block accesses, "
        f"{t['distinct_blocks']:,} distinct blocks of {t['block_size_tokens']} tokens, {t['input_tokens']:,} input tokens"
        + (f" ({t['skipped_lines']} malformed lines skipped)" if t["skipped_lines"] else ""),
        f"model   {m['name']}: {m['kv_bytes_per_token']:,} KV bytes/token, {m['bytes_per_block'] / 2**20:.2f} MiB/block",
        f"counted {report['counted']['requests']:,} requests (warm-up excluded)",
    ]
    for name, sem in report["semantics"].items():
        s = sem["summary"]
        lines += ["", f"== {name} semantics ==",
                  f"ceiling (infinite cache): prefix token hit rate {s['ceiling_token_hit_rate']:.2%}, "
                  f"block hit rate {s['ceiling_block_hit_rate']:.2%}, reuse hit rate {s['ceiling_reuse_hit_rate']:.2%}",
                  "working set for a prefix token hit rate of:"]
        for w in sem["working_set"]:
            lines.append(f"  {w['target']:>6.1%} absolute          {_fmt_cap(w['token_hit_rate'])}")
            lines.append(f"  {w['target']:>6.1%} of the ceiling    {_fmt_cap(w['fraction_of_ceiling'])}")
        cov = sem["coverage"]
        lines.append(f"request coverage (first ceil(H x {cov['target']:g}) reusable blocks hit), "
                     f"{cov['n_requests_with_reuse']:,} of {cov['n_requests']:,} requests have reuse:")
        for q, cap in cov["requests_with_reuse"].items():
            lines.append(f"  {q:>6} of requests with reuse  {_fmt_cap(cap)}")
        for key, what in (("tier_plan", "of the ceiling's prefix tokens"), ("tier_plan_by_coverage", "of requests with reuse covered")):
            plan = sem[key]
            lines.append(f"tier plan, targets as fractions {what} (exclusive bands of one LRU stack; prices "
                         + ("assumed" if plan["prices_are_assumptions"] else "given") + "):")
            for tier in plan["tiers"]:
                lines.append(f"  {tier['tier']:<4} {tier['target']:>6.1%}  "
                             f"{tier['blocks']:>9,} blocks {tier['gib']:9.2f} GiB  ${tier['cost_usd']:,.2f}")
            lines.append(f"  total ${plan['total_cost_usd']:,.2f}")
        for row in sem.get("time_windows", []):
            ws = row["window"]["working_set_fraction_of_ceiling"]
            first = next(iter(ws))
            lines.append(f"  window {row['start_s']:>8.0f}-{row['end_s']:<8.0f}s {row['requests']:>6,} req  ceiling "
                         f"{row['window']['ceiling_token_hit_rate']:.1%}  ws({first} of ceiling) {_fmt_cap(ws[first])}")
    if "comparison" in report:
        lines += ["", "== per-access vs engine =="]
        for r in report["comparison"]["working_sets"]:
            ratio = r["per_access_over_engine"]
            lines.append(f"  {r['fraction_of_ceiling']:>6.1%} of ceiling: engine {_fmt_cap(r['engine'])}")
            lines.append(f"  {'':>6}  per-access {_fmt_cap(r['per_access'])}" + (f"  (x{ratio:.2f})" if ratio else ""))
        gap = report["comparison"]["max_prefix_token_hit_rate_gap"]
        lines.append(f"  largest prefix token hit-rate gap (engine - per-access): {gap['engine_minus_per_access']:+.2%} "
                     f"at {gap['at']['gib']:.2f} GiB")
    return "\n".join(lines) + "\n"


def _plot(path: str, report: dict[str, Any], targets: list[float]) -> None:
    from .plot import plot_curves

    series = []
    for name, sem in report["semantics"].items():
        c = sem["curve"]
        series.append((f"{name}: prefix token hit rate", np.array(c["capacity_gib"]), np.array(c["prefix_token_hit_rate"])))
        series.append((f"{name}: block hit rate", np.array(c["capacity_gib"]), np.array(c["block_hit_rate"])))
    first = next(iter(report["semantics"].values()))
    ceiling = first["summary"]["ceiling_token_hit_rate"]
    hlines = [(f"ceiling {ceiling:.1%}", ceiling)] + [(f"{t:g} x ceiling", t * ceiling) for t in targets]
    vlines = [(f"{w['target']:g}: {w['fraction_of_ceiling']['gib']:.1f} GiB", w["fraction_of_ceiling"]["gib"])
              for w in first["working_set"] if w["fraction_of_ceiling"]]
    plot_curves(path, series, xlabel=f"KV-cache capacity (GiB, {report['model']['name']}, symlog)", hlines=hlines,
                vlines=vlines, title=f"{report['trace']['source']}", xscale="symlog")


def run_plan(args: argparse.Namespace) -> int:
    options = _options(args)
    trace = _load(args)
    report = build_report(trace, options, progress_factory=Progress)
    if args.json == "-":
        write_json("-", report)
    else:
        sys.stdout.write(render_table(report))
        if args.json:
            write_json(args.json, report)
    if args.plot:
        _plot(args.plot, report, list(options.targets))
    return 0
