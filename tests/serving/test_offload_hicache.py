"""SGLang HiCache (serving/offload/hicache.py) against a naive restatement of its rules, and
its device side against the plain SGLang model (``simulate_sglang``).

The reference keeps the tree as a dict of nodes holding their page tuples (children looked up
by scanning), scans every node for the least recent device / host leaf, and walks requests
token page by page: obviously the rules, nothing shared with the model's code.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from naive import run_stackdist
from traces_random import random_trace

from stackdist.serving.offload import TierConfig, offload_model, parse_offload
from stackdist.serving.offload.hicache import hicache_run
from stackdist.serving.pages import EnginePages, engine_pages
from stackdist.serving.sglang import simulate_sglang
from stackdist.traces import RequestTrace

WRITES = ("write_through", "write_through_selective", "write_back")
ENGINE_TRACES = sorted((Path(__file__).resolve().parents[1] / "data" / "engines").glob("*.jsonl"))


class _Ref:
    """HiCache's rules, naively: nodes are dicts; leaves found by scanning all nodes."""

    def __init__(self, N: int, C: int, write: str, B: int) -> None:
        self.free, self.host_free, self.B = N, C, B
        self.wb = write == "write_back"
        self.thr = {"write_through": 1, "write_through_selective": 2}.get(write, 0)
        self.clock = 0
        self.nodes: dict[int, dict] = {0: {"pages": (), "parent": None, "dev": True, "host": False, "lock": 1,
                                           "time": 0, "hits": 0}}
        self.dups: list[int] = []
        self.next_id = 1
        self.written = self.evicted = self.refused = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def children(self, n: int) -> list[int]:
        return [c for c, d in self.nodes.items() if d["parent"] == n]

    def child(self, n: int, page: object) -> int | None:
        return next((c for c in self.children(n) if self.nodes[c]["pages"][0] == page), None)

    def new(self, parent: int, pages: tuple, **kw: object) -> int:
        nid = self.next_id
        self.next_id += 1
        self.nodes[nid] = {"pages": pages, "parent": parent, "dev": True, "host": False, "lock": 0, "time": self.tick(),
                           "hits": 0, **kw}
        return nid

    def dup(self, n: int) -> None:
        d = self.nodes[n]
        if self.wb and d["dev"] and d["host"] and n not in self.dups:
            self.dups.append(n)

    def split(self, c: int, m: int) -> int:
        d = self.nodes[c]
        up = self.new(d["parent"], d["pages"][:m], dev=d["dev"], host=d["host"], lock=d["lock"], hits=d["hits"])
        d["pages"], d["parent"] = d["pages"][m:], up
        self.dup(up)
        return up

    def walk(self, pages: list, insert: bool, inserted: int = 0) -> tuple[int, int, int, int, int]:
        """(device pages, last device node, pages, last node, adopted pages)."""
        t = self.tick()
        node, i, dev_i, dev_node, adopted = 0, 0, 0, 0, 0
        while i < len(pages):
            c = self.child(node, pages[i])
            if c is None:
                break
            d = self.nodes[c]
            d["time"] = t
            m = 0
            while m < len(d["pages"]) and i + m < len(pages) and d["pages"][m] == pages[i + m]:
                m += 1
            i += m
            node = self.split(c, m) if m < len(d["pages"]) else c
            if insert:
                if not self.nodes[node]["dev"]:
                    self.nodes[node]["dev"] = True
                    adopted += len(self.nodes[node]["pages"])
                    self.dup(node)
                if i > inserted:
                    self.hit(node)
            if self.nodes[node]["dev"]:
                dev_i, dev_node = i, node
            if node != c and not insert:
                break
        if insert and i < len(pages):
            node = self.new(node, tuple(pages[i:]))
            if len(pages) > inserted:
                self.hit(node)
        return dev_i, dev_node, i, node, adopted

    def hit(self, n: int) -> None:
        d = self.nodes[n]
        if self.wb or not d["dev"]:
            return
        d["hits"] += 1
        if not d["host"] and d["hits"] >= self.thr:
            chain = []
            while n != 0 and not self.nodes[n]["host"]:
                chain.append(n)
                n = self.nodes[n]["parent"]
            for x in reversed(chain):
                if not self.write(x):
                    return

    def write(self, n: int) -> bool:
        d = self.nodes[n]
        k = len(d["pages"])
        if self.host_free < k:
            self.evict_host(k - self.host_free)
            if self.host_free < k:
                self.refused += 1
                return False
        self.host_free -= k
        self.written += k
        d["host"] = True
        self.dup(n)
        return True

    def evict_host(self, need: int) -> None:
        freed = 0
        for spare in (True, False) if self.wb else ():
            for n in list(self.dups):
                d = self.nodes.get(n)
                if freed >= need:
                    break
                if d is None or not (d["dev"] and d["host"]):
                    self.dups.remove(n)
                    continue
                if spare and self.is_dleaf(n):
                    continue
                d["host"] = False
                self.host_free += len(d["pages"])
                self.evicted += len(d["pages"])
                freed += len(d["pages"])
                self.dups.remove(n)
        while freed < need:
            leaves = [n for n, d in self.nodes.items() if n and not d["dev"] and d["host"] and not d["lock"]
                      and not self.children(n)]
            if not leaves:
                return
            n = min(leaves, key=lambda x: (self.nodes[x]["time"], x))
            k = len(self.nodes[n]["pages"])
            self.host_free += k
            self.evicted += k
            freed += k
            self.delete(n)

    def delete(self, n: int) -> None:
        del self.nodes[n]
        if n in self.dups:
            self.dups.remove(n)

    def is_dleaf(self, n: int) -> bool:
        d = self.nodes[n]
        return n != 0 and d["dev"] and not d["lock"] and not any(self.nodes[c]["dev"] for c in self.children(n))

    def evict(self, tokens: int) -> None:
        done, skipped = 0, set()
        while done < tokens:
            leaves = [n for n in self.nodes if self.is_dleaf(n) and n not in skipped]
            if not leaves:
                return
            n = min(leaves, key=lambda x: (self.nodes[x]["time"], x))
            d = self.nodes[n]
            k = len(d["pages"])
            if d["host"] or (self.wb and self.write(n)):
                d["dev"] = False
            elif self.wb:
                below = [c for c in self.nodes if self.under(c, n)]
                if any(self.nodes[c]["lock"] for c in below):
                    skipped.add(n)
                    continue
                for c in below:
                    if self.nodes[c]["host"]:
                        self.host_free += len(self.nodes[c]["pages"])
                        self.evicted += len(self.nodes[c]["pages"])
                    self.delete(c)
                self.delete(n)
            else:
                self.delete(n)
            self.free += k
            done += k * self.B

    def under(self, c: int, n: int) -> bool:
        p = self.nodes[c]["parent"]
        while p is not None:
            if p == n:
                return True
            p = self.nodes[p]["parent"]
        return False

    def lock(self, n: int, delta: int) -> None:
        while n != 0:
            self.nodes[n]["lock"] += delta
            n = self.nodes[n]["parent"]

    def ensure(self, tokens: int) -> None:
        if tokens > self.free * self.B:
            self.evict(tokens - self.free * self.B)


def reference(pages: EnginePages, N: int | None, C: int | None, write: str, decode: bool):
    B = pages.page_tokens
    P, O = pages.input_tokens, pages.output_tokens
    big = int(((P + np.maximum(O, 1) + B) // B).sum()) + 1
    ref = _Ref(big if N is None else N, big if C is None else C, write, B)
    dev_hits, host_hits = [], []
    for r in range(pages.n_requests):
        p = int(P[r])
        prompt = [int(x) for x in pages.key[pages.offsets[r]:pages.offsets[r] + p // B]]
        steps = max(int(O[r]), 1) - 1 if decode else 0
        full = prompt + [("gen", r)] * ((p + steps) // B - len(prompt))
        dm, dnode, m, best, _ = ref.walk(prompt[:(p - 1) // B], False)
        loaded = 0
        if m > dm and (m - dm) * B >= 10:
            ref.lock(best, 1)
            if ref.free < m - dm:
                ref.evict((m - dm - ref.free) * B)
            if ref.free >= m - dm:
                ref.free -= m - dm
                x = best
                while not ref.nodes[x]["dev"]:
                    ref.nodes[x]["dev"] = True
                    x = ref.nodes[x]["parent"]
                loaded, dnode = m - dm, best
                x = best
                while x != 0:
                    ref.dup(x)
                    x = ref.nodes[x]["parent"]
            else:
                ref.lock(best, -1)
                ref.lock(dnode, 1)
        else:
            ref.lock(dnode, 1)
        dev_hits.append(dm * B)
        host_hits.append(loaded * B)
        held, protected, inserted = dnode, dm + loaded, 0
        ref.ensure(p - B * protected + B)
        need = -(-p // B) - protected
        assert need <= ref.free, "infeasible"
        ref.free -= need

        def checkpoint(L: int, full: list = full, prompt: list = prompt) -> None:
            nonlocal held, protected, inserted
            gen = full[:L]
            pre, adopted = 0, 0
            if L:
                _, _, pre, _, adopted = ref.walk(gen, True, inserted)
                inserted = max(inserted, L)
            else:
                ref.tick()
            if pre > protected:
                ref.free += pre - protected - adopted
            if 0 < len(prompt) < L:
                ref.walk(prompt, True, len(prompt))
            node = ref.walk(gen, False)[3] if L else 0
            protected = L
            ref.lock(held, -1)
            ref.lock(node, 1)
            held = node

        checkpoint(len(prompt))
        seq = p
        for _ in range(steps):
            seq += 1
            ref.ensure(B)
            if (seq - 1) % B == 0:
                assert ref.free >= 1, "infeasible"
                ref.free -= 1
        checkpoint(seq // B)
        if seq % B:
            ref.free += 1
        ref.lock(held, -1)
    return dev_hits, host_hits, (ref.written, ref.evicted, ref.refused)


def _pools(pages: EnginePages, decode: bool) -> list[int | None]:
    P, O = pages.input_tokens, pages.output_tokens
    lo = int(((P + (np.maximum(O, 1) - 1 if decode else 0) + 15) // 16).max())
    return [lo, lo + 3, None]


@pytest.mark.parametrize("seed", range(8))
def test_equals_the_naive_reference(seed: int) -> None:
    pages = engine_pages(random_trace(seed, 20))
    rng = np.random.default_rng(seed)
    for decode in (False, True):
        for N in _pools(pages, decode):
            for write in WRITES:
                for C in (0, int(rng.integers(1, 6)), int(rng.integers(6, 30)), None):
                    dev, host, fail, stats = hicache_run(pages, N, C, write, decode)
                    assert fail == -1
                    assert (dev, host, stats) == reference(pages, N, C, write, decode), (decode, N, write, C)


@pytest.mark.parametrize("seed", range(25))
def test_no_host_is_plain_sglang_and_inf_host_holds_everything(seed: int) -> None:
    """Host 0: the device hits are simulate_sglang's (every write refused or none made).
    Host inf: device + host hits are the never-evicting pool's hits (write_through and
    write_back write every node before it leaves the device); selective can only be below."""
    pages = engine_pages(random_trace(seed, 30))
    for decode in (False, True):
        inf = simulate_sglang(pages, [None], "serial", decode=decode).hit_tokens[0]
        for N in _pools(pages, decode):
            plain = simulate_sglang(pages, [N], "serial", decode=decode).hit_tokens[0]
            for write in WRITES:
                dev, host, fail, _ = hicache_run(pages, N, 0, write, decode)
                assert fail == -1 and dev == plain.tolist() and not any(host)
                dev, host, fail, (_, evicted, _) = hicache_run(pages, N, None, write, decode)
                total = np.add(dev, host)
                assert evicted == 0
                if write == "write_through_selective":
                    assert (total <= inf).all()
                else:
                    assert total.tolist() == inf.tolist()


@pytest.mark.parametrize("path", ENGINE_TRACES, ids=lambda p: p.stem)
def test_no_host_equals_plain_sglang_on_the_engine_traces(path: Path) -> None:
    from stackdist.traces.formats import read_requests

    info = json.loads((path.parent / "traces.json").read_text())[path.stem]  # every committed trace is listed
    trace = read_requests(path, block_size=int(info["hash_block_size"]))
    pages = engine_pages(trace)
    for decode in (False, True):
        lo = _pools(pages, decode)[0]
        for N in (lo, 2 * lo):
            plain = simulate_sglang(pages, [N], "serial", decode=decode).hit_tokens[0].tolist()
            assert hicache_run(pages, N, 0, "write_through", decode)[0] == plain
            assert hicache_run(pages, N, 0, "write_back", decode)[0] == plain


def test_edges() -> None:
    """A host smaller than a node refuses its writes; selective writes a prefix only once two
    requests inserted it; write_back writes only what the device evicts."""
    t = RequestTrace.from_blocks([[1, 2, 3, 4], [5, 6], [1, 2, 3, 4, 7]], block_size=16, last_tokens=[16, 16, 16])
    pages = engine_pages(t)
    O = np.ones(3, np.int64)
    pages = EnginePages(pages.key, pages.offsets, pages.input_tokens, O, pages.n_keys, 16)
    # device of 5 pages: request 1 evicts request 0's 4-page leaf; host of 2 pages cannot take it
    dev, host, _, (written, _, refused) = hicache_run(pages, 5, 2, "write_through", False)
    assert host == [0, 0, 0] and refused >= 1 and written == 2  # [5, 6] written, [1..4] refused
    dev, host, _, (written, _, _) = hicache_run(pages, 5, 8, "write_through", False)
    assert host == [0, 0, 64] and dev == [0, 0, 0]  # [1..4] demoted at request 1, loaded back at 2
    dev, host, _, (written, _, _) = hicache_run(pages, 5, 8, "write_through_selective", False)
    assert host == [0, 0, 0] and written == 0  # nothing inserted twice before it left the device
    dev, host, _, (written, _, _) = hicache_run(pages, 5, 8, "write_back", False)
    assert host == [0, 0, 64] and written == 6  # what the device evicted: [1..4], then [5, 6] for the load


def test_model_registered_and_result_shape() -> None:
    model = offload_model("hicache")
    assert (model.behind, model.tiers, model.unit, model.driven, model.defaults["write"]) == \
        ("sglang", ("host",), "pages", False, "write_through")
    pages = engine_pages(random_trace(3, 20))
    pools = _pools(pages, False)
    gpu = simulate_sglang(pages, pools, "serial").hit_tokens
    configs = [TierConfig((("host", c),), (("write", w),)) for c in (0, 8) for w in WRITES]
    res = model.simulate(pages, pools, gpu, configs, False)
    assert res.config_gpu_hit_tokens is not None and res.tier_hit_tokens["host"].shape == (3, 6, 20)
    for j in (0, 1, 2):  # host 0: the engine model's hits
        assert (res.gpu_hits(0, j) == gpu[0]).all() and not res.offload_hit_tokens[:, j].any()
    assert parse_offload("hicache:host=16pages,write=write_back").options == (("write", "write_back"),)


def test_plan_cli_per_request_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = RequestTrace.from_blocks([[1, 2, 3, 4], [5, 6], [1, 2, 3, 4, 7], [5, 6, 8]], block_size=16,
                                 last_tokens=[16, 16, 16, 16])
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i * 1000, "input_length": int(t.input_length[i]),
                                        "output_length": 1, "hash_ids": [int(x) for x in t.request_blocks(i)]}) + "\n"
                            for i in range(t.n_requests)))
    out = tmp_path / "per.csv"
    code, _out, err = run_stackdist(capsys, "plan", str(path), "--block-size", "16", "--semantics", "sglang", "--gpu-blocks", "6",
                  "--offload", "hicache:host=8pages", "--schedule", "serial", "--per-request", str(out),
                  "--json", str(tmp_path / "plan.json"))
    assert code == 0, err
    rows = list(csv.DictReader(out.open()))
    assert {"hit_tokens_6", "offload_hit_tokens_6", "offload_gpu_hit_tokens_6"} <= set(rows[0])
    for row, p in zip(rows, t.input_length):
        gpu, host = int(row["offload_gpu_hit_tokens_6"]), int(row["offload_hit_tokens_6"])
        assert 0 <= gpu + host <= p - 1 and host % 16 == 0
    assert sum(int(r["offload_hit_tokens_6"]) for r in rows) > 0


def test_real_trace_inf_host_holds_everything() -> None:
    """The first 1,500 requests of the bundled conversation trace (real shared prefixes): with a
    host pool that never evicts, device + host hits are the never-evicting device pool's hits
    (write_through, write_back); with no host, the device hits are plain SGLang's."""
    from stackdist.traces.stream_input import read_as_requests

    path = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_conversation_trace.jsonl"
    trace = read_as_requests([str(path)], "mooncake", None, False, True)
    pages = engine_pages(trace.select(np.arange(1500)))
    small = int(((pages.input_tokens + pages.output_tokens + 15) // 16).max()) + 2
    inf = simulate_sglang(pages, [None], "serial", decode=True).hit_tokens[0]
    plain = simulate_sglang(pages, [small], "serial", decode=True).hit_tokens[0]
    assert hicache_run(pages, small, 0, "write_through", True)[0] == plain.tolist()
    for write in ("write_through", "write_back"):
        dev, host, fail, _ = hicache_run(pages, small, None, write, True)
        assert fail == -1 and np.add(dev, host).tolist() == inf.tolist() and sum(host) > 10**6
