"""Drive LMCache 0.5.6 (LMCacheConnectorV1, LocalCPUBackend / LocalDiskBackend) behind vLLM 0.33.0's
GPU prefix cache, serially, through a trace.

Run with the vLLM venv's Python (../shared/engines/install.sh); LMCache's site-packages (the
venv-lmcache one) is appended to sys.path, so vLLM's own pinned packages win, e.g.

    $VLLM_PY validation/drive_lmcache.py --trace T.jsonl --hash-block-size 32 --pools 107,210 \
        --chunk 256 --cpu-chunks 8 --disk-chunks 0 --out out.csv [--no-decode] [--summary s.json]

What runs, all in this one process:

- vLLM's own ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``) built from a ``VllmConfig`` with
  ``KVTransferConfig(kv_connector="LMCacheConnectorV1", kv_role="kv_both")``: the scheduler-side
  ``LMCacheConnectorV1`` (``vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py``)
  with LMCache's ``LMCacheConnectorV1Impl`` (``lmcache/integration/vllm/vllm_v1_adapter.py``,
  ``use_native`` off, the default), whose ``LMCacheLookupClient`` asks the worker's
  ``LMCacheLookupServer`` over LMCache's own ZMQ ipc socket.
- the worker-side ``LMCacheConnectorV1`` (role WORKER, created by vLLM's ``KVConnectorFactory``)
  with its real ``LMCacheEngine``, ``StorageManager``, ``LocalCPUBackend`` and (with
  ``--disk-chunks``) ``LocalDiskBackend`` writing real files into a temporary folder. KV caches
  registered: one CPU tensor per layer. Each step the driver does what vLLM's worker does
  (``v1/worker/kv_connector_model_runner_mixin.py``: ``bind_connector_metadata``,
  ``start_load_kv``, ``wait_for_save``, ``clear_connector_metadata``).
- stand-ins: ``model_config`` (no model; 1 layer, 1 KV head of 64, fp16), the GPU copies
  (LMCache's own ``MockGPUConnector``, ``lmcache/v1/gpu_connector/mock_gpu_connector.py``, in
  place of the CUDA paged-memory connector that ``CreateGPUConnector`` would build: it copies
  nothing), the forward context (an object whose ``attn_metadata`` is not None), and the module
  ``uvicorn`` (imported by LMCache's internal API server, which is off by default and never
  started; it is not installed in either venv). After each step's ``wait_for_save`` the driver waits until the
  disk backend's write queue is empty (serial: every write has landed before the next step).
  ``extra_config.disk_io_threads = 1`` (default 4) makes the disk writes land in submission
  order, so the disk tier's LRU order does not depend on thread timing.

If LMCache's ``LocalCPUBackend.allocate`` starts its endless wait for an evictable chunk (a disk
read that cannot stage, LMCACHE_NOTES.md), the pool is reported infeasible at that request
(set DRIVE_LMCACHE_LET_IT_WAIT=1 to let it wait instead).

Serial schedule only. Per request and GPU pool N the driver records, from the engines' own
calls (wrappers that only observe): ``hit_tokens_<N>`` (``Scheduler._get_local_prefix_cache_hit``,
the GPU hit), ``offload_hit_tokens_<N>`` (what ``LMCacheConnectorV1.get_num_new_matched_tokens``
returns: tokens loadable beyond the GPU hit), ``lmcache_hit_tokens_<N>`` (the LMCache prefix
hit from token 0 that the lookup server's ``LMCacheEngine.lookup`` returns),
``lookup_cpu_tokens_<N>`` / ``lookup_disk_tokens_<N>`` (that hit split by the tier that held each
chunk: the ``block_mapping`` the lookup pinned), ``loaded_cpu_tokens_<N>`` /
``loaded_disk_tokens_<N>`` (tokens the worker's ``retrieve`` read from each tier:
``StorageManager.batched_get`` per location) and ``stored_chunks_<N>`` / ``stored_disk_chunks_<N>``
(new chunks the request's store put into the CPU / disk tier). Per pool (manifest stats): chunks written into each tier,
evictions per tier, promotions (disk -> CPU write-backs), final occupancy.

Each GPU pool runs in its own child process (LMCache keeps process-wide singletons: its config,
the engine builder, the stats monitor).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

DEFAULT_LMCACHE_SITE = "/work/engines/venv-lmcache/lib/python3.11/site-packages"
E = common.ENGINE_BLOCK
# One layer, 1 KV head of 64, fp16: an LMCache chunk of K tokens is 2 * 1 * K * 64 * 2 bytes
# (kv_shape (layers, 2, chunk, heads, head_size), LocalCPUBackend.get_full_chunk_size_bytes).
NUM_LAYERS, NUM_KV_HEADS, HEAD_SIZE, DTYPE_BYTES = 1, 1, 64, 2


def chunk_bytes(chunk: int) -> int:
    return 2 * NUM_LAYERS * chunk * NUM_KV_HEADS * HEAD_SIZE * DTYPE_BYTES


COLS = ["hit_tokens", "offload_hit_tokens", "lmcache_hit_tokens", "lookup_cpu_tokens", "lookup_disk_tokens",
        "loaded_cpu_tokens", "loaded_disk_tokens", "stored_chunks", "stored_disk_chunks"]


class Stuck(Exception):
    """LMCache's allocator would wait forever (no evictable chunk; busy loop with sleep)."""


# ----------------------------------------------------------------------------- child: one pool

def run_pool(args) -> dict:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ["LMCACHE_TRACK_USAGE"] = "false"
    os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    work = tempfile.mkdtemp(prefix="lmcache-drive-")
    cb = chunk_bytes(args.chunk)
    disk_dir = os.path.join(work, "disk") + "/"
    cfg = {
        "chunk_size": args.chunk,
        "local_cpu": True,
        "max_local_cpu_size": args.cpu_chunks * cb / (1 << 30),
        "local_disk": disk_dir if args.disk_chunks > 0 else None,
        "max_local_disk_size": args.disk_chunks * cb / (1 << 30),
        "extra_config": {"disk_io_threads": 1},
    }
    cfg_path = os.path.join(work, "lmcache.json")
    with open(cfg_path, "w") as fh:
        json.dump(cfg, fh)
    # LMCacheEngineConfig.from_file reads YAML; JSON is YAML.
    yaml_path = os.path.join(work, "lmcache.yaml")
    os.rename(cfg_path, yaml_path)
    os.environ["LMCACHE_CONFIG_FILE"] = yaml_path

    sys.path.append(args.lmcache_site)
    if "uvicorn" not in sys.modules:
        try:
            import uvicorn  # noqa: F401
        except ModuleNotFoundError:
            sys.modules["uvicorn"] = types.ModuleType("uvicorn")

    import logging

    import torch
    import vllm
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm_request import vllm_request

    import lmcache
    import lmcache.v1.gpu_connector as lm_gpu
    from lmcache.v1.gpu_connector.mock_gpu_connector import MockGPUConnector
    from lmcache.v1.storage_backend import local_cpu_backend as lm_cpu_mod

    lmcache_version = getattr(lmcache, "__version__", None)
    try:
        import importlib.metadata as md
        lmcache_version = md.version("lmcache")
    except Exception:
        pass

    # The GPU side: LMCache's own no-op connector instead of the CUDA paged-memory one.
    lm_gpu.CreateGPUConnector = lambda config, metadata, engine, layout_hints=None: MockGPUConnector(
        kv_shape=metadata.kv_shape)

    # LocalCPUBackend.allocate busy-loops (sleep 0.1 s, forever) when nothing is evictable and
    # busy_loop is true (the disk read path); turn its warning into an exception in this thread.
    class _StuckFilter(logging.Filter):
        def filter(self, record):
            msg = record.getMessage()
            if "No eviction candidates found in local cpu backend" in msg and \
                    threading.current_thread() is threading.main_thread():
                raise Stuck(msg)
            return True

    if not os.environ.get("DRIVE_LMCACHE_LET_IT_WAIT"):  # set it to see the wait itself
        lm_cpu_mod.logger.addFilter(_StuckFilter())

    trace = common.read_trace(args.trace)
    decode = not args.no_decode
    max_model_len = max(r.input_length + r.output_length for r in trace) + E
    n_blocks = common.inf_pool_size(trace, decode) if common.is_inf(args.one_pool) else int(args.one_pool)

    stub_defaulted: set[str] = set()

    class _Stub(types.SimpleNamespace):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            stub_defaulted.add(name)
            return None

    model_config = _Stub(
        max_model_len=max_model_len, uses_mrope=False, is_encoder_decoder=False, runner_type="generate",
        is_diffusion=False, supports_multimodal_inputs=False, return_sampling_mask=False, use_mla=False,
        model="stand-in", served_model_name="stand-in", dtype=torch.float16,
        get_total_num_kv_heads=lambda: NUM_KV_HEADS, get_num_layers=lambda pc=None: NUM_LAYERS,
        get_num_kv_heads=lambda pc=None: NUM_KV_HEADS, get_head_size=lambda: HEAD_SIZE,
        get_num_attention_heads=lambda pc=None: NUM_KV_HEADS, is_multimodal_model=False,
        skip_tokenizer_init=True, hf_config=None, enable_return_routed_experts=False, is_hybrid=False,
    )
    sched_cfg = SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False,
                                max_num_batched_tokens=max(max_model_len, 8192), max_num_seqs=16,
                                enable_chunked_prefill=False, async_scheduling=False)
    cache = CacheConfig(block_size=E, enable_prefix_caching=True)
    cache.num_gpu_blocks = n_blocks
    # The engine core resolves the KV layout before the workers start (resolve_kv_cache_layout);
    # LMCache reads it for its GPU connector's layout hints. NHD, vLLM's default for the paged
    # attention backends; the no-op connector ignores it.
    cache.kv_cache_layout = "LBNHC"
    kv_transfer = KVTransferConfig(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    vc = VllmConfig(scheduler_config=sched_cfg, cache_config=cache, device_config=DeviceConfig("cpu"),
                    kv_transfer_config=kv_transfer)
    vc.model_config = model_config
    layer = "model.layers.0.self_attn.attn"
    spec = FullAttentionSpec(block_size=E, num_kv_heads=NUM_KV_HEADS, head_size=HEAD_SIZE, dtype=torch.float16)
    kv_cfg = KVCacheConfig(num_blocks=n_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec([layer], spec)])

    with set_current_vllm_config(vc):
        port = 29500 + (os.getpid() % 2000)
        init_distributed_environment(world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}",
                                     local_rank=0, backend="gloo")
        initialize_model_parallel(1, 1)
        # Worker first: it builds the LMCacheEngine and the lookup server the scheduler's lookup
        # client talks to.
        worker = KVConnectorFactory.create_connector(vc, KVConnectorRole.WORKER, kv_cfg)
        # vLLM's paged KV layout for one layer: (2, num_blocks, block_size, heads, head_size).
        worker.register_kv_caches({layer: torch.zeros(2, n_blocks, E, NUM_KV_HEADS, HEAD_SIZE,
                                                      dtype=torch.float16)})
        sched = Scheduler(vllm_config=vc, kv_cache_config=kv_cfg, structured_output_manager=StructuredOutputManager(vc),
                          block_size=E, hash_block_size=E, log_stats=False)
    wimpl = worker._lmcache_engine
    simpl = sched.connector._lmcache_engine
    assert not wimpl._manager._init_failed, wimpl._manager._init_failed_reason
    assert not simpl._manager._init_failed, simpl._manager._init_failed_reason
    engine = wimpl.lmcache_engine
    assert engine is not None and simpl.lookup_client is not None
    assert type(engine.gpu_connector).__name__ == "MockGPUConnector"
    sm = engine.storage_manager
    cpu_be = sm.storage_backends["LocalCPUBackend"]
    disk_be = sm.storage_backends.get("LocalDiskBackend")
    assert (disk_be is not None) == (args.disk_chunks > 0), list(sm.storage_backends)
    backends = list(sm.storage_backends)

    # ---- observers (call through, record) ----
    cur = {"req": None}
    per_req: dict[str, dict] = {}
    stats = {"cpu_puts": 0, "cpu_put_skipped_present": 0, "disk_puts": 0, "disk_put_refresh_present": 0,
             "disk_put_rejected": 0, "cpu_evictions": 0, "disk_evictions": 0, "promotions": 0,
             "store_calls": 0}

    def rec(rid):
        return per_req.setdefault(rid, {"hit_tokens": -1, "offload_hit_tokens": 0, "lmcache_hit_tokens": 0,
                                        "lookup_cpu_tokens": 0, "lookup_disk_tokens": 0, "loaded_cpu_tokens": 0,
                                        "loaded_disk_tokens": 0, "stored_chunks": 0, "stored_disk_chunks": 0, "_looked": False,
                                        "_hit": False, "_ext": False})

    orig_local = sched._get_local_prefix_cache_hit

    def local(request, *a, **kw):
        res = orig_local(request, *a, **kw)
        r = rec(request.request_id)
        if not r["_hit"]:
            r["_hit"] = True
            r["hit_tokens"] = res[1]
        return res

    sched._get_local_prefix_cache_hit = local

    orig_ext = sched.connector.get_num_new_matched_tokens

    def ext(request, num_computed_tokens):
        res = orig_ext(request, num_computed_tokens)
        r = rec(request.request_id)
        if res[0] is not None and not r["_ext"]:
            r["_ext"] = True
            r["offload_hit_tokens"] = res[0]
        return res

    sched.connector.get_num_new_matched_tokens = ext

    orig_lookup = engine.lookup

    def lookup(*a, **kw):
        res = orig_lookup(*a, **kw)
        r = rec(kw.get("lookup_id"))
        if not r["_looked"]:
            r["_looked"] = True
            r["lmcache_hit_tokens"] = res
            bm = engine.lookup_pins.get(kw.get("lookup_id"), {})
            r["lookup_cpu_tokens"] = len(bm.get("LocalCPUBackend", [])) * args.chunk
            r["lookup_disk_tokens"] = len(bm.get("LocalDiskBackend", [])) * args.chunk
            assert r["lookup_cpu_tokens"] + r["lookup_disk_tokens"] == res, (bm, res)
        return res

    engine.lookup = lookup  # the lookup server thread calls self.lmcache_engine.lookup(...)

    orig_batched_get = sm.batched_get

    def batched_get(keys, location=None):
        res = orig_batched_get(keys, location=location)
        r = rec(cur["req"])
        n = sum(1 for m in res if m is not None) * args.chunk
        if location == "LocalCPUBackend":
            r["loaded_cpu_tokens"] += n
        elif location == "LocalDiskBackend":
            r["loaded_disk_tokens"] += n
        else:
            raise AssertionError(location)
        return res

    sm.batched_get = batched_get

    orig_store = engine.store

    def store(*a, **kw):
        stats["store_calls"] += 1
        return orig_store(*a, **kw)

    engine.store = store

    orig_cpu_submit = cpu_be.submit_put_task

    def cpu_submit(key, memory_obj, on_complete_callback=None):
        present = key in cpu_be.hot_cache
        res = orig_cpu_submit(key, memory_obj, on_complete_callback=on_complete_callback)
        if present:
            stats["cpu_put_skipped_present"] += 1
        else:
            stats["cpu_puts"] += 1
            if cur.get("phase") == "store":
                rec(cur["req"])["stored_chunks"] += 1
            elif cur.get("phase") == "load":
                stats["promotions"] += 1
        return res

    cpu_be.submit_put_task = cpu_submit

    orig_cpu_remove = cpu_be.remove

    def cpu_remove(key, force=True):
        ok = orig_cpu_remove(key, force=force)
        if ok and not force:
            stats["cpu_evictions"] += 1
        return ok

    cpu_be.remove = cpu_remove

    if disk_be is not None:
        orig_disk_submit = disk_be.submit_put_task
        orig_disk_on_put = disk_be.cache_policy.update_on_put
        admitted = [0]

        def disk_on_put(key):  # called once per admitted write (local_disk_backend.py submit_put_task)
            admitted[0] += 1
            return orig_disk_on_put(key)

        disk_be.cache_policy.update_on_put = disk_on_put

        def disk_submit(key, memory_obj, on_complete_callback=None):
            present = key in disk_be.dict
            before = admitted[0]
            res = orig_disk_submit(key, memory_obj, on_complete_callback=on_complete_callback)
            if present:
                stats["disk_put_refresh_present"] += 1
            elif admitted[0] > before:
                stats["disk_puts"] += 1
                if cur.get("phase") == "store":
                    rec(cur["req"])["stored_disk_chunks"] += 1
            else:
                stats["disk_put_rejected"] += 1
            return res

        disk_be.submit_put_task = disk_submit
        orig_disk_remove = disk_be.remove

        def disk_remove(key, force=True):
            ok = orig_disk_remove(key, force=force)
            if ok and not force:
                stats["disk_evictions"] += 1
            return ok

        disk_be.remove = disk_remove

    def flush_disk():
        if disk_be is None:
            return
        t0 = time.time()
        while True:
            with disk_be.disk_worker.put_lock:
                if not disk_be.disk_worker.put_tasks:
                    return
            if time.time() - t0 > 60:
                raise RuntimeError("disk writes did not finish")
            time.sleep(0.001)

    fwd = types.SimpleNamespace(attn_metadata=object(), no_compile_layers={}, virtual_engine=0)

    def step(r, next_k):
        out = sched.schedule()
        meta = out.kv_connector_metadata
        # the worker, as kv_connector_model_runner_mixin._get_kv_connector_output does it
        worker.bind_connector_metadata(meta)
        cur["phase"] = "load"
        worker.start_load_kv(fwd)
        cur["phase"] = "store"
        worker.wait_for_save()
        cur["phase"] = None
        worker.clear_connector_metadata()
        flush_disk()
        req_ids, sampled = [], []
        for rid in out.num_scheduled_tokens:
            req = sched.requests[rid]
            req_ids.append(rid)
            if req.num_computed_tokens >= req.num_tokens:
                k = next_k[0]
                sampled.append([common.output_token(r, k)])
                next_k[0] = k + 1
            else:
                sampled.append([])
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                                sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={}, pooler_output=[],
                                kv_connector_output=KVConnectorOutput())
        sched.update_from_output(out, mro)

    steps = 0
    failure = None
    for r in trace:
        req = vllm_request(r, args.hash_block_size, decode, ignore_eos=True)
        cur["req"] = req.request_id
        rec(req.request_id)
        sched.add_request(req)
        next_k = [1]
        guard = 0
        try:
            while req.request_id in sched.requests and not req.is_finished():
                step(r, next_k)
                steps += 1
                guard += 1
                if guard > 4 * (r.output_length + 8):
                    raise common.Infeasible(r.index, "arrival" if req.num_computed_tokens == 0 else "decode", 0,
                                            f"no progress after {guard} steps, status {req.status}")
        except Stuck as e:
            failure = {"request": r.index, "event": "retrieve", "detail": "LocalCPUBackend.allocate found no "
                       "evictable chunk and would wait forever (busy loop): " + str(e)[:200]}
            break
        except common.Infeasible as e:
            failure = {"request": e.request, "event": e.event, "detail": e.detail}
            break
    # one more empty schedule so the last finished request leaves the connector's trackers
    stats["steps"] = steps
    stats["cpu_chunks_at_end"] = len(cpu_be.hot_cache)
    stats["disk_chunks_at_end"] = len(disk_be.dict) if disk_be is not None else 0
    stats["cpu_capacity_bytes"] = int(cfg["max_local_cpu_size"] * (1 << 30))
    stats["disk_capacity_bytes"] = int(cfg["max_local_disk_size"] * (1 << 30))
    stats["chunk_bytes"] = cb
    stats["backends"] = backends
    rows = []
    for r in trace:
        x = per_req.get(str(r.index))
        rows.append({c: (x[c] if x else None) for c in COLS})
    lm_cfg = engine.config
    defaults = {k: getattr(lm_cfg, k) for k in ("chunk_size", "local_cpu", "max_local_cpu_size", "local_disk",
                                                 "max_local_disk_size", "save_unfull_chunk", "cache_policy",
                                                 "save_decode_cache", "use_layerwise", "enable_async_loading",
                                                 "min_retrieve_tokens", "enable_scheduler_bypass_lookup",
                                                 "enable_blending", "remote_url", "enable_p2p", "extra_config",
                                                 "priority_limit", "local_cpu_use_hugepages")}
    defaults["local_disk"] = "<tmp>/disk/" if defaults["local_disk"] else None
    try:
        engine.close()
    except Exception:
        pass
    return {"rows": rows, "stats": stats, "failure": failure, "n_blocks": n_blocks,
            "vllm": vllm.__version__, "lmcache": lmcache_version, "lmcache_config": defaults,
            "stub_defaulted": sorted(stub_defaulted)}


# ----------------------------------------------------------------------------- parent

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--hash-block-size", type=int, required=True)
    ap.add_argument("--pools", help="GPU pool sizes (num_gpu_blocks), comma-separated, or inf")
    ap.add_argument("--chunk", type=int, default=256, help="LMCache chunk_size (tokens)")
    ap.add_argument("--cpu-chunks", type=int, required=True, help="max_local_cpu_size in chunks' worth of bytes")
    ap.add_argument("--disk-chunks", type=int, default=0, help="max_local_disk_size in chunks (0: no disk tier)")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--summary")
    ap.add_argument("--lmcache-site", default=os.environ.get("LMCACHE_SITE", DEFAULT_LMCACHE_SITE))
    ap.add_argument("--one-pool", help=argparse.SUPPRESS)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one_pool is not None:
        res = run_pool(args)
        with open(args.child_json, "w") as fh:
            json.dump(res, fh)
        sys.stdout.flush()
        os._exit(0)  # LMCache's and vLLM's background threads are not joined
    trace = common.read_trace(args.trace)
    common.check_trace(trace, args.hash_block_size)
    times = common.service_model(trace)
    pools = common.parse_pools(args.pools)
    cols, runs = [], []
    meta = None
    for pool in pools:
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as td:
            cj = os.path.join(td, "child.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--trace", args.trace, "--hash-block-size",
                   str(args.hash_block_size), "--chunk", str(args.chunk), "--cpu-chunks", str(args.cpu_chunks),
                   "--disk-chunks", str(args.disk_chunks), "--lmcache-site", args.lmcache_site,
                   "--one-pool", str(pool), "--child-json", cj] + (["--no-decode"] if args.no_decode else [])
            log = os.path.join(td, "child.log")
            # builtin hash() of int tuples does not depend on PYTHONHASHSEED; set as LMCache asks
            env = dict(os.environ, PYTHONHASHSEED="0")
            with open(log, "w") as lf:
                p = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
            if p.returncode != 0 or not os.path.exists(cj):
                with open(log) as lf:
                    sys.stderr.write(lf.read()[-6000:])
                raise SystemExit(f"pool {pool}: child failed ({p.returncode})")
            with open(cj) as fh:
                res = json.load(fh)
        meta = res
        st = res["stats"]
        if res["failure"] is None:
            cols.append((pool, res["rows"]))
            tot = {f"total_{c}": sum(x[c] for x in res["rows"]) for c in COLS}
            runs.append({"pool": pool, "feasible": True, "seconds": round(time.perf_counter() - t, 3), **tot,
                         "stats": st})
            print(f"  pool {pool} chunk {args.chunk} cpu {args.cpu_chunks} disk {args.disk_chunks}: {tot} {st}",
                  file=sys.stderr, flush=True)
        else:
            runs.append({"pool": pool, "feasible": False, "failure": res["failure"], "stats": st})
            print(f"  pool {pool}: INFEASIBLE {res['failure']}", file=sys.stderr, flush=True)
    if args.out:
        with open(args.out, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(["request", "id", "arrival_s", "worker", "input_tokens", "output_tokens"]
                       + [f"{c}_{p}" for c in COLS for p, _ in cols])
            for r, tm in zip(trace, times):
                w.writerow([r.index, r.index, repr(tm.arrival_s), 0, r.input_length, r.output_length]
                           + [rows[r.index][c] for c in COLS for _, rows in cols])
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump({"engine": {"name": "lmcache", "version": meta["lmcache"], "vllm_version": meta["vllm"],
                                  "connector": "LMCacheConnectorV1 (lmcache.integration.vllm.vllm_v1_adapter)"},
                       "trace": args.trace, "hash_block_size": args.hash_block_size, "schedule": "serial",
                       "decode": not args.no_decode, "chunk_tokens": args.chunk, "cpu_chunks": args.cpu_chunks,
                       "disk_chunks": args.disk_chunks, "chunk_bytes": chunk_bytes(args.chunk),
                       "lmcache_config": meta["lmcache_config"],
                       "model_config_stub_attributes_defaulted_to_None": meta["stub_defaulted"], "runs": runs},
                      fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
