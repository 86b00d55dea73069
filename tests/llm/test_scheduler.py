"""Continuous batching against sequential generation, with a fake worker that keeps a real paged cache of token ids:
every step writes the tokens it computes into their blocks' slots and samples from the sequence read back through
the block table, so a wrong slot, a clobbered shared prefix or a missed copy-on-write changes the output."""
from __future__ import annotations

import numpy as np
import pytest

from lite.llm import BlockManager, OutOfBlocks, SamplingParams
from lite.llm.scheduler import Request, RequestStatus, Scheduler

VOCAB = 97


def next_token(ids: list[int]) -> int:
    h = 17
    for t in ids:
        h = (h * 31 + t) % 1_000_003
    return h % VOCAB


def reference(prompt: list[int], max_new: int, stop: set[int] = frozenset()) -> list[int]:
    ids, out = list(prompt), []
    for _ in range(max_new):
        t = next_token(ids)
        out.append(t)
        ids.append(t)
        if t in stop:
            break
    return out


class FakeWorker:
    def __init__(self, blocks: BlockManager):
        self.bs = blocks.block_size
        self.cache = np.full((blocks.num_blocks, self.bs), -1, np.int64)
        self.steps = []

    def step(self, out) -> dict[str, int]:
        for src, dst in out.copies:
            self.cache[dst] = self.cache[src]
        sampled = {}
        for c in out.chunks:
            ids = c.request.all_ids
            for pos in range(c.start, c.start + c.num_tokens):
                self.cache[c.block_table[pos // self.bs], pos % self.bs] = ids[pos]
            if c.samples:
                n = c.start + c.num_tokens
                seen = [int(self.cache[c.block_table[p // self.bs], p % self.bs]) for p in range(n)]
                sampled[c.request.request_id] = next_token(seen)
        self.steps.append(out)
        return sampled


def run(scheduler: Scheduler, worker: FakeWorker, arrivals: dict[int, list[Request]] | None = None, limit=10_000):
    step = 0
    while scheduler.has_work() or (arrivals and any(k >= step for k in arrivals)):
        for r in (arrivals or {}).get(step, []):
            scheduler.add(r)
        out = scheduler.schedule()
        assert out.num_tokens <= scheduler.budget
        assert len(scheduler.running) <= scheduler.max_num_seqs
        scheduler.update(out, worker.step(out))
        step += 1
        assert step < limit
    return step


def prompt(rng, n, prefix=()):
    return list(prefix) + [int(t) for t in rng.integers(0, VOCAB, n - len(prefix))]


@pytest.mark.parametrize("budget,max_seqs", [(64, 8), (7, 3), (512, 64)])
def test_continuous_batching_equals_sequential_generation(budget, max_seqs):
    rng = np.random.default_rng(budget)
    shared = prompt(rng, 40)
    blocks = BlockManager(num_blocks=200, block_size=8)
    s = Scheduler(blocks, max_num_seqs=max_seqs, max_num_batched_tokens=budget)
    reqs = [Request(f"r{i}", prompt(rng, int(n), shared if i % 3 == 0 else ()), SamplingParams(max_new_tokens=int(m)))
            for i, (n, m) in enumerate(zip(rng.integers(41, 150, 10), rng.integers(1, 30, 10)))]
    arrivals = {0: reqs[:4], 3: reqs[4:7], 9: reqs[7:]}
    w = FakeWorker(blocks)
    run(s, w, arrivals)
    for r in reqs:
        assert r.status is RequestStatus.FINISHED and r.finish_reason == "length"
        assert r.output_ids == reference(r.prompt_ids, r.params.max_new_tokens)
    assert blocks.status().num_free_blocks == blocks.num_blocks   # every block back (cached ones count as free)
    if budget < 100:   # long prompts were prefilled in chunks, beside decodes
        assert any(len(o.chunks) > 1 and any(c.num_tokens > 1 and not c.samples for c in o.chunks) for o in w.steps)


def test_a_shared_prefix_skips_its_prefill():
    rng = np.random.default_rng(1)
    common = prompt(rng, 100)
    blocks = BlockManager(num_blocks=64, block_size=16)
    s = Scheduler(blocks, max_num_batched_tokens=512)
    w = FakeWorker(blocks)
    a = Request("a", common + [1, 2, 3], SamplingParams(max_new_tokens=4))
    s.add(a)
    run(s, w)
    b = Request("b", common + [4, 5], SamplingParams(max_new_tokens=4))
    s.add(b)
    out = s.schedule()
    assert [(c.start, c.num_tokens) for c in out.chunks] == [(96, 6)]   # 6 cached blocks of 16
    s.update(out, w.step(out))
    run(s, w)
    assert b.output_ids == reference(b.prompt_ids, 4)


def test_out_of_blocks_preempts_the_newest_and_recomputes_it():
    rng = np.random.default_rng(2)
    blocks = BlockManager(num_blocks=12, block_size=4, prefix_caching=False)
    s = Scheduler(blocks, max_num_batched_tokens=64)
    reqs = [Request(f"r{i}", prompt(rng, 10), SamplingParams(max_new_tokens=12)) for i in range(3)]
    for r in reqs:
        s.add(r)
    w = FakeWorker(blocks)
    run(s, w)
    assert any(o.preempted for o in w.steps)
    for r in reqs:
        assert r.output_ids == reference(r.prompt_ids, 12)


def test_stop_tokens_abort_and_a_request_too_large_for_the_cache():
    rng = np.random.default_rng(3)
    p = prompt(rng, 20)
    ref = reference(p, 50)
    stop = ref[5]
    blocks = BlockManager(num_blocks=40, block_size=4)
    s = Scheduler(blocks)
    r = Request("stop", p, SamplingParams(max_new_tokens=50, stop_token_ids=[stop]))
    gone = Request("gone", prompt(rng, 30), SamplingParams(max_new_tokens=50))
    s.add(r)
    s.add(gone)
    w = FakeWorker(blocks)
    out = s.schedule()
    s.update(out, w.step(out))
    s.abort("gone")
    assert gone.status is RequestStatus.ABORTED
    run(s, w)
    assert r.finish_reason == "stop" and r.output_ids == ref[:ref.index(stop) + 1]
    assert blocks.status().num_free_blocks == 40
    with pytest.raises(OutOfBlocks, match="the KV cache holds 160"):
        s.add(Request("huge", prompt(rng, 150), SamplingParams(max_new_tokens=20)))
    with pytest.raises(ValueError, match="already in use"):
        s.add(Request("stop", p))
