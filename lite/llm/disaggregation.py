"""Prompt / decode disaggregation (MindSpore Lite's `LLMRole.Prompt` / `LLMRole.Decoder`): one engine runs prompts,
another one decodes, each in its own process (or machine), so long prefills never stall running generations and
each side is sized for its own work. The prompt side prefills a request and samples its first token, then hands the
request over with its KV-cache blocks and its sampler's state; the decode side puts those blocks into its own cache
(other block numbers), and continues as if it had prefilled the prompt itself: the tokens are the ones a single
engine generates, seeded sampling included.

The hand-over goes through `torch.distributed` point-to-point sends on any backend the process group has (gloo on
CPUs, NCCL/HCCL where present). Per request: a JSON header (an int64 length, then its bytes as uint8), then the key
and value blocks of every layer as the cache arrays' own element type (bfloat16 as its bits)."""
from __future__ import annotations

import dataclasses
import enum
import json
from typing import Iterable, Sequence

import numpy as np

from .engine import LLMEngine
from .sampling import SamplingParams, SequenceSampler
from .scheduler import Request, RequestStatus


class LLMRole(enum.Enum):
    PROMPT = "prompt"
    DECODER = "decoder"


def _send_bytes(dist, payload: bytes, dst: int, group) -> None:
    import torch
    dist.send(torch.tensor([len(payload)], dtype=torch.int64), dst, group=group)
    dist.send(torch.frombuffer(bytearray(payload), dtype=torch.uint8), dst, group=group)


def _recv_bytes(dist, src: int, group) -> bytes:
    import torch
    n = torch.zeros(1, dtype=torch.int64)
    dist.recv(n, src, group=group)
    buf = torch.empty(int(n.item()), dtype=torch.uint8)
    dist.recv(buf, src, group=group)
    return buf.numpy().tobytes()


def _as_torch(a: np.ndarray):
    import torch
    # bfloat16 caches are uint16 bits; torch's point-to-point sends take int16 of the same bytes
    return torch.from_numpy(np.ascontiguousarray(a.view(np.int16) if a.dtype == np.uint16 else a))


def _require_kv_only(engine: LLMEngine) -> None:
    if engine.states:
        raise NotImplementedError("prompt/decode disaggregation hands over KV-cache blocks only; this model's "
                                  "linear-attention layers keep a recurrent state per sequence "
                                  f"({', '.join(engine.state_names[:2])}, ...), whose hand-over is not implemented")


class PromptEngine:
    """The prompt role: prefills requests on `engine` and hands each over to the decoder rank as soon as its first
    token is sampled."""

    role = LLMRole.PROMPT

    def __init__(self, engine: LLMEngine, decoder_rank: int = 1, group=None):
        _require_kv_only(engine)
        self.engine, self.decoder_rank, self.group = engine, decoder_rank, group

    def run(self, requests: Iterable[tuple[str, Sequence[int], SamplingParams]]) -> int:
        """Prefills every (request_id, prompt_ids, params) in continuous batches and hands it over; then tells the
        decoder that no more come. Returns how many were handed over."""
        import torch.distributed as dist

        wanted: dict[str, SamplingParams] = {}
        for rid, prompt, params in requests:
            wanted[rid] = params
            # one token here: the prompt's prefill and its first sample; the decoder generates the rest
            self.engine.add_request(rid, prompt, dataclasses.replace(params, max_new_tokens=1))
        sent = 0
        while self.engine.scheduler.has_work():
            samplers = dict(self.engine.samplers)   # the step drops finished requests' samplers
            finished = self.engine.step()
            tables = {c.request.request_id: c.block_table for c in self.engine.last_output.chunks}
            for r in finished:   # their blocks are free now but untouched until the next step: send them
                self._hand_over(dist, r, wanted[r.request_id], tables[r.request_id], samplers[r.request_id])
                sent += 1
        _send_bytes(dist, json.dumps({"done": True}).encode(), self.decoder_rank, self.group)
        return sent

    def _hand_over(self, dist, r: Request, params: SamplingParams, table: Sequence[int], sampler) -> None:
        first = r.output_ids[0]
        # Done already: the first token ended it (EOS, a stop token, or one token wanted).
        done = r.finish_reason == "stop" or params.max_new_tokens == 1
        used = -(-len(r.prompt_ids) // self.engine.blocks.block_size)
        blocks = list(table[:used])
        header = {"request_id": r.request_id, "prompt_ids": r.prompt_ids, "first_token": first,
                  "params": dataclasses.asdict(params), "finish_reason": r.finish_reason if done else None,
                  "sampler": {"counts": {str(k): v for k, v in sampler.counts.items()},
                              "rng": sampler.rng.bit_generator.state},
                  "blocks": len(blocks)}
        _send_bytes(dist, json.dumps(header).encode(), self.decoder_rank, self.group)
        if done:
            return
        for k, v in zip(self.engine.key_cache, self.engine.value_cache):
            dist.send(_as_torch(k[blocks]), self.decoder_rank, group=self.group)
            dist.send(_as_torch(v[blocks]), self.decoder_rank, group=self.group)


class DecodeEngine:
    """The decoder role: receives prefilled requests from the prompt rank into `engine` and generates the rest."""

    role = LLMRole.DECODER

    def __init__(self, engine: LLMEngine, prompt_rank: int = 0, group=None):
        _require_kv_only(engine)
        self.engine, self.prompt_rank, self.group = engine, prompt_rank, group
        self.results: dict[str, Request] = {}

    def receive(self) -> Request | None:
        """Takes one handed-over request into the engine (running, its prompt already in the cache); None when the
        prompt side has finished."""
        import torch
        import torch.distributed as dist

        header = json.loads(_recv_bytes(dist, self.prompt_rank, self.group))
        if header.get("done"):
            return None
        e = self.engine
        params = SamplingParams(**header["params"])
        rid, prompt = header["request_id"], header["prompt_ids"]
        request = Request(rid, prompt, params)
        request.output_ids = [int(header["first_token"])]
        if header["finish_reason"]:
            request.status, request.finish_reason = RequestStatus.FINISHED, header["finish_reason"]
            self.results[rid] = request
            return request
        sched = e.scheduler
        sched.add(request)   # validates it (a new id, room for its longest output)
        if not e.blocks.can_allocate(prompt):
            sched.abort(rid)
            raise RuntimeError(f"request {rid!r}: the decoder's KV cache has no room for its {len(prompt)}-token prompt")
        sched.waiting.remove(request)
        alloc = e.blocks.allocate(rid, prompt)
        shape = (header["blocks"],) + e.key_cache[0].shape[1:]
        fresh = [i for i in range(header["blocks"]) if i * e.blocks.block_size >= alloc.num_cached_tokens]
        for k, v in zip(e.key_cache, e.value_cache):
            for cache in (k, v):
                buf = torch.empty(shape, dtype=_as_torch(cache[:0]).dtype)
                dist.recv(buf, self.prompt_rank, group=self.group)
                data = buf.numpy().view(cache.dtype)
                for i in fresh:   # blocks this cache already holds (a shared prefix) keep their contents
                    cache[alloc.block_table[i]] = data[i]
        # Running, as if prefilled here: the next step decodes the first token.
        request.num_computed = len(prompt)
        request.status = RequestStatus.RUNNING
        sched.running.append(request)
        e.blocks.mark_computed(rid, request.num_computed)
        sampler = SequenceSampler(params, prompt)   # in the state the prompt side left it
        sampler.counts = {int(k): int(v) for k, v in header["sampler"]["counts"].items()}
        sampler.rng.bit_generator.state = header["sampler"]["rng"]
        e.samplers[rid] = sampler
        self.results[rid] = request
        return request

    def run(self) -> dict[str, list[int]]:
        """Receives every request the prompt side sends, then decodes them all in one continuous batch; the output
        token ids by request id."""
        while self.receive() is not None:
            pass
        while self.engine.scheduler.has_work():
            self.engine.step()
        return {rid: list(r.output_ids) for rid, r in self.results.items()}
