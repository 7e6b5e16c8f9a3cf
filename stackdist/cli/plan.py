"""``stackdist plan``: the capacity planner on a request trace (table, JSON, PNG)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Any

from stackdist.errors import TraceFormatError, UsageError, require_data
from stackdist.methods.method import Method
from stackdist.methods.plan import plan
from stackdist.output import Progress, check_outputs, stage, write_json, write_stdout
from stackdist.planning.engine_plan import (
    JOINT_ROUTERS,
    ROUTERS,
    EngineOptions,
    check_models,
    parse_pools,
    per_request_columns,
    per_request_workers,
    schedule_for,
)
from stackdist.planning.offload_plan import offload_columns
from stackdist.planning.plan import PlanOptions
from stackdist.planning.prices import (
    AMORTISATION_HOURS,
    AMORTISATION_YEARS,
    parse_prices,
)
from stackdist.planning.routing import ROUTING_ROUTERS, RoutingOptions, parse_sizes
from stackdist.serving.engine_model import ENGINE_MODELS, engine_model
from stackdist.serving.offload import (
    OFFLOAD_MODELS,
    OffloadSpec,
    offload_model,
    parse_offload,
    resolve_offload,
)
from stackdist.serving.router_pick import DEFAULT_TEMPERATURE, LLM_D, LLMD_WEIGHTS
from stackdist.serving.schedule import Schedule
from stackdist.serving.semantics import SEMANTICS
from stackdist.traces.formats import REQUESTS, formats

from .args import (
    InputPath,
    OutputPath,
    add_format_argument,
    bounded_int,
    duration,
    finite_float,
    fraction_arg,
    fraction_list,
    parse_int,
    resolve_window,
    size_list,
    warmup_accesses,
    window_spec,
)
from .budget_args import (
    add_budget_arguments,
    budget_epilog,
    budget_options,
    check_hardware_flags,
    resolve_spec,
    with_budget_pools,
)
from .common import add_version, did_you_mean
from .deployment_file import add_deployment_arguments, echo_deployment
from .names import model_name
from .scale import is_sampled, method_from

MAX_WINDOWS = 10_000
"""The most time windows ``--window`` may cut a trace into."""

EXAMPLES = """examples:
  stackdist plan data/traces/mooncake_conversation_trace.jsonl
  stackdist plan trace.jsonl --reblock 16 --semantics engine --model llama-3.1-8b
  stackdist plan trace.jsonl --model-config config.json --targets 0.8,0.9 --warmup 10m --every 10m
  stackdist plan trace.jsonl --window=-1h: --warmup 10%         # the last hour, its first 10% warming the cache
  stackdist plan tokens.jsonl --format tokens --block-size 16 --json plan.json --plot plan.png
  stackdist plan trace.jsonl --json - | jq '.semantics.engine.working_set'
  stackdist plan trace.jsonl --model qwen3-8b --gpu h200 --capacity 40GiB,80GiB --kv-dtype fp8
  stackdist plan trace.jsonl --model Qwen/Qwen3-8B --gpu H200 --kv-dtype fp8_e4m3fn --weights 9GB --targets 90%,99%
  stackdist plan trace.jsonl --model qwen3-8b --gpu h100 --gpus 8 --gpu-price 2.5 --prices dram=3,ssd=0.1
  stackdist plan trace.jsonl --semantics vllm --gpu-blocks 60000 --offload vllm-native:cpu=256/512GiB,policy=arc
  stackdist plan trace.jsonl --gpu-blocks 60000 --offload lmcache:cpu=512GiB,disk=4TiB --per-request hits.csv
  stackdist plan trace.jsonl --semantics vllm --gpu-blocks 30000,60000 --schedule scheduler --gpu h200 --per-request load.csv
  stackdist plan trace.jsonl --semantics vllm --schedule scheduler --model qwen3-8b --gpu h200 --workers 4 --router session
  stackdist plan trace.jsonl --deployment examples/qwen3-32b-8xh200.toml --gpus-per-replica 1  # a saved deployment, one flag changed

Capacities are exact for every size (one replay per semantics). --targets are prefix token
hit rates; each is answered both as an absolute rate and as a fraction of the infinite-cache
ceiling. Prices are per GB (1e9 bytes) and are assumptions unless you set --prices.
With --gpu the deployment (replicas x GPUs) is priced: US$/hour = GPUs x the GPU's price per
GPU-hour (an assumed on-demand price from gpus.json, or --gpu-price) + the DRAM or SSD GiB
behind one replica at the --prices dram/ssd prices amortised over 3 years; US$ per million
input tokens = US$/hour / the trace's input tokens per hour (over its time span).
"""


def add_plan_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan", help="KV-cache capacity plan for a request trace", epilog=EXAMPLES + budget_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="How much KV-cache memory buys each prefix hit rate, per semantics, in blocks, tokens and GiB.",
    )
    add_version(p)
    p.set_defaults(table_to_stdout=True)  # the table (or --json -) always goes to stdout
    p.add_argument("trace", type=InputPath, nargs="+", metavar="TRACE",
                   help="request trace (Mooncake JSONL by default; .gz/.zst; - for standard input); several files or a "
                   "glob are one trace, in order")
    add_format_argument(p, default="mooncake", help="the trace format (default mooncake); an access stream (key[,size]) "
                        "is planned as one block per request")
    sizes = ", ".join(f"{f.block_size} {f.name}" for f in formats(REQUESTS) if f.block_size)
    own = " and ".join(f.name for f in formats(REQUESTS) if f.block_size is None)
    p.add_argument("--block-size", type=bounded_int("--block-size", 1, 2**31),
                   help=f"tokens per block (default: {sizes}; {own} files state their own)")
    p.add_argument("--reblock", type=bounded_int("--reblock", 1, 2**31), metavar="TOKENS", help="split blocks into finer pages first (e.g. 512 -> 16)")
    p.add_argument("--partial-last-block", action="store_true", help="tokens format: also hash a final partial block")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed lines (and count them) instead of stopping")
    p.add_argument("--semantics", type=_semantics_argument, default="both", metavar="NAMES",
                   help=f"comma-separated: engine (idealized prefix LRU), per-access (KVSET), {', '.join(ENGINE_MODELS)} "
                   "(the engines' own caches), both (= engine,per-access) or all (default both)")
    eng = p.add_argument_group(f"engine models (--semantics {' / '.join(ENGINE_MODELS)})")
    units = "; ".join(f"{m.name}: {m.pool_unit}" for m in ENGINE_MODELS.values())
    eng.add_argument("--gpu-blocks", metavar="N1,N2,...",
                     help=f"pool sizes in the engine's own count ({units}; as in the engine's start-up log); "
                     "'inf' for no eviction (default: 8 sizes spread up to no eviction, and inf). "
                     "With --semantics engine and --workers or --shared-blocks: each worker's GPU cache, in blocks "
                     "of the trace's block size (after --reblock) (default: 4 sizes up to the distinct blocks / K)")
    eng.add_argument("--engine-block-size", type=int, default=None, metavar="TOKENS",
                     help="the engine's KV block (page) size in tokens (default 16)")
    eng.add_argument("--gdn-checkpoint-alignment", type=int, default=None, metavar="TOKENS",
                     help="a Mamba (gated delta net) hybrid such as Qwen3-Next: the grid on which vLLM's GDN prefill "
                     "exports mid-prefill states, which sets the raised block and the prefill checkpoints (default 64, "
                     "the FlashInfer prefill; 0: the Triton/FLA prefill, which exports none)")
    eng.add_argument("--decode", action=argparse.BooleanOptionalAction, default=None,
                     help="generated tokens occupy and are cached in blocks as the engine writes them "
                     "(default: on when the trace gives output lengths)")
    eng.add_argument("--schedule", type=InputPath, metavar="serial|model|scheduler|recorded|FILE.csv",
                     help="when requests run: serial (one at a time), model (arrival from the trace, prefill and "
                     "decode at the rates below), scheduler (the engine's own scheduler under load, arrivals from the "
                     "trace: waiting queue, token budget and chunked prefill, preemption; "
                     f"{', '.join(_able('scheduler'))} model; see --step-time), recorded (the trace's own times, "
                     "e.g. Dynamo's) or a CSV request,arrival_s,prefill_end_s,finish_s (default: recorded when the "
                     "trace has it, else model)")
    eng.add_argument("--step-time", metavar="FIXED_S,PER_TOKEN_S",
                     help="--schedule scheduler: a step that schedules T tokens lasts FIXED_S + T x PER_TOKEN_S seconds "
                     "(default: the fit to --ttft-calibration; with --gpu h200 and the measured model (qwen2.5-1.5b), "
                     "the fit to the bundled H200 measurements; with --gpu and --model, the roofline (weights read once "
                     "per step, FLOPs and KV reads per token); else 0.020,0.00001, an assumption; the table says which)")
    eng.add_argument("--max-num-seqs", type=bounded_int("--max-num-seqs", 1, 2**20),
                     help="--schedule scheduler: vLLM's max_num_seqs (default 1024)")
    eng.add_argument("--max-num-batched-tokens", type=bounded_int("--max-num-batched-tokens", 1, 2**30),
                     help="--schedule scheduler: vLLM's max_num_batched_tokens, the token budget per step (default 8192)")
    eng.add_argument("--swa-full-tokens-ratio", type=finite_float("--swa-full-tokens-ratio", 0.0, 64.0, lo_open=True),
                     metavar="R", help="a model with sliding-window layers on the sglang model: SGLang's "
                     "swa_full_tokens_ratio, its sliding-window KV pool in tokens per full-attention pool token "
                     "(default 0.8, SGLang's)")
    eng.add_argument("--async-scheduling", action="store_true",
                     help="--schedule scheduler: vLLM's async scheduling (AsyncScheduler: the next step is scheduled "
                     "while one runs, a finished request's blocks are freed a step later)")
    _add_routing_arguments(eng)
    eng.add_argument("--decode-reuse", action="store_true",
                     help="a later request of the same session that extends an earlier prompt and its answer reuses "
                     f"the KV the earlier request wrote while decoding ({', '.join(_able('decode_reuse'))} model)")
    eng.add_argument("--prefill-tokens-per-s", type=float, default=10000.0, metavar="R",
                     help="service model: prefill speed (default 10000 tokens/s)")
    eng.add_argument("--decode-tokens-per-s", type=float, default=50.0, metavar="R",
                     help="service model: decode speed per request (default 50 tokens/s)")
    eng.add_argument("--offload", action="append", metavar="MODEL:tier=SIZE,...",
                     help=f"offload tiers behind the engine's GPU cache, as the engine implements them: {_offload_help()}. "
                     "Sizes in the model's unit, tokens, or bytes (64GiB, 1TiB: converted with the model's KV bytes per "
                     "token); '/' gives a ladder (cpu=64/128/256GiB); repeat the flag for several models. Adds the "
                     "engine model it sits behind to --semantics; the serial schedule (the engines' transfer timing "
                     "is not modelled). Reports hits by tier, write traffic per tier, and the tier size each --targets "
                     "fraction of the ceiling needs")
    eng.add_argument("--per-request", type=OutputPath, metavar="FILE.csv",
                     help="one row per request: request,id,arrival_s,worker,input_tokens,output_tokens, then per pool N "
                     "hit_tokens_<N> (GPU prefix hits as the engine reports them), with kv-aware worker_<N> (the worker "
                     "at that pool; worker is then -1), with --shared-blocks shared_hit_tokens_<N>_<S>, with --offload "
                     "offload_hit_tokens_<N> (the tokens the offload connector reports loadable beyond the GPU hit; "
                     "_<sizes> appended when several tier sizes are run; per tier offload_<tier>_hit_tokens_<N> for "
                     "two tiers) (one file per model, FILE.<model>.csv, when several are asked for)")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", type=model_name, help="a bundled model or its Hugging Face repo id, any case (listed "
                       "below; default qwen2.5-1.5b, the lab's measured model)")
    model.add_argument("--model-config", type=InputPath, metavar="FILE", help="a Hugging Face config.json for KV bytes per token")
    _add_counting_arguments(p)
    p.add_argument("--tier-targets", default="0.5,0.9,0.99", metavar="R1,R2,R3",
                   help="HBM, +DRAM, +SSD targets: fractions (or percentages) of the ceiling's prefix tokens, and "
                   "(second plan) of requests covered")
    p.add_argument("--prices", metavar="hbm=P,dram=P,ssd=P",
                   help="US$ per GB (1e9 bytes, purchase) for the tier plan (defaults are assumptions); with --gpu, dram "
                   f"and ssd also price the CPU/SSD GiB behind a replica, amortised over {AMORTISATION_YEARS} years "
                   f"(US$ per GB / {AMORTISATION_HOURS:,} per hour); hbm is not used for a deployment (the GPU's hourly price includes its HBM)")
    p.add_argument("--optimal", action="store_true",
                   help="also compute Belady's bound (evict the block reused furthest ahead) at the working sets")
    p.add_argument("--json", "--output", "-o", dest="json", type=OutputPath, metavar="OUT", help="write the full report as JSON to OUT ('-' for stdout instead of the table)")
    p.add_argument("--plot", type=OutputPath, metavar="PNG", help="draw the hit curves against GiB with the target lines (needs matplotlib)")
    add_budget_arguments(p)
    add_deployment_arguments(p)
    p.set_defaults(flag_defaults={a.dest: a.default for a in p._actions})  # what "given" means for a flag


def _add_counting_arguments(p: argparse.ArgumentParser) -> None:
    """The targets and what is counted: ``--targets``, ``--coverage``, ``--warmup``, ``--window``, ``--every``."""
    p.add_argument("--targets", default="0.9,0.95,0.99", metavar="R1,R2,...",
                   help="prefix token hit-rate targets, fractions or percentages (default 0.9,0.95,0.99; or 90%%,95%%)")
    p.add_argument("--coverage", type=fraction_arg("--coverage"), default=1.0, metavar="Y",
                   help="request coverage target Y in (0, 1], a fraction or a percentage (default 1.0 = 100%%)")
    p.add_argument("--warmup", default="0", metavar="N|DURATION|P%",
                   help="exclude the first N requests of the window, its first DURATION (e.g. 10m) or P%% of its requests "
                   "from the counts; they still fill the cache (default 0)")
    p.add_argument("--window", metavar="START:STOP",
                   help="the requests that are counted, START:STOP (either may be empty); each end is a request index "
                   "(negative counts from the end: write --window=-2:), a duration from the first request (10m; "
                   "negative from the last: --window=-1h:) or a percentage of the requests (25%%); earlier requests "
                   "only fill the cache. (The old --window DURATION is --every DURATION.)")
    p.add_argument("--every", metavar="DURATION", help="also answer per time window of this width, with its unit (90s, "
                   "10m, 1h; a bare number is refused), and cumulatively")


def _add_routing_arguments(eng: Any) -> None:
    """Workers, routers and the shared tier (both the engine semantics and the engine models)."""
    eng.add_argument("--max-replicas", type=bounded_int("--max-replicas", 1, 256), default=8, metavar="N",
                     help="with --gpu: the deployment search tries 1 to N replicas (default 8, or the deployment's own "
                     "count if larger) for each --targets fraction of the ceiling")
    eng.add_argument("--ttft-target", action="append", default=[], metavar="pP=SECONDS",
                     help="with --gpu: the fewest replicas whose TTFT percentile (p50, p90 or p99) under the engine's "
                     "scheduler is at most SECONDS, e.g. p99=2 (repeatable)")
    eng.add_argument("--workers", default="one", metavar="recorded|K",
                     help="recorded: each request on the worker the trace names; K: K workers chosen by --router; "
                     "each worker has its own pool of --gpu-blocks (default: one worker); reported per worker, in total, "
                     "and (K > 1) every router at K workers of C blocks against one cache of K x C")
    eng.add_argument("--router", default="round-robin", choices=[*ROUTING_ROUTERS, LLM_D],
                     help="how requests are spread over K workers (default round-robin); kv-aware: NVIDIA Dynamo's KV "
                     "router cost, W x prefill blocks still to compute (after the prefix the worker's engine would "
                     "report) + active blocks, lowest wins, ties at random (--seed; --router-temperature samples); "
                     "simulated jointly with the caches, per pool size; llm-d (--semantics vllm or sglang): llm-d's "
                     "scheduler, precise prefix-cache + KV-usage + queue scores (--router-weights), the highest wins, "
                     "ties at random, simulated jointly; sglang-cache-aware: SGLang's sgl-router "
                     "cache_aware policy (load imbalanced: the least loaded; else the longest prefix in the router's own "
                     "tree of what it sent each worker if over --router-cache-threshold of the prompt, else the smallest "
                     "tree), under the schedule; production-stack-prefixaware: the vLLM Production Stack router's "
                     "prefixaware logic (one of the workers holding the longest prefix in its never-evicted trie of what "
                     "it sent, at random; no load read); aibrix-prefix-cache: AIBrix's prefix-cache router (running "
                     "requests imbalanced by more than 8: only the least loaded; the longest prefix in its LRU table of "
                     "what it sent among the workers loaded at most mean + 1 std, else the least loaded), under the "
                     "schedule")
    eng.add_argument("--router-cache-threshold", type=float, default=0.3, metavar="T",
                     help="sglang-cache-aware: SGLang's cache_threshold, the prompt fraction a worker's router tree must "
                     "match to win (default 0.3, the sglang-router launcher's)")
    eng.add_argument("--router-table-blocks", type=bounded_int("--router-table-blocks", 0, 2**40), default=200_000,
                     metavar="N",
                     help="aibrix-prefix-cache: AIBRIX_PREFIX_CACHE_BLOCK_NUMBER, the router's prefix table in 4-byte "
                     "blocks of text, about a token each (default 200,000, AIBrix's: about 12 prompts of 16k tokens)")
    eng.add_argument("--router-overlap-weight", type=float, default=1.0, metavar="W",
                     help="kv-aware: Dynamo's overlap_score_weight W (default 1.0, Dynamo's); inf: the pure "
                     "longest-prefix router; 0: load only")
    eng.add_argument("--router-temperature", type=float, default=DEFAULT_TEMPERATURE, metavar="T",
                     help="kv-aware: Dynamo's router_temperature (default 0: the least cost, ties at random); T > 0 "
                     "samples a worker by softmax of the costs scaled by their range over T (random draws from --seed)")
    eng.add_argument("--router-weights", metavar="prefix=P,kv-cache=K,queue=Q",
                     help="llm-d: the scorer weights (default " + ",".join(f"{k}={v:g}" for k, v in LLMD_WEIGHTS.items())
                     + ", llm-d's precise-prefix-cache configuration); keys left out keep their default")
    eng.add_argument("--shared-blocks", metavar="S1,S2,...",
                     help="a second tier of S blocks shared by all workers (one LRU, written through; a hit continues "
                     "the GPU prefix in it; Mooncake Store / LMCache remote style); reports hits by tier at every "
                     "--gpu-blocks x S (0: none). Blocks of the trace's block size (engine semantics) or "
                     f"--engine-block-size pages ({', '.join(_able('tiers'))})")


def _options(args: argparse.Namespace) -> PlanOptions:
    from stackdist.planning.geometry import DEFAULT_MODEL, from_hf_config, geometry_for

    _check_schedule(args.schedule)

    try:
        if args.model_config:
            geometry = from_hf_config(args.model_config)
        elif args.model:
            geometry = geometry_for(args.model)
        else:
            geometry = DEFAULT_MODEL
        per_token = int(geometry.kv_bytes_per_token)
    except UsageError as exc:
        message = str(exc).replace("pass dtype= to choose one", "add \"torch_dtype\" (e.g. \"bfloat16\") to the config")
        raise UsageError("--" + message if message.startswith("model must") else message) from None
    except (OverflowError, ValueError) as exc:
        raise UsageError(f"--model-config {args.model_config}: the model's shapes cannot be used ({exc}).") from None
    if not 0 < per_token <= 2**40:
        raise UsageError(f"--model-config {args.model_config}: {per_token:,} KV bytes per token is not a real model "
                         "(check num_hidden_layers, num_key_value_heads and head_dim).")
    warm = args.warmup.strip()
    if warm.isdigit():
        warm_requests, warm_seconds = parse_int(warm, "--warmup"), 0.0
    elif warm.endswith("%"):
        warm_requests, warm_seconds = 0, 0.0  # resolved against the trace in _resolve_warmup
    else:
        try:
            warm_requests, warm_seconds = 0, duration(warm, "--warmup")
        except UsageError:
            raise UsageError(f"--warmup must be N requests, a duration with its unit (90s, 10m, 1.5h) or a percentage "
                             f"(10%); got {args.warmup!r}.") from None
    every, every_flag = _every(args)
    window = duration(every, every_flag) if every is not None else None
    if window is not None and window <= 0:
        raise UsageError(f"{every_flag} must be a positive duration; got {every!r}.")
    tiers = fraction_list(args.tier_targets, "--tier-targets")
    if tiers != sorted(tiers) or len(tiers) > 3:
        raise UsageError(f"--tier-targets must be 1 to 3 non-decreasing fractions (HBM, DRAM, SSD); got {args.tier_targets!r}.")
    spec = resolve_spec(args)  # with --kv-dtype; the catalog is in planning/geometry.py
    check_hardware_flags(args, args.flag_defaults, spec)  # no hardware flag without --gpu; the TP size vLLM takes
    return PlanOptions(
        semantics=tuple(m for m in args.semantics if m not in ENGINE_MODELS),
        geometry=spec.geometry,
        budgets=budget_options(args, spec),
        targets=fraction_list(args.targets, "--targets"),
        coverage_target=args.coverage,
        warmup_requests=warm_requests,
        warmup_seconds=warm_seconds,
        window_seconds=window,
        tier_targets=tiers,
        prices_per_gb=None if args.prices is None else parse_prices(args.prices),
        extra={"format": args.format, "reblocked_to": args.reblock},
        optimal=args.optimal,
    )


def _bytes_of_the_trace(args: argparse.Namespace, options: PlanOptions, trace: Any) -> PlanOptions:
    """The KV bytes per token from the trace when it states them (an LMCache log's shapes and
    dtypes), else the model's; one line on stderr says which, and a conflict with ``--model``."""
    from stackdist.planning.geometry import with_kv_bytes_per_token

    from .budget_args import kv_dtype_text, model_note

    spec = resolve_spec(args)
    per_block = getattr(trace, "kv_bytes_per_block", None)
    if per_block is None:
        model_note("plan", args, spec)
        return options
    if per_block % trace.block_size:
        raise TraceFormatError(trace.source, None, f"the log's shapes and dtypes give {per_block:,} KV bytes per "
                               f"{trace.block_size}-token chunk, not a whole number of bytes per token")
    per_token = per_block // trace.block_size
    model = options.geometry.kv_bytes_per_token
    given = args.model or args.model_config or args.kv_dtype
    which = f"--model {args.model}" if args.model else (f"--model-config {args.model_config}" if args.model_config else
                                                         f"the default model {spec.name}")
    if given and model != per_token:
        print(f"stackdist plan: note: {which} ({kv_dtype_text(args, spec)}) has {model:,} KV bytes per token, the log's "
              f"shapes and dtypes {per_token:,} ({per_block:,} per {trace.block_size}-token chunk): using the log's",
              file=sys.stderr)
    elif not given:
        print(f"stackdist plan: note: KV bytes from the log's shapes and dtypes: {per_token:,} B/token ({per_block:,} "
              f"per {trace.block_size}-token chunk); {which} only for what else needs a model", file=sys.stderr)
    if model == per_token:
        return options
    geometry = with_kv_bytes_per_token(options.geometry, per_token, f"{spec.name} (KV bytes of the log)" if given else
                                       "KV bytes of the log")
    budgets = options.budgets
    if budgets is not None and budgets.spec is not None:
        budgets = dataclasses.replace(budgets, spec=dataclasses.replace(budgets.spec, geometry=geometry))
    return dataclasses.replace(options, geometry=geometry, budgets=budgets)


def _kv_dtype_title(args: argparse.Namespace, trace: Any) -> str:
    """The KV element type for the plot's title: the log's when it states the bytes, else
    ``--kv-dtype`` or the model's own."""
    from .budget_args import kv_dtype_text

    if getattr(trace, "kv_bytes_per_block", None) is not None:
        return "from the log"
    return kv_dtype_text(args, resolve_spec(args))


_SCHEDULES = ("serial", "model", "scheduler", "recorded")


def _check_schedule(schedule: str | None) -> None:
    """``--schedule``: a named schedule or a CSV file that exists; else a usage error with the closest name."""
    import os

    if schedule is None or schedule in _SCHEDULES or os.path.exists(schedule):
        return
    raise UsageError(f"--schedule must be {', '.join(_SCHEDULES)} or a CSV file; got {schedule!r}"
                     f"{did_you_mean(schedule, _SCHEDULES)} (no such name or file).")


def _every(args: argparse.Namespace) -> tuple[str | None, str]:
    """``--every`` and the flag given, or the old ``--window DURATION`` (no colon, so never a
    START:STOP) with a deprecation note on stderr; ``args.window`` is then cleared."""
    if args.window is None or ":" in args.window or not args.window.strip():
        window_spec(args.window, "--window")  # a bad START:STOP is a usage error naming --window
        return args.every, "--every"
    try:
        duration(args.window.strip(), "--window")
    except UsageError:
        window_spec(args.window, "--window")  # neither form: the START:STOP message
    if args.every is not None:
        raise UsageError(f"--window {args.window} (the old form of --every) and --every {args.every}: give --every only.")
    print(f"stackdist plan: note: --window {args.window} is deprecated for time windows; use --every {args.window} "
          "(--window START:STOP now picks the counted requests)", file=sys.stderr)
    every, args.window = args.window, None
    return str(every), "--window"


def _load(args: argparse.Namespace) -> Any:
    """The trace as requests (:func:`stackdist.traces.stream_input.read_as_requests`: an access
    stream as one-block requests), re-blocked when asked."""
    from stackdist.traces import reblock
    from stackdist.traces.stream_input import read_as_requests

    if args.block_size is not None and args.block_size < 1:
        raise UsageError(f"--block-size must be a positive integer; got {args.block_size}.")
    # the engine models count the whole prompt, its last partial block too (readers that can drop it, tokens, keep it)
    partial = args.partial_last_block or any(m in ENGINE_MODELS for m in args.semantics)
    trace = read_as_requests(args.trace, args.format, args.block_size, args.skip_bad, partial)
    if args.reblock is not None:
        if trace.block_size % args.reblock:
            raise UsageError(f"--reblock must divide the trace's block size ({trace.block_size} tokens); got {args.reblock}.")
        trace = reblock(trace, args.reblock)
    return trace


def run_plan(args: argparse.Namespace) -> int:
    """Read, plan once, render: the table (or JSON) to stdout, then the optional files."""
    from stackdist.render.table import render_plan_table

    check_outputs([("--json", args.json), ("--plot", args.plot), ("--per-request", args.per_request),
                   ("--write-deployment", args.write_deployment)], [args.trace, args.model_config, args.schedule])
    args.engine_block_size_given, args.engine_block_size = args.engine_block_size, args.engine_block_size or 16
    specs = _offload_specs(args)
    options = _options(args)
    for spec in specs:  # sizes resolve with the model's bytes and the page: a bad one is a usage error, before any work
        try:
            resolve_offload(spec, int(options.geometry.kv_bytes_per_token), max(args.engine_block_size, 1))
        except ValueError as exc:
            raise UsageError(f"--offload {spec.text}: {exc}.") from None
    if args.plot and specs and not options.semantics and args.gpu_blocks and _only_infinite(args.gpu_blocks):
        raise UsageError("--plot with --offload draws the tier sizes each target needs at a finite GPU pool; "
                         f"--gpu-blocks {args.gpu_blocks} has none.")
    trace = _load(args)
    options = _bytes_of_the_trace(args, options, trace)
    options = dataclasses.replace(_checked(args, options, trace), engine=_engine_options(args, trace, specs,
                                                                                   options.budgets, options.geometry))
    options = with_budget_pools(options, trace)  # the engine models at the --capacity sizes
    options = dataclasses.replace(options, routing=_routing_options(args, options, trace))
    options = dataclasses.replace(options, deployment=_deployment(args, options, trace))
    result = plan(trace, options, _method(args, options), Progress, _stage)
    report = result.plan
    echo_deployment(args, report)  # the deployment file and flags as resolved (and --write-deployment)
    if args.per_request:
        _write_per_request(args.per_request, trace, options, result.engine_results, result.offload_runs)
    if args.plot:  # files first: a closed stdout never loses them
        from stackdist.render.plot import plot_engine_models, plot_offload, plot_plan

        if options.semantics:
            plot_plan(args.plot, report, list(options.targets), result.curves or None, _kv_dtype_title(args, trace))
        if report.get("engine_models"):  # the curve semantics' or the offload plot keeps the name given
            engines = _suffixed(args.plot, "engines") if options.semantics or report.get("offload") else args.plot
            plot_engine_models(engines, report, _kv_dtype_title(args, trace))
            if engines != args.plot:
                print(f"stackdist plan: the engine models' plot is {engines}", file=sys.stderr)
        if report.get("offload"):
            plot_offload(_suffixed(args.plot, "offload") if options.semantics else args.plot, report)
    deployment: Any = report.get("deployment") or {}  # or not answered: no load
    load = deployment.get("load") or {}
    if load.get("runs") and load.get("fewest_replicas_keeping_up") is None:
        print(f"stackdist plan: no deployment of up to {load['runs'][-1]['replicas']} replicas keeps up with the "
              "arrivals (the engine's scheduler): raise --max-replicas to search further", file=sys.stderr)
    if "sampling" in report:
        print(f"stackdist plan: sampled at rate {report['sampling']['sample_rate']:.6g} "
              f"({len(report['sampling']['seeds'])} seeds): capacities are estimates; the JSON's 'sampling' section "
              "has the error bars", file=sys.stderr)
    if args.json is not None and args.json != "-":
        write_json(args.json, report)
    if args.json == "-":
        write_json("-", report)
    else:
        write_stdout(render_plan_table(report))
    return _infeasible_status(report) if args.gpu_blocks else 0


def _method(args: argparse.Namespace, options: PlanOptions) -> Method:
    """The method the scale flags name; sampling refused where it cannot answer, naming the flags."""
    if args.dask and is_sampled(args):
        raise UsageError("plan: --dask is exact; it takes no --sample-rate/--sample-size.")
    if is_sampled(args):
        models = [m for m in args.semantics if m in ENGINE_MODELS]
        if models:
            raise UsageError(f"--sample-rate/--sample-size apply to --semantics engine, per-access or both; got "
                             f"{','.join(args.semantics)!r} (an engine's own pool model does not thin with the keys).")
        for flag, asked in (("--workers/--shared-blocks", options.routing is not None), ("--optimal", options.optimal),
                            ("--capacity/--gpu", options.budgets is not None)):
            if asked:
                raise UsageError(f"{flag} cannot be estimated from a block sample (pools and schedules do not thin "
                                 "with the sampled blocks); drop --sample-rate/--sample-size for it.")
    return method_from(args)


def _checked(args: argparse.Namespace, options: PlanOptions, trace: Any) -> PlanOptions:
    """The warm-up resolved against the trace (``P%``); empty input and too many windows refused."""
    from stackdist.planning.plan import warmup_mask

    n = trace.n_requests
    skipped = getattr(trace, "skipped", 0)
    require_data(n, args.trace, f"the trace has no requests ({skipped:,} malformed lines skipped)" if skipped
                 else "the trace has no requests")
    first, last = resolve_window(window_spec(args.window, "--window"), n, trace.timestamps_s, "--window")
    require_data(last - first, args.trace, f"--window {args.window} holds none of the {n:,} requests")
    options = dataclasses.replace(options, count_range=(first, last) if args.window is not None else None)
    warm = args.warmup.strip()
    if warm.endswith("%"):  # a percentage of the window's requests (traces/counting.py)
        try:
            share = warmup_accesses(warm, last - first, "--warmup")
        except UsageError:
            raise UsageError(f"--warmup must be N requests, a duration like 10m or a percentage 0% to 100%; "
                             f"got {args.warmup!r}.") from None
        options = dataclasses.replace(options, warmup_requests=share)
    counted = warmup_mask(trace, options.warmup_requests, options.warmup_seconds, options.count_range)
    require_data(int(counted.sum()), args.trace, f"--warmup {args.warmup} covers all {n:,} requests")
    counted_blocks = int((trace.offsets[1:] - trace.offsets[:-1])[counted].sum())
    require_data(counted_blocks, args.trace, f"the {int(counted.sum()):,} counted requests have no prompt blocks "
                 "(empty hash_ids or prompts shorter than a block)")
    if options.window_seconds is not None and n:
        span = float(trace.timestamps_s.max() - trace.timestamps_s.min())
        windows = math.floor(span / options.window_seconds) + 1
        if windows > MAX_WINDOWS:
            raise UsageError(f"--every {options.window_seconds:g} s cuts the {span:g} s trace into {windows:,} windows; at most "
                             f"{MAX_WINDOWS:,} (use a width of at least {span / (MAX_WINDOWS - 1):.3g} s).")
    return options


def _able(capability: str) -> list[str]:
    """The registered engine models with ``supports_<capability>``."""
    return [name for name, m in ENGINE_MODELS.items() if getattr(m, f"supports_{capability}")]


def _either(names: list[str]) -> str:
    """``a, b or c``.

    >>> _either(["engine", "vllm", "sglang"]), _either(["vllm"])
    ('engine, vllm or sglang', 'vllm')
    """
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def _semantics_argument(text: str) -> tuple[str, ...]:
    """``--semantics`` parsed once, by argparse (``args.semantics`` is then the tuple of names;
    a bad name exits 2 naming the flag and the allowed names)."""
    try:
        return _models(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--semantics must", "must")) from None


def _models(text: str) -> tuple[str, ...]:
    """The semantics and engine models named by ``--semantics`` (comma-separated), in order: the
    idealized semantics (serving/semantics.py) and the registered engine models (serving/engine_model.py).

    >>> _models("both,vllm"), _models("per-access, engine")
    (('engine', 'per-access', 'vllm'), ('per-access', 'engine'))
    """
    known = (*SEMANTICS, *ENGINE_MODELS)
    aliases = {"both": SEMANTICS, "all": known}
    names: list[str] = []
    for part in (p.strip().lower() for p in text.split(",")):
        for name in aliases.get(part, (part,)):
            if name not in known:
                raise UsageError(f"--semantics must be a comma-separated list of {', '.join(known)}, "
                                 f"both or all; got {text!r}{did_you_mean(name, [*known, *aliases])}.")
            if name not in names:
                names.append(name)
    return tuple(names)


def _only_infinite(text: str) -> bool:
    """Whether ``--gpu-blocks`` names only the infinite pool (a bad value is left to the parser)."""
    try:
        return all(pool is None for pool in parse_pools(text))
    except ValueError:
        return False


def _offload_help() -> str:
    return "; ".join(f"{m.name}:{m.tiers[0]}=N{m.unit}" + "".join(f"[,{t}=N{m.unit}]" for t in m.tiers[1:])
                     + "".join(f"[,{k}={'|'.join(v) if v else 'N'}]" for k, v in m.options.items())
                     + f" (behind {m.behind}{'' if m.driven else '; followed, not driven'})"
                     for m in OFFLOAD_MODELS.values())


def _offload_specs(args: argparse.Namespace) -> tuple[OffloadSpec, ...]:
    """``--offload`` parsed (a bad one exits 2 naming the flag); the engine models they sit behind
    are added to ``args.semantics``, and the schedule is serial (said on stderr when defaulted)."""
    specs = []
    for text in args.offload or ():
        try:
            specs.append(parse_offload(text))
        except ValueError as exc:
            raise UsageError(f"--offload {text}: {exc}.") from None
    if not specs:
        return ()
    for flag, asked in (("--shared-blocks", args.shared_blocks is not None), ("--decode-reuse", args.decode_reuse),
                        (f"--router {args.router}", args.router in JOINT_ROUTERS and args.workers != "one")):
        if asked:
            raise UsageError(f"--offload runs each worker's engine with its own offload tiers (a static router); {flag} "
                             "is not modelled with it yet.")
    if args.schedule is None:
        args.schedule = "serial"
    elif args.schedule != "serial":
        raise UsageError(f"--offload is modelled on the serial schedule only (the engines' transfer completion "
                         f"timing is not); got --schedule {args.schedule}: use --schedule serial.")
    added = [m for m in dict.fromkeys(offload_model(s.model).behind for s in specs) if m not in args.semantics]
    if added:
        args.semantics = (*args.semantics, *added)
        print(f"stackdist plan: --offload: running the {', '.join(added)} engine model (the GPU cache the tiers sit "
              "behind)", file=sys.stderr)
    return tuple(specs)


def _engine_options(args: argparse.Namespace, trace: Any, offload: tuple[OffloadSpec, ...] = (),
                    budgets: Any = None, geometry: Any = None) -> EngineOptions:
    """The engine models' options from the flags (decode defaults to whether outputs are known)."""
    models = tuple(m for m in args.semantics if m in ENGINE_MODELS)
    _refuse_engine_flags(args, models)
    if getattr(args, "engine_block_size_given", 0) is None and getattr(geometry, "vllm_block_size", None):
        args.engine_block_size = geometry.vllm_block_size  # the block vLLM gives the model (DeepSeek sparse attention: 64)
    groups = _hybrid_groups(args, models, geometry)
    if groups:  # pages stay 16 tokens (the hash block); the groups carry their own block size
        args.engine_block_size = 16
    if args.engine_block_size < 1 or (models and trace.block_size % args.engine_block_size):
        raise UsageError(f"--engine-block-size must be a positive integer dividing the trace's block size "
                         f"({trace.block_size} tokens); got {args.engine_block_size}.")
    for flag, rate in (("--prefill-tokens-per-s", args.prefill_tokens_per_s), ("--decode-tokens-per-s", args.decode_tokens_per_s)):
        if not rate > 0 or rate == float("inf"):
            raise UsageError(f"{flag} must be a positive finite number of tokens per second; got {rate}.")
    try:
        pools = parse_pools(args.gpu_blocks) if args.gpu_blocks else ()
    except ValueError as exc:
        raise UsageError(_sized_pools_hint(args.gpu_blocks) or str(exc)) from None
    schedule: Any = args.schedule or ("recorded" if trace.recorded_schedule_s is not None else "model")
    decode = bool((trace.output_length > 0).any()) if args.decode is None else args.decode
    if args.swa_full_tokens_ratio is not None and not any(
            "sliding" in {g.kind for g in groups} and ENGINE_MODELS[m].separate_swa_pool for m in models):
        raise UsageError("--swa-full-tokens-ratio sizes the sliding-window KV pool of an engine that keeps one: it "
                         "needs a model with sliding-window layers (--model-config) and --semantics "
                         f"{_either([m for m, spec in ENGINE_MODELS.items() if spec.separate_swa_pool])}.")
    serial_only = [m for m in models if groups and ENGINE_MODELS[m].supports_hybrid_groups and ENGINE_MODELS[m].hybrid_serial_only]
    if serial_only and schedule != "serial":
        raise UsageError(f"the {', '.join(serial_only)} model runs a model with sliding-window layers on a serial "
                         f"schedule only; give --schedule serial (the schedule here is {args.schedule or schedule}).")
    if groups and (offload or args.decode_reuse or args.shared_blocks is not None):
        raise UsageError("a model with sliding-window, chunked-local or Mamba groups is modelled per vLLM instance, "
                         "serial, timed or under its scheduler (no --offload, --decode-reuse or --shared-blocks yet).")
    if groups and args.workers != "one" and args.router in JOINT_ROUTERS:
        raise UsageError(f"--router {args.router} reads every worker's pool at each arrival; with sliding-window, "
                         "chunked-local or Mamba groups the workers run one at a time behind a router that does not: "
                         f"--router {', '.join(r for r in ROUTERS)}.")
    scheduler = (_scheduler_settings(args, models, trace, budgets.ttft if budgets is not None else None, decode)
                 if schedule == "scheduler" else None)
    if schedule != "scheduler":
        for flag, given in (("--step-time", args.step_time is not None), ("--max-num-seqs", args.max_num_seqs is not None),
                            ("--max-num-batched-tokens", args.max_num_batched_tokens is not None and not groups),
                            ("--async-scheduling", args.async_scheduling)):
            if given:
                raise UsageError(f"{flag} sets the engine's scheduler: it needs --schedule scheduler (the schedule here "
                                 f"is {args.schedule or schedule}).")
    if schedule not in ("serial", "model", "recorded", "scheduler"):
        schedule = Schedule.read_csv(schedule, trace.n_requests)
    workers: Any = args.workers
    if args.router_overlap_weight != args.router_overlap_weight or args.router_overlap_weight < 0:
        raise UsageError(f"--router-overlap-weight must be a non-negative number or inf; got {args.router_overlap_weight}.")
    if not 0.0 <= args.router_cache_threshold <= 1.0:
        raise UsageError(f"--router-cache-threshold must be a fraction from 0 to 1; got {args.router_cache_threshold}.")
    if not 0.0 <= args.router_temperature < float("inf"):
        raise UsageError(f"--router-temperature must be a finite non-negative number; got {args.router_temperature}.")
    weights = parse_router_weights(args.router_weights) if args.router_weights is not None else None
    try:
        shared = parse_sizes(args.shared_blocks, "--shared-blocks") if args.shared_blocks else (0,)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if workers not in ("one", "recorded"):
        if not str(workers).isdigit() or not 1 <= int(workers) <= 4096:
            raise UsageError(f"--workers must be recorded or a number of workers from 1 to 4096; got {workers!r}.")
        workers = int(workers)
    options = EngineOptions(models, pools, schedule, decode, args.engine_block_size, args.prefill_tokens_per_s,
                            args.decode_tokens_per_s, schedule_source=args.schedule or str(schedule), workers=workers,
                            router=args.router, seed=args.seed, decode_reuse=args.decode_reuse,
                            overlap_weight=args.router_overlap_weight, router_cache_threshold=args.router_cache_threshold,
                            router_temperature=args.router_temperature, router_weights=weights,
                            router_table_blocks=args.router_table_blocks,
                            shared_blocks=shared, offload=offload, scheduler=scheduler, kv_groups=groups,
                            max_num_batched_tokens=args.max_num_batched_tokens or 8192,
                            swa_full_tokens_ratio=args.swa_full_tokens_ratio or 0.8,
                            layer_kv_bytes=_layer_kv_bytes(groups, geometry),
                            kv_block_bytes=_hybrid_block_bytes(groups, geometry))
    try:
        check_models(options, {"decode_reuse": "--decode-reuse", "tiers": "--shared-blocks",
                               "routing": f"--router {args.router}"})
    except ValueError as exc:
        raise UsageError(f"{exc}.") from None
    return options


def _sized_pools_hint(text: str) -> str | None:
    """For ``--gpu-blocks 40GiB``: pools are the engine's own count, and ``--capacity`` is the flag
    that takes bytes or tokens (each engine model runs at its own pool for the size)."""
    finite = ",".join(p.strip() for p in text.split(",") if p.strip().lower() not in ("inf", "infinite", "unlimited"))
    try:
        sizes = size_list(finite, "--gpu-blocks")
    except UsageError:
        return None
    if not any(size.unit in ("bytes", "tokens") for size in sizes):
        return None
    return (f"--gpu-blocks {text}: pool sizes are in each engine's own count (num_gpu_blocks, pages); for a size in bytes "
            f"or tokens give --capacity {finite} (each engine model runs at its own pool for it).")


def _refuse_engine_flags(args: argparse.Namespace, models: tuple[str, ...]) -> None:
    """A flag of the engine models given when none runs (and, for those the engine semantics'
    K workers also read, no --workers or --shared-blocks) is a usage error naming it: it would be
    ignored. ``--decode-reuse`` needs an engine model (one that supports it: ``check_models``); a
    router needs workers (or a --gpu deployment's replicas), a router's setting that router."""
    able = _able("decode_reuse")
    if args.decode_reuse and not models:  # with a model that does not model it: check_models says so
        raise UsageError(f"--decode-reuse applies to the {_either(able)} engine model (--semantics {able[0]}); "
                         f"it does nothing with --semantics {','.join(args.semantics)}.")
    defaults = args.flag_defaults
    if args.router != defaults["router"] and args.workers in ("one", "recorded") and not args.gpu:
        raise UsageError(f"--router {args.router} spreads requests over --workers K workers (or the replicas of a --gpu "
                         f"deployment); with {'one worker' if args.workers == 'one' else 'the recorded workers'} it does "
                         "nothing.")
    for flag, dest, router in (("--router-overlap-weight", "router_overlap_weight", "kv-aware"),
                               ("--router-cache-threshold", "router_cache_threshold", "sglang-cache-aware")):
        value = getattr(args, dest)
        if value != defaults[dest] and not math.isnan(value) and args.router != router:  # (nan: its own message below)
            raise UsageError(f"{flag} sets the {router} router; it does nothing with --router {args.router}.")
    if models or args.workers != "one" or args.shared_blocks is not None:
        return
    for flag, dest in (("--gpu-blocks", "gpu_blocks"), ("--decode/--no-decode", "decode"), ("--schedule", "schedule"),
                       ("--prefill-tokens-per-s", "prefill_tokens_per_s"),
                       ("--decode-tokens-per-s", "decode_tokens_per_s"), ("--per-request", "per_request")):
        if getattr(args, dest) != defaults.get(dest):
            raise UsageError(f"{flag} applies to the engine models (--semantics {_either(list(ENGINE_MODELS))}) or the "
                             f"engine semantics on --workers K; it does nothing with --semantics "
                             f"{','.join(args.semantics)}.")


def _hybrid_groups(args: argparse.Namespace, models: tuple[str, ...], geometry: Any) -> tuple[Any, ...]:
    """vLLM's KV cache groups of a model with sliding-window, chunked-local or Mamba layers
    (``stackdist.serving.hybrid``), for the engine models that run them; () otherwise. The block is
    ``--engine-block-size`` (default 16), raised for a Mamba hybrid as vLLM's
    ``_align_hybrid_block_size`` raises it until an attention page holds a Mamba state."""
    from stackdist.planning.hardware import vllm_layout
    from stackdist.serving.hybrid import groups_from_layers

    kinds = getattr(geometry, "layer_kinds", ())
    runs = models or ((next(iter(ENGINE_MODELS)),) if getattr(args, "gpu", None) else ())  # --gpu: the deployment's
    able = [m for m in runs if ENGINE_MODELS[m].supports_hybrid_groups]
    grid = getattr(args, "gdn_checkpoint_alignment", None)
    if grid is not None and (grid < 0 or grid % 16 or "mamba" not in kinds or not able):
        raise UsageError(f"--gdn-checkpoint-alignment applies to a model with Mamba (linear-attention) layers and must "
                         f"be 0 or a positive multiple of 16 tokens; got {grid}"
                         + ("" if "mamba" in kinds else " for a model without them")
                         + ("" if able else f" (and an engine model that runs them: --semantics {next(iter(ENGINE_MODELS))})")
                         + ".")
    if not kinds or not able:
        return ()
    if grid is not None and all(ENGINE_MODELS[m].separate_swa_pool for m in able):  # SGLang: its own 64-token grid
        raise UsageError(f"--gdn-checkpoint-alignment sets vLLM's Mamba checkpoint grid; the {', '.join(able)} model "
                         "uses the engine's own (SGLang: 64 tokens): drop the flag or add --semantics vllm.")
    for m in able:
        allowed = ENGINE_MODELS[m].hybrid_kinds
        other = [k for k in dict.fromkeys(kinds) if allowed is not None and k not in allowed]
        if other:
            raise UsageError(f"the {m} model does not run {' or '.join(other)} layers (it runs {', '.join(allowed or ())}); "
                             f"this model has them: drop {m} from --semantics.")
    grid = 64 if grid is None else grid
    block = getattr(args, "engine_block_size_given", args.engine_block_size) or 16
    if "mamba" in kinds and block % 16 == 0:  # vLLM raises a block too small for a Mamba state page, per GPU
        block = vllm_layout(geometry, args.gpus_per_replica if getattr(args, "gpu", None) else 1, block, grid)["block_size_tokens"]
    if block < 16 or block % 16:
        raise UsageError(f"--engine-block-size must be a positive multiple of 16 tokens for a hybrid model's groups; "
                         f"got {block}.")
    return groups_from_layers(kinds, block, geometry.sliding_window, geometry.attention_chunk_size, grid)


def _hybrid_block_bytes(groups: tuple[Any, ...], geometry: Any) -> int:
    """Bytes of one block of a hybrid model: one group's layers (vLLM's group size) x the block's
    tokens x an attention layer's bytes per token (a Mamba state is padded to that page)."""
    if not groups:
        return 0
    from stackdist.serving.hybrid import layers_per_group

    return layers_per_group(geometry.layer_kinds) * max(g.block_size for g in groups) * geometry.layer_bytes_per_token


def _layer_kv_bytes(groups: tuple[Any, ...], geometry: Any) -> tuple[int, int]:
    """KV bytes per token of all full-attention layers and of all sliding-window layers."""
    if not groups:
        return (0, 0)
    kinds = geometry.layer_kinds
    return (kinds.count("full") * geometry.layer_bytes_per_token, kinds.count("sliding") * geometry.layer_bytes_per_token)


def _scheduler_settings(args: argparse.Namespace, models: tuple[str, ...], trace: Any, ttft: Any, decode: bool) -> Any:
    """``--schedule scheduler``'s settings; refused for models without a scheduler model, with a
    router that needs the workers' schedulers jointly, a shared tier, offload tiers or decode
    reuse (not modelled)."""
    from stackdist.serving.scheduler import SchedulerSettings

    able = _able("scheduler")
    bad = [m for m in models if m not in able]
    if bad or not models:
        raise UsageError(f"--schedule scheduler models the engine's own scheduler for the {_either(able)} model; "
                         f"got --semantics {','.join(args.semantics)}.")
    from stackdist.planning.engine_plan import STATIC_ROUTERS

    if args.workers not in ("one", "recorded") and args.router not in STATIC_ROUTERS:
        raise UsageError(f"--schedule scheduler with --workers: --router must be one of {', '.join(STATIC_ROUTERS)} (each "
                         f"worker runs its own scheduler; {args.router} would need them jointly); got {args.router}.")
    for flag, asked in (("--shared-blocks", args.shared_blocks is not None),
                        ("--offload", bool(args.offload)), ("--decode-reuse", args.decode_reuse)):
        if asked:
            raise UsageError(f"--schedule scheduler: {flag} is not modelled with the scheduler yet.")
    step = _step_time(args, trace, ttft, decode)
    return SchedulerSettings(args.max_num_seqs or 1024, args.max_num_batched_tokens or 8192, step.fixed_s,
                             step.per_token_s, step.source, step.detail, args.async_scheduling)


def _step_time(args: argparse.Namespace, trace: Any, ttft: Any, decode: bool) -> Any:
    """The scheduler's step time and its source (``stackdist.planning.step_time``'s order)."""
    from stackdist.planning.hardware import CalibratedTTFT, RooflineTTFT
    from stackdist.planning.step_time import (
        ASSUMED,
        FIXTURE_GPU,
        FIXTURE_MODEL,
        bundled_h200_fit,
        parse_step_time,
        step_time_from_calibration,
        step_time_from_roofline,
    )

    if args.step_time is not None:
        return parse_step_time(args.step_time, "--step-time")
    try:
        if isinstance(ttft, CalibratedTTFT):
            return step_time_from_calibration(ttft, f"--ttft-calibration {args.ttft_calibration}")
        if isinstance(ttft, RooflineTTFT):
            if args.gpu == FIXTURE_GPU and ttft.spec.name == FIXTURE_MODEL and ttft.tensor_parallel == 1:
                fit = bundled_h200_fit()
                if fit is not None:
                    return step_time_from_calibration(fit, "the bundled H200 measurements (data/ttft.jsonl: HF eager, "
                                                      "batch 1)", "h200-fixture")
            return step_time_from_roofline(ttft, trace, decode)
    except ValueError as exc:
        raise UsageError(f"--schedule scheduler: {exc}; give --step-time FIXED_S,PER_TOKEN_S.") from None
    return dataclasses.replace(ASSUMED, detail="an assumed step time (no --step-time, --gpu or --ttft-calibration)")


def _deployment(args: argparse.Namespace, options: PlanOptions, trace: Any) -> Any:
    """With --gpu (and a model that fits): the deployment the flags name, for its answer and the
    cheapest one per target (planning/deployment.py); its load floor from the engine's scheduler
    when a step time can be derived (given, fitted or the roofline; not the bare assumption)."""
    from stackdist.planning.deployment import DeploymentSpec
    from stackdist.planning.engine_plan import STATIC_ROUTERS
    from stackdist.planning.hardware import replica_pool
    from stackdist.serving.scheduler import SchedulerSettings

    budgets = options.budgets
    if budgets is None or budgets.hardware is None or budgets.spec is None or budgets.prices is None:
        return None
    engine = next(iter(options.engine.models), next(iter(ENGINE_MODELS)))  # the first registered (vllm)
    pool = replica_pool(budgets.spec, budgets.hardware)
    pages = pool["kv_tokens"] // options.engine.engine_block_size
    offload = next((s for s in options.engine.offload if offload_model(s.model).behind == engine), None)
    load_router = args.router if args.router in STATIC_ROUTERS else "session"
    scheduler = None
    if engine_model(engine).supports_scheduler and not options.engine.kv_groups:  # the scheduler model: full attention
        try:
            step = _step_time(args, trace, budgets.ttft, options.engine.decode)
        except UsageError:
            step = None
        if step is not None and step.source != "assumed":
            scheduler = SchedulerSettings(args.max_num_seqs or 1024, args.max_num_batched_tokens or 8192, step.fixed_s,
                                          step.per_token_s, step.source, step.detail, args.async_scheduling)
    hybrid = bool(options.engine.kv_groups) and engine_model(engine).supports_hybrid_groups
    note = "" if load_router == args.router or scheduler is None else (
        f"--router {args.router} reads the replicas' state, which needs their schedulers jointly: the load runs use "
        f"{load_router} routing (the hits use {args.router})")
    if hybrid:
        why = ("the deployment search does not run the scheduler for a hybrid model (its model is pure Python, too slow "
               "for every replica count): no load floor or TTFT under load here; --schedule scheduler --gpu-blocks N "
               "runs it at one pool")
        note = f"{note}; {why}" if note else why
    vllm_pool = engine_model(engine).pool_for_pages(pages)
    if hybrid:
        vllm_pool = int(pool["num_gpu_blocks"])  # the hybrid model spends the pool on every group itself
    return DeploymentSpec(engine, budgets.hardware.replicas, budgets.hardware.gpus_per_replica,
                          vllm_pool, args.router, offload,
                          max(args.max_replicas, budgets.hardware.replicas), scheduler, note,
                          _ttft_targets(args.ttft_target), load_router)


def _ttft_targets(texts: list[str]) -> tuple[tuple[str, float], ...]:
    """``--ttft-target pP=SECONDS`` values (seconds as the metavar says, or a duration with its
    unit: ``p99=500ms``); a UsageError naming the flag and the allowed forms."""
    out = []
    for text in texts:
        pct, _, value = text.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = duration(value, "--ttft-target")
            except UsageError:
                seconds = -1.0
        if pct.strip() not in ("p50", "p90", "p99") or not (0 < seconds < float("inf")):
            raise UsageError(f"--ttft-target must be p50, p90 or p99 = a positive number of seconds or a duration, "
                             f"e.g. p99=2 or p99=500ms; got {text!r}.")
        out.append((pct.strip(), seconds))
    return tuple(out)


def parse_router_weights(text: str) -> dict[str, float]:
    """``--router-weights prefix=3,queue=2``: llm-d's scorer weights (UsageError naming the flag
    and the keys otherwise).

    >>> parse_router_weights("prefix=3, queue=0.5")
    {'prefix': 3.0, 'queue': 0.5}
    """
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, eq, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not eq or name.strip() not in LLMD_WEIGHTS or not 0.0 <= number < float("inf"):
            raise UsageError(f"--router-weights takes KEY=WEIGHT pairs, keys {', '.join(LLMD_WEIGHTS)}, weights finite "
                             f"and non-negative; got {text!r}.")
        out[name.strip()] = number
    if not out:
        raise UsageError(f"--router-weights takes KEY=WEIGHT pairs, keys {', '.join(LLMD_WEIGHTS)}; got {text!r}.")
    return out


def _routing_options(args: argparse.Namespace, options: PlanOptions, trace: Any) -> RoutingOptions | None:
    """K workers of the engine semantics (planning/routing.py), or None when nothing asks for it.
    Without --gpu-blocks but with --gpu (and a model), each worker's pool is one replica's HBM in
    the trace's blocks, as the budgets compute it."""
    engine = options.engine
    hardware = options.budgets.hardware if options.budgets is not None else None
    deployment_routes = engine.workers == "one" and hardware is not None and hardware.replicas > 1
    if args.router in JOINT_ROUTERS and engine.workers in ("one", "recorded") and not deployment_routes:
        raise UsageError(f"--router {args.router} routes between --workers K workers (not one, nor the recorded ones); "
                         f"the other routers: {', '.join(ROUTERS)}.")
    if args.router == LLM_D and "engine" in options.semantics and engine.workers != "one":
        raise UsageError(f"--router llm-d reads the engines' KV usage and queues: it needs --semantics "
                         f"{_either(_able('routing'))} (the engine semantics has neither).")
    if "engine" not in options.semantics or (engine.workers == "one" and args.shared_blocks is None):
        if args.shared_blocks is not None and not engine.models:
            raise UsageError(f"--shared-blocks needs --semantics {_either(['engine', *_able('tiers')])}.")
        return None
    try:
        gpus = parse_sizes(args.gpu_blocks, "--gpu-blocks") if args.gpu_blocks else ()
        shared = parse_sizes(args.shared_blocks, "--shared-blocks") if args.shared_blocks else (0,)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    budgets = options.budgets
    if not gpus and budgets is not None and budgets.hardware is not None and budgets.spec is not None:
        from stackdist.planning.hardware import replica_pool

        tokens = replica_pool(budgets.spec, budgets.hardware)["kv_tokens"]
        if tokens >= trace.block_size:
            gpus = (tokens // trace.block_size,)
    return RoutingOptions(1 if engine.workers == "one" else engine.workers, args.router, gpus, shared, engine=engine,
                          overlap_weight=args.router_overlap_weight)


def _stage(label: str) -> None:
    stage("stackdist plan", label)  # on a terminal, or with --progress


def _write_per_request(path: str, trace: Any, options: PlanOptions, results: dict[str, Any],
                       offload: list[Any] | None = None) -> None:
    """One CSV per model (``FILE.<model>.csv`` when there are several), rows in replay order; the
    engine semantics on K workers (or with a shared tier) is one more, ``engine``."""
    from stackdist.planning.routing import run_routing
    from stackdist.render.per_request import write_per_request

    runs: dict[str, Any] = dict(results)
    if options.routing is not None:  # the chosen router's run only (cheap: one pass per pool pair)
        runs["engine"] = next(iter(run_routing(trace, dataclasses.replace(options.routing, compare=False)).values()))
    names = list(runs)
    if not names:
        raise UsageError(f"--per-request needs an engine model (--semantics {_either(list(ENGINE_MODELS))}) or --semantics engine "
                         "with --workers K or --shared-blocks.")
    arrival = None  # the trace's own arrivals (serial, or under the scheduler)
    if options.engine.schedule != "scheduler":
        schedule = schedule_for(trace, options.engine)
        arrival = None if schedule.is_serial else schedule.arrival_s
    for name in names:
        target = path if len(names) == 1 else _suffixed(path, name)
        recorded = name == "engine" and options.routing is not None and options.routing.workers == "recorded"
        columns = per_request_columns(runs[name])
        behind = [run for run in offload or () if run.model.behind == name]
        several = len(behind) > 1 or any(len(run.result.configs) > 1 for run in behind)
        for run in behind:
            columns += offload_columns(run, several, f"{run.model.name}_" if len(behind) > 1 else "")
        write_per_request(target, trace, columns, None if name == "engine" else arrival,
                          None if recorded else per_request_workers(runs[name]))


def _suffixed(path: str, name: str) -> str:
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{name}.{ext}" if dot else f"{path}.{name}"


def _infeasible_status(report: Any) -> int:
    """Exit 1 (after writing everything) when a pool size the user asked for is infeasible, saying
    why (default pool sizes that turn out infeasible are reported in the plan, not an error)."""
    status = 0
    for name, section in report.get("engine_models", {}).items():
        bad = [row for row in section["pools"] if not row["feasible"]]
        if bad:
            minimum = section["min_feasible_pool"]
            why = ("nothing could be scheduled while it waited: it never fits under the engine's scheduler"
                   if section.get("schedule", {}).get("kind") == "scheduler" else
                   "the engine would queue or preempt, which is not modelled")
            print(f"stackdist plan: {name}: pool size(s) {', '.join(str(r['gpu_blocks']) for r in bad)} cannot hold "
                  f"the requests running at once (request {bad[0]['failed_request']} cannot allocate; {why}); "
                  f"smallest feasible pool: {minimum['gpu_blocks'] if minimum else 'unknown'}", file=sys.stderr)
            status = 1
    return status
