"""Obviously correct pure-Python replays of vLLM's and SGLang's prefix caches, written from the
engines' code (vLLM 0.33.0 ``block_pool.py`` / ``kv_cache_utils.py`` / ``kv_cache_manager.py`` /
``single_type_kv_cache_manager.py``; SGLang 0.5.23 ``radix_cache.py`` / ``allocator/paged.py`` /
``allocation.py`` / ``common.py``), at page granularity. Slow (dicts, OrderedDicts, heapq) and
independent of the compiled kernels: own event sort, every decode step, token counts kept.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict

import numpy as np

B = 16


def ref_events(arrival, prefill_end, finish, output, decode):
    """Events sorted by (time, kind, request, k): finish 0, decode 1, prefill_end 2, arrival 3."""
    ev = []
    for i in range(len(arrival)):
        a, p, f, o = float(arrival[i]), float(prefill_end[i]), float(finish[i]), int(output[i])
        ev.append((a, 3, i, 0))
        ev.append((p, 2, i, 0))
        ev.append((f, 0, i, 0))
        if decode:
            for k in range(1, o):
                ev.append((p + (f - p) * k / o, 1, i, k))
    ev.sort()
    return ev


def request_pages(pages, r):
    """Page keys of request r (a list of ints)."""
    return [int(x) for x in pages.key[pages.offsets[r]:pages.offsets[r + 1]]]


# ----------------------------------------------------------------------------------------------
# vLLM
# ----------------------------------------------------------------------------------------------


class _Block:
    def __init__(self, block_id):
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash = None


class VllmReference:
    """BlockPool + FullAttentionManager + KVCacheManager for one group, block size 16."""

    def __init__(self, num_gpu_blocks):
        self.blocks = [_Block(i) for i in range(num_gpu_blocks)]
        self.free = OrderedDict((b.block_id, b) for b in self.blocks)  # FreeKVCacheBlockQueue
        self.free.popitem(last=False)  # null block
        self.cache = {}  # hash -> {block_id: block}, insertion order
        self.req_blocks = {}
        self.num_cached = {}

    # BlockPool
    def get_cached_block(self, h):
        d = self.cache.get(h)
        return next(iter(d.values())) if d else None

    def get_new_blocks(self, n):
        assert n <= len(self.free)
        ret = [self.free.popitem(last=False)[1] for _ in range(n)]
        for b in ret:
            if b.block_hash is not None:  # _maybe_evict_cached_block
                d = self.cache[b.block_hash]
                del d[b.block_id]
                if not d:
                    del self.cache[b.block_hash]
                b.block_hash = None
            assert b.ref_cnt == 0
            b.ref_cnt += 1
        return ret

    def touch(self, blocks):
        for b in blocks:
            if b.ref_cnt == 0:
                del self.free[b.block_id]
            b.ref_cnt += 1

    def free_blocks(self, ordered):
        first, last = [], []
        for b in ordered:
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                (first if b.block_hash is None else last).append(b)
        for b in reversed(first):  # prepend_n keeps list order at the front
            self.free[b.block_id] = b
            self.free.move_to_end(b.block_id, last=False)
        for b in last:
            self.free[b.block_id] = b

    # KVCacheManager
    def lookup(self, hashes, num_tokens):
        computed = []
        for h in hashes[: (num_tokens - 1) // B]:
            b = self.get_cached_block(h)
            if b is None:
                break
            computed.append(b)
        return computed

    def allocate_slots(self, rid, hashes, num_tokens_need_slot, num_tokens_to_cache, computed=()):
        running = rid in self.num_cached
        req = self.req_blocks.setdefault(rid, [])
        required = -(-num_tokens_need_slot // B)
        if running:
            n_new = max(required - len(req), 0)
        else:
            n_new = max(required - len(computed), 0) + sum(1 for b in computed if b.ref_cnt == 0)
        if n_new > len(self.free):
            if not running:
                del self.req_blocks[rid]
            return False
        if not running:
            self.touch(computed)
            req.extend(computed)
            self.num_cached[rid] = len(computed)
        more = required - len(req)
        if more > 0:
            req.extend(self.get_new_blocks(more))
        full = min(num_tokens_to_cache, len(hashes) * B) // B
        for j in range(self.num_cached[rid], full):
            b = req[j]
            b.block_hash = hashes[j]
            self.cache.setdefault(hashes[j], {})[b.block_id] = b
        self.num_cached[rid] = max(self.num_cached[rid], full)
        return True

    def free_request(self, rid):
        self.free_blocks(reversed(self.req_blocks.pop(rid)))
        self.num_cached.pop(rid)


def vllm_reference(pages, num_gpu_blocks, arrival, prefill_end, finish, decode):
    """(hit tokens per request, first failing request or -1) of the reference at one pool."""
    P = [int(x) for x in pages.input_tokens]
    O = [int(x) for x in pages.output_tokens]
    if num_gpu_blocks is None:
        num_gpu_blocks = sum(-(-(P[r] + max(O[r], 1)) // B) for r in range(len(P))) + 2
    eng = VllmReference(num_gpu_blocks)
    hits = [0] * len(P)
    hashes = {}
    for _t, kind, r, k in ref_events(arrival, prefill_end, finish, O, decode):
        if kind == 3:
            keys = request_pages(pages, r)
            hashes[r] = [("p", keys[j]) for j in range(P[r] // B)]
            computed = eng.lookup(hashes[r], P[r])
            hits[r] = B * len(computed)
            if not eng.allocate_slots(r, hashes[r], P[r], P[r], computed):
                return [-1] * len(P), r
        elif kind == 1:
            n_tokens = P[r] + k  # after appending generated token k
            h = hashes[r]
            while len(h) < n_tokens // B:  # the request's block hasher on append
                h.append(("g", r, len(h)))
            if not eng.allocate_slots(r, h, n_tokens, n_tokens):
                return [-1] * len(P), r
        elif kind == 0:
            eng.free_request(r)
    return hits, -1


# ----------------------------------------------------------------------------------------------
# SGLang
# ----------------------------------------------------------------------------------------------


class _Node:
    def __init__(self, clock):
        self.children = {}
        self.parent = None
        self.key = []  # page keys
        self.lock_ref = 0
        self.last_access_time = next(clock)

    def __lt__(self, other):
        return self.last_access_time < other.last_access_time


class SglangReference:
    """RadixCache (page size 16, LRU) + the paged allocator's free-page count."""

    def __init__(self, num_pages):
        self.clock = itertools.count()
        self.root = _Node(self.clock)
        self.root.lock_ref = 1
        self.evictable_leaves = set()
        self.free_pages = num_pages

    def match_prefix(self, key):
        if not key:
            return 0, self.root
        node = self.root
        node.last_access_time = t = next(self.clock)
        matched = 0
        while key and key[0] in node.children:
            child = node.children[key[0]]
            child.last_access_time = t
            n = _common(child.key, key)
            if n < len(child.key):
                node = self._split(child, n)
                matched += n
                break
            matched += n
            node = child
            key = key[n:]
        return matched, node

    def _split(self, child, n):
        new = _Node(self.clock)
        new.children = {child.key[n]: child}
        new.parent = child.parent
        new.lock_ref = child.lock_ref
        new.key = child.key[:n]
        child.parent = new
        child.key = child.key[n:]
        new.parent.children[new.key[0]] = new
        return new

    def insert(self, key):
        node = self.root
        node.last_access_time = t = next(self.clock)
        if not key:
            return 0, node
        total = 0
        while key and key[0] in node.children:
            node = node.children[key[0]]
            node.last_access_time = t
            n = _common(node.key, key)
            total += n
            key = key[n:]
            if n < len(node.key):
                node = self._split(node, n)
        if key:
            new = _Node(self.clock)
            new.parent = node
            new.key = list(key)
            node.children[key[0]] = new
            self._update(node)
            self._update(new)
            node = new
        return total, node

    def _update(self, node):
        if node.lock_ref > 0 or node.children or node is self.root:
            self.evictable_leaves.discard(node)
        else:
            self.evictable_leaves.add(node)

    def lock(self, node):
        while node is not self.root:
            node.lock_ref += 1
            self._update(node)
            node = node.parent

    def unlock(self, node):
        while node is not self.root:
            node.lock_ref -= 1
            self._update(node)
            node = node.parent

    def evict(self, num_tokens):
        heap = [(n.last_access_time, n) for n in self.evictable_leaves]
        heapq.heapify(heap)
        evicted = 0
        while evicted < num_tokens and heap:
            _, x = heapq.heappop(heap)
            self.free_pages += len(x.key)
            evicted += len(x.key) * B
            del x.parent.children[x.key[0]]
            self.evictable_leaves.discard(x)
            self._update(x.parent)
            if not x.parent.children and x.parent.lock_ref == 0:
                heapq.heappush(heap, (x.parent.last_access_time, x.parent))

    def evict_to_free(self, num_tokens):
        shortfall = num_tokens - self.free_pages * B
        if shortfall > 0:
            self.evict(shortfall)


def _common(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def sglang_reference(pages, num_pages, arrival, prefill_end, finish, decode):
    """(hit tokens per request, first failing request or -1) of the SGLang reference."""
    P = [int(x) for x in pages.input_tokens]
    O = [int(x) for x in pages.output_tokens]
    if num_pages is None:
        num_pages = sum(-(-(P[r] + max(O[r], 1)) // B) for r in range(len(P))) + 2
    eng = SglangReference(num_pages)
    hits = [0] * len(P)
    st = {}  # r -> dict(lock node, protected pages, seq_len)
    for _t, kind, r, k in ref_events(arrival, prefill_end, finish, O, decode):
        keys = request_pages(pages, r)
        if kind == 3:
            limit = (P[r] - 1) // B  # max_prefix_len = P - 1, page aligned
            m, node = eng.match_prefix(keys[:limit])
            hits[r] = B * m
            eng.lock(node)
            extend = P[r] - B * m
            eng.evict_to_free(extend + B)  # conservative: one extra page per request
            need = -(-P[r] // B) - m
            if need > eng.free_pages:
                return [-1] * len(P), r
            eng.free_pages -= need
            st[r] = {"lock": node, "protected": m, "seq": P[r]}
        elif kind == 2:
            _checkpoint(eng, st[r], keys[: P[r] // B])
        elif kind == 1:
            s = st[r]
            s["seq"] += 1
            eng.evict_to_free(B)
            if (s["seq"] - 1) % B == 0:
                if eng.free_pages < 1:
                    return [-1] * len(P), r
                eng.free_pages -= 1
        elif kind == 0:
            s = st.pop(r)
            n_full = s["seq"] // B
            gen = [("g", r, j) for j in range(P[r] // B, n_full)]
            _checkpoint(eng, s, keys[: P[r] // B] + gen, prompt_pages=P[r] // B)
            if s["seq"] % B:
                eng.free_pages += 1  # the partial last page
            eng.unlock(s["lock"])
    return hits, -1


def _checkpoint(eng, s, key, prompt_pages=None):
    """RadixCache.checkpoint: insert, free the duplicates, re-match, move the lock."""
    prefix, _ = eng.insert(key)
    if prefix > s["protected"]:
        eng.free_pages += prefix - s["protected"]
    if prompt_pages is not None and 0 < prompt_pages < len(key):
        eng.insert(key[:prompt_pages])  # split_prompt
    _, node = eng.match_prefix(key)
    s["protected"] = len(key)
    eng.lock(node)
    eng.unlock(s["lock"])
    s["lock"] = node


def as_arrays(hits):
    return np.asarray(hits, dtype=np.int64)


# ---- routers (stackdist/serving/router_pick.py, routed.py): the same rules, plain Python --------


def dynamo_pick_ref(costs, u, temperature):
    """Dynamo's softmax_sample over logits ``costs`` (lower better) with the draw ``u``: at
    temperature 0 the floor(u x m)-th of the m smallest (index order); else the first worker whose
    cumulative softmax(-cost / (max - min) / T) reaches u (uniform when all costs are equal)."""
    lo, hi = min(costs), max(costs)
    if temperature == 0:
        tied = [v for v, c in enumerate(costs) if c == lo]
        return tied[min(math.floor(u * len(tied)), len(tied) - 1)]
    if lo == hi:
        probs = [1.0 / len(costs)] * len(costs)
    else:
        scaled = [-(c / (hi - lo)) / temperature for c in costs]
        top = max(scaled)
        exps = [math.exp(x - top) for x in scaled]
        probs = [e / sum(exps) for e in exps]
    acc = 0.0
    for v, p in enumerate(probs):
        acc += p
        if u <= acc:
            return v
    return len(costs) - 1


def llmd_pick_ref(scores, u):
    """llm-d's max-score picker with the draw ``u``: the floor(u x m)-th of the m highest."""
    hi = max(scores)
    tied = [v for v, s in enumerate(scores) if s == hi]
    return tied[min(math.floor(u * len(tied)), len(tied) - 1)]


def vllm_usage(eng):
    """vLLM's BlockPool.get_usage: 1 - free blocks / (num_gpu_blocks - 1)."""
    total = len(eng.blocks) - 1
    return 1.0 - len(eng.free) / total if total else 0.0


def sglang_usage(eng, num_pages):
    """SGLang's token_usage: 1 - (free + evictable) / pages, evictable = every unlocked node's pages."""
    evictable, stack = 0, list(eng.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if node.lock_ref == 0:
            evictable += len(node.key)
    return 1.0 - (eng.free_pages + evictable) / num_pages if num_pages else 0.0
