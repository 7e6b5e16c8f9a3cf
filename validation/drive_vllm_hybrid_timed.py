"""Drive vLLM 0.33.0's hybrid KVCacheManager on SPEC.md's timed schedule (run with the vLLM venv).

    $VLLM_PY validation/drive_vllm_hybrid_timed.py --trace T.jsonl --hash-block-size 32 \
        --schedule timed --config CONFIG.json --pools 60,100,inf --out out.csv --summary s.json

The KV cache config, groups, pool and manager are built exactly as ``drive_vllm_hybrid.py``
(branch hybrid-validation) builds them for vLLM's Scheduler (its ``HybridEngine``); this driver
then calls the manager itself in SPEC.md's timed order, as ``drive_vllm.py`` does for one
full-attention group: at arrival ``get_computed_blocks`` (its ``shared_prefix_boundary`` set on the
request, as ``Scheduler._get_local_prefix_cache_hit``'s caller does) and one ``allocate_slots`` for
the whole prompt with ``full_sequence_must_fit=True`` (the scheduler's default
``scheduler_reserve_full_isl``); at prefill_end the first output token; per decode step
``allocate_slots(request, 1)``; at finish ``free``. ``new_step_starts`` before each allocating
event (a new scheduler step). Used for tests/data/engines/hybrid_model/timed/.
"""
import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
import common
import drive_vllm_hybrid as dh
from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request, RequestStatus

class Timed:
    def __init__(self, cfg, n, max_model_len, args, hash_block_size, decode):
        self.eng = dh.HybridEngine(cfg, n, max_model_len, args)
        self.mgr = self.eng.sched.kv_cache_manager
        self.hb, self.decode_on = hash_block_size, decode
        self.reqs, self.running = {}, set()
        self.layout = self.eng.layout
    def arrive(self, r):
        req = Request(request_id=str(r.index), prompt_token_ids=common.prompt_tokens(r, self.hb),
                      sampling_params=SamplingParams(max_tokens=r.output_length if self.decode_on else 1),
                      pooling_params=None, arrival_time=float(r.index), block_hasher=self.eng.hasher)
        self.mgr.new_step_starts()
        blocks, hit, boundary = self.mgr.get_computed_blocks(req)
        req.shared_prefix_boundary = boundary
        new = self.mgr.allocate_slots(req, req.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks,
                                      full_sequence_must_fit=True, has_scheduled_reqs=bool(self.running))
        if new is None:
            raise common.Infeasible(r.index, "arrival", 0, f"free {self.mgr.block_pool.get_num_free_blocks()}")
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = req.num_tokens
        self.reqs[r.index] = req; self.running.add(r.index)
        return hit
    def prefill_end(self, r):
        self.reqs[r.index].append_output_token_ids(common.output_token(r, 1))
    def decode(self, r, k):
        req = self.reqs[r.index]
        self.mgr.new_step_starts()
        if self.mgr.allocate_slots(req, 1, num_lookahead_tokens=0) is None:
            raise common.Infeasible(r.index, "decode", k, "")
        req.num_computed_tokens += 1
        req.append_output_token_ids(common.output_token(r, k + 1))
    def finish(self, r):
        req = self.reqs.pop(r.index)
        req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        self.mgr.free(req); self.running.discard(r.index)

ap = argparse.ArgumentParser()
common.common_args(ap)
ap.add_argument("--config", required=True)
args = ap.parse_args()
args.block_size, args.mamba_cache_mode, args.gdn_checkpoint_alignment, args.max_num_batched_tokens = None, "align", 64, 8192
cfg = json.load(open(args.config))
layout = {}
def factory(trace, hb, decode):
    mml = max(r.input_length + r.output_length for r in trace) + 1024
    inf = 4 * sum(-(-(r.input_length + r.output_length) // 16) + 1 for r in trace) * 16 + 64
    def make(pool):
        e = Timed(cfg, inf if common.is_inf(pool) else int(pool), mml, args, hb, decode)
        layout['l'] = e.layout
        return e
    return make
rc = common.main_common(args, factory, {"name": "vllm"})
if args.summary:
    s = json.load(open(args.summary)); s['layout'] = layout['l']; json.dump(s, open(args.summary, 'w'), indent=1)
sys.exit(rc)
