"""The plan's budgets section as text lines (hardware pool, answers per size, TTFT estimates)."""

from __future__ import annotations

from typing import Any

from stackdist.planning.schema import Budgets

__all__ = ["budget_lines"]


def _ttft(ttft: Any) -> str:
    if not ttft:
        return ""
    if ttft.get("under_load"):  # the engine's scheduler: queueing included
        return (f"  TTFT under load p50 {ttft['p50_ms'] / 1e3:.3f} s  p99 {ttft['p99_ms'] / 1e3:.3f} s"
                + ("" if ttft["keeps_up"] else "  (DOES NOT KEEP UP with the trace's arrivals)"))
    return f"  TTFT p50 {ttft['p50_ms']:8.1f} ms  p99 {ttft['p99_ms']:8.1f} ms"


def _usd(cost: Any) -> str:
    """US$ per hour and per million input tokens (or why not) of a priced deployment."""
    per_token = (f"${cost['usd_per_million_input_tokens']:,.4f} per million input tokens"
                 if "usd_per_million_input_tokens" in cost else "no US$ per million input tokens")
    return f"${cost['usd_per_hour']:,.2f}/hour, {per_token}"


def _uncached(row: Any) -> str:
    got = row.get("usd_per_million_uncached_input_tokens")
    return "" if got is None else f", ${got:,.4f} per million uncached input tokens"


def _cost_lines(section: Any, pool: Any) -> list[str]:
    """The deployment's price and where each price input comes from."""
    c = pool["cost"]
    inputs = section["cost"]
    rate = (f"{inputs['input_tokens_per_hour']:,.0f} input tokens/hour ({inputs['input_tokens']:,} over "
            f"{inputs['span_s']:,.1f} s)" if "input_tokens_per_hour" in inputs
            else f"no input tokens per hour: {inputs['input_tokens_per_hour_not_given']}")
    return [
        (f"cost    {c['gpus']} x {inputs['gpu']} at ${inputs['usd_per_gpu_hour']:,.2f}/GPU-hour = {_usd(c)}; {rate}"),
        f"        GPU price: {inputs['gpu_price_source']}",
        (f"        DRAM ${inputs['usd_per_gb']['dram']:g}/GB ({inputs['usd_per_gb_source']['dram']}), SSD "
         f"${inputs['usd_per_gb']['ssd']:g}/GB ({inputs['usd_per_gb_source']['ssd']}) to buy = "
         f"${inputs['usd_per_gb_hour']['dram']:.3g} and ${inputs['usd_per_gb_hour']['ssd']:.3g} per GB-hour: "
         f"{inputs['amortisation']}"),
    ]


def _hardware_lines(pool: Any) -> list[str]:
    fit = "" if pool["fits"] else "  (DOES NOT FIT: the weights leave no room for the KV cache)"
    return [
        (f"hardware {pool['replicas']} replica(s) of {pool['gpus_per_replica']} x {pool['gpu']} "
        f"({pool['hbm_gib_per_gpu']:.1f} GiB each, utilization {pool['gpu_memory_utilization']:g}): per GPU "
        f"{pool['weights_gib_per_gpu']:.1f} GiB weights ({pool['weights_source']}), "
        f"{pool['activation_gib_per_gpu'] + pool['non_torch_gib_per_gpu'] + pool['cudagraph_gib_per_gpu']:.1f} GiB "
        f"assumed activation/non-torch/CUDA-graph, {pool['available_kv_gib_per_gpu']:.1f} GiB left for KV{fit}"),
        (f"         vLLM num_gpu_blocks {pool['num_gpu_blocks']:,} per replica ({pool['bytes_per_block_per_gpu']:,} B per "
        f"{pool['block_size_tokens']}-token block per GPU) = {pool['kv_tokens']:,} tokens = {pool['kv_gib']:.2f} GiB of KV; "
        f"all replicas {pool['kv_tokens_all_replicas']:,} tokens = {pool['kv_gib_all_replicas']:.2f} GiB"),
    ]


def budget_lines(section: Budgets) -> list[str]:
    """Reads only the plan: the hardware pool, what each target needs, then one block per size."""
    lines = ["== budgets (answers at the sizes asked for) =="]
    model = section.get("model")
    if model:
        lines.append(f"model   {model.get('hf_repo') or 'config'}: KV dtype {model['kv_dtype_bytes']} B/element, "
                     f"{model['num_full_layers']} full-attention layers" + (
                         f" + {model['num_sliding_layers']} sliding-window layers (window {model['sliding_window_tokens']})"
                         if model["num_sliding_layers"] else "") + (" (MLA)" if model["mla"] else ""))
    lines.append(f"        {section['sliding_window_accounting']}")
    pool = section.get("hardware")
    if pool:
        lines += _hardware_lines(pool)
        if "cost" in pool:
            lines += _cost_lines(section, pool)
    req = section.get("requirements")
    if req:
        lines.append(f"needs ({req['semantics']} semantics; {req['assumes']}):")
        for r in req["targets"]:
            what = f"{r['target']:.1%} {'of the ceiling' if r['kind'] == 'fraction_of_ceiling' else 'absolute'}"
            if not r["reachable"]:
                lines.append(f"  {what:<22} unreachable" + (f" ({r['unreachable']['reason']})" if "unreachable" in r else ""))
                continue
            replicas = f"{r['replicas']} replica(s)" if r.get("replicas") else "no whole number of replicas"
            lines.append(f"  {what:<22} {r['gib']:10.2f} GiB = {replicas}, or one replica plus "
                         f"{r['behind_one_replica_gib']:.2f} GiB of CPU/SSD behind it if that tier is exclusive (one "
                         "LRU stack with the GPU); the engines' write-through tiers need more: their offload models "
                         "size them")
            if "cost" in r:
                c = r["cost"]
                lines.append(f"  {'':<22} {r['replicas']} replica(s) {_usd(c['replicas'])}; one replica + DRAM "
                             f"${c['one_replica_plus_dram']['usd_per_hour']:,.2f}/hour, + SSD "
                             f"${c['one_replica_plus_ssd']['usd_per_hour']:,.2f}/hour")
    ttft_model = section.get("ttft_model")
    if ttft_model:
        lines.append(f"TTFT    an ESTIMATE ({ttft_model['kind']} model, one request at a time, inputs in the JSON)"
                     + ("; the engine models' rows: under load, from the engine's scheduler (its step time in the "
                        "engine section)" if section.get("engine_ttft_under_load") else ""))
    for note in section.get("notes", []):
        lines.append(f"note    {note}")
    for row in section["rows"]:
        lines.append(f"  {row['budget']}: {row['blocks']:,} blocks, {row['tokens']:,} tokens, {row['gib']:.2f} GiB of KV"
                     + (f"; {row['cost']['gpus']} GPU(s) {_usd(row['cost'])}" if "cost" in row else ""))
        for name, s in row["semantics"].items():
            if s.get("not_given"):
                lines.append(f"    {name:<11} no answer: {s['not_given']}")
                continue
            lower = f", {s['hit_tokens_from_lower_tier']:,} from below HBM" if s.get("hit_tokens_from_lower_tier") else ""
            lines.append(f"    {name:<11} prefix token hit rate {s['prefix_token_hit_rate']:7.2%}, "
                         f"{s['hit_tokens']:,} tokens saved{lower}{_ttft(s.get('ttft'))}{_uncached(s)}")
            if "conservative" in s:
                c = s["conservative"]
                lines.append(f"    {'':<11} conservative (every layer full): {c['capacity_blocks']:,} blocks, "
                             f"hit rate {c['prefix_token_hit_rate']:.2%}")
        for name, e in row["engine_models"].items():
            if not e["feasible"]:
                why = e.get("not_run") or "the requests running at once do not fit"
                lines.append(f"    {name:<11} pool {e['pool']:,}: infeasible ({why})")
                continue
            lines.append(f"    {name:<11} pool {e['pool']:,}: prefix token hit rate {e['prefix_token_hit_rate']:7.2%}, "
                         f"{e['hit_tokens']:,} tokens saved{_ttft(e.get('ttft'))}{_uncached(e)}"
                         + (f"  (no TTFT under load: {e['ttft_not_given']})" if e.get("ttft_not_given") else ""))
    return lines
