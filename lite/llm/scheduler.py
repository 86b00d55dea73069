"""Continuous batching: which tokens of which requests the next model step runs, within a token budget.

Each step mixes decode tokens of running requests (one each) with chunks of prompts (chunked prefill), so a long
prompt never stalls the running generations for more than a budget's worth of work. Requests join when their
prompt's KV-cache blocks fit (its cached prefix is skipped) and leave when they finish or are aborted; when a
running request needs a block and none is free, the most recently arrived running request is preempted (its blocks
freed, its tokens recomputed later), vLLM's recompute policy, so the oldest requests always make progress."""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

from .block_manager import BlockManager, OutOfBlocks
from .sampling import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    status: RequestStatus = RequestStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0          # tokens whose keys/values are in the cache
    finish_reason: str | None = None
    arrival: int = 0
    prompt_keys: list | None = None   # the prompt as prefix caching hashes it (image tokens keyed by their content)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def cache_keys(self) -> list:
        return (self.prompt_keys or self.prompt_ids) + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)


@dataclass(frozen=True)
class ScheduledChunk:
    request: Request
    start: int                     # position of the first token this step computes
    num_tokens: int                # tokens computed this step (1 for a decode)
    samples: bool                  # the step's last token is the sequence's newest: its logits give a token
    block_table: tuple[int, ...]


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk]
    copies: list[tuple[int, int]]  # (source, destination) blocks the worker copies before the step
    preempted: list[str]

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)


class Scheduler:
    def __init__(self, blocks: BlockManager, max_num_seqs: int = 64, max_num_batched_tokens: int = 512):
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self._arrivals = itertools.count()

    def add(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        if not request.prompt_ids:
            raise ValueError(f"request {request.request_id!r} has an empty prompt")
        most = self.blocks.num_blocks * self.blocks.block_size
        if request.num_tokens + request.params.max_new_tokens > most:
            raise OutOfBlocks(f"request {request.request_id!r} needs up to "
                              f"{request.num_tokens + request.params.max_new_tokens} token slots; the KV cache holds "
                              f"{most}")
        request.arrival = next(self._arrivals)
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def abort(self, request_id: str) -> None:
        r = self.requests.get(request_id)
        if r is None or r.status in (RequestStatus.FINISHED, RequestStatus.ABORTED):
            return
        self._release(r, RequestStatus.ABORTED, "abort")

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- a step ---------------------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        budget = self.budget
        chunks: list[ScheduledChunk] = []
        copies: list[tuple[Request, tuple[int, int]]] = []
        preempted: list[str] = []
        for r in sorted(self.running, key=lambda q: q.arrival):   # oldest first: they keep their blocks
            if r.status is not RequestStatus.RUNNING or budget == 0:
                continue
            remaining = r.num_tokens - r.num_computed
            if remaining > 1:   # a prompt still being prefilled in chunks: its slots were reserved at admission
                n = min(remaining, budget)
            else:               # a decode: a slot for the token sampled last step
                n = 1
                while True:
                    try:
                        copy = self.blocks.append_token(r.request_id, r.all_ids[-1])
                        break
                    except OutOfBlocks:
                        victim = max((q for q in self.running if q is not r and q.status is RequestStatus.RUNNING),
                                     key=lambda q: q.arrival, default=None)
                        if victim is None or victim.arrival < r.arrival:
                            victim = r
                        self._preempt(victim)
                        preempted.append(victim.request_id)
                        chunks = [c for c in chunks if c.request is not victim]
                        copies = [(q, pair) for q, pair in copies if q is not victim]   # its blocks are free now
                        if victim is r:
                            break
                if r.status is not RequestStatus.RUNNING:
                    continue
                if copy is not None:
                    copies.append((r, copy))
            chunks.append(self._chunk(r, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            if not self.blocks.can_allocate(r.cache_keys):
                break   # first come, first served: later requests wait behind it
            self.waiting.pop(0)
            alloc = self.blocks.allocate(r.request_id, r.cache_keys)
            r.num_computed = alloc.num_cached_tokens
            r.status = RequestStatus.RUNNING
            self.running.append(r)
            n = min(r.num_tokens - r.num_computed, budget)
            chunks.append(self._chunk(r, n))
            budget -= n
        return SchedulerOutput(chunks, [pair for _, pair in copies], preempted)

    def _chunk(self, r: Request, n: int) -> ScheduledChunk:
        return ScheduledChunk(r, r.num_computed, n, r.num_computed + n == r.num_tokens,
                              tuple(self.blocks.block_table(r.request_id)))

    def update(self, out: SchedulerOutput, sampled: dict[str, int], eos_token_ids: set[int] | None = None) -> list[Request]:
        """After the worker ran `out`: `sampled` maps each request whose chunk `samples` to its new token. Returns
        the requests that finished."""
        finished = []
        for c in out.chunks:
            r = c.request
            if r.status is not RequestStatus.RUNNING:
                continue
            r.num_computed += c.num_tokens
            self.blocks.mark_computed(r.request_id, r.num_computed)
            if not c.samples:
                continue
            token = sampled[r.request_id]
            r.output_ids.append(int(token))
            reason = None
            if token in r.params.stop_token_ids or (eos_token_ids and token in eos_token_ids):
                reason = "stop"
            elif len(r.output_ids) >= r.params.max_new_tokens:
                reason = "length"
            if reason:
                self._release(r, RequestStatus.FINISHED, reason)
                finished.append(r)
        return finished

    def finish(self, request_id: str, reason: str = "stop") -> None:
        """Ends a request for a reason only the caller sees (a stop string in its text)."""
        r = self.requests[request_id]
        if r.status is RequestStatus.RUNNING or r.status is RequestStatus.WAITING:
            self._release(r, RequestStatus.FINISHED, reason)

    def _preempt(self, r: Request) -> None:
        self.blocks.free_sequence(r.request_id)
        self.running.remove(r)
        r.status = RequestStatus.WAITING
        r.num_computed = 0
        self.waiting.insert(0, r)   # ahead of later arrivals
        self.waiting.sort(key=lambda q: q.arrival)

    def _release(self, r: Request, status: RequestStatus, reason: str) -> None:
        if r.status is RequestStatus.RUNNING:
            self.blocks.free_sequence(r.request_id)
            self.running.remove(r)
        elif r in self.waiting:
            self.waiting.remove(r)
        r.status = status
        r.finish_reason = reason
