"""`LLMEngine`: generation on a decoder step graph (model_zoo.language.decoder_graph) with the KV cache in paged blocks.

Each step the scheduler picks the tokens to run (decodes and prompt chunks of many sequences); the engine passes
them with their positions, block tables and lengths to the graph, whose paged Attention nodes write the new keys
and values into the cache arrays in place and read the past through the block tables (the cache arrays are bound
without a copy); the logits of each sequence's newest token go to its sampler."""
from __future__ import annotations

import collections
import os
from typing import Iterable, Mapping, Sequence

import numpy as np

from .. import Context, DataType, Model, ModelType
from .block_manager import BlockManager, LLMEngineStatus
from .multimodal import PromptEmbeddings
from .sampling import SamplingParams, SequenceSampler
from .scheduler import Request, Scheduler
from .step_shapes import padding_for, scratch_blocks_needed


def _resident(shape: tuple, dtype) -> np.ndarray:
    """Zeros in memory that is touched now (np.zeros maps its pages lazily, on first write)."""
    a = np.empty(shape, dtype)
    a.fill(0)
    return a


class LLMEngine:
    def __init__(self, model_path: str | os.PathLike, config: Mapping, num_blocks: int = 256, block_size: int = 16,
                 max_num_seqs: int = 16, max_num_batched_tokens: int = 256, threads: int = 1,
                 eos_token_ids: Iterable[int] = (), prefix_caching: bool = True, dynamic_quant: bool = False,
                 precision_mode: str = "enforce_fp32", step_buckets: bool = True):
        """`config`: the model's config.json (the cache and state shapes are read from the graph's inputs).
        `dynamic_quant`: products with int8/int4-stored weights quantise their activations to int8 on the fly
        (Context.cpu.dynamic_quant; on CPUs with AVX512-VNNI or AVX2, `self.model.dynamic_quant` says whether it is on).
        `precision_mode` (Context.cpu.precision_mode): "preferred_bf16" multiplies bf16 operands (activations
        rounded to bf16) with float32 sums on CPUs with AVX512_BF16, bf16-stored weights taken as they are.
        `step_buckets`: steps padded to a few bucket shapes (lite.llm.step_shapes), so the graph is planned once per
        bucket rather than per mix of sequences; `step_shapes` counts the shapes run."""
        ctx = Context()
        ctx.cpu.thread_num = threads
        ctx.cpu.dynamic_quant = dynamic_quant
        ctx.cpu.precision_mode = precision_mode
        self.model = Model()
        self.model.build_from_file(model_path, ModelType.MINDIR_LITE, ctx)
        meta = self.model.get_metadata()
        if int(meta.get("kv_block_size", block_size)) != block_size:
            raise ValueError(f"the graph was built for KV blocks of {meta['kv_block_size']} tokens, not {block_size}")
        inputs = {i.name: i for i in self.model.get_inputs()}
        kv_layers = sorted(int(n.split(".")[1]) for n in inputs if n.startswith("key_cache."))
        # The cache: two arrays per attention layer, bound to the graph without a copy and written by it in place, of
        # the element type the graph was built with (bfloat16 as its raw bits: NumPy has no bfloat16; int8 rows end
        # with their float32 scale's 4 bytes); their shapes are the graph's inputs' (a hybrid model has fewer).
        cache_type = inputs[f"key_cache.{kv_layers[0]}"].dtype if kv_layers else DataType.FLOAT32
        self.kv_cache_dtype = {DataType.BFLOAT16: "bfloat16", DataType.FLOAT16: "float16",
                               DataType.INT8: "int8"}.get(cache_type, "float32")
        np_type = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32,
                   "int8": np.int8}[self.kv_cache_dtype]
        # Blocks past num_blocks are scratch for the padding sequences of bucketed steps: no request owns them.
        scratch = scratch_blocks_needed(max_num_seqs, max_num_batched_tokens, block_size) if step_buckets else 0
        self.scratch_blocks = list(range(num_blocks, num_blocks + scratch))
        # Written through now, so the budget is resident from the start: np.zeros' pages were mapped on first write, inside
        # the steps (a 512-token prompt on fresh blocks spent ~50 ms of ~1 s in page faults, its attention 2x slower).
        self.key_cache = [_resident((num_blocks + scratch,) + tuple(inputs[f"key_cache.{i}"].shape[1:]), np_type)
                          for i in kv_layers]
        self.value_cache = [_resident((num_blocks + scratch,) + tuple(inputs[f"value_cache.{i}"].shape[1:]), np_type)
                            for i in kv_layers]
        self.kv_layers = kv_layers
        # Recurrent state (linear-attention layers: a conv window and a delta-rule state per sequence): a slot per
        # sequence that can run, owned like the cache and updated in place by the graph; a sequence's slot is zeroed
        # when its first token runs. A prefix's state is not in any block, so cached prefixes cannot be skipped.
        self.state_names = sorted((n for n in inputs if n.startswith(("conv_state.", "recurrent_state."))),
                                  key=lambda n: (int(n.split(".")[1]), n))
        self.states = {n: _resident((max_num_seqs,) + tuple(inputs[n].shape[1:]), np.float32)
                       for n in self.state_names}
        self.state_slots: dict[str, int] = {}          # request id -> slot, for running requests
        self.free_slots = list(range(max_num_seqs - 1, -1, -1))
        if self.states:
            prefix_caching = False
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching)
        self.scheduler = Scheduler(self.blocks, max_num_seqs, max_num_batched_tokens)
        self.samplers: dict[str, SequenceSampler] = {}
        self.eos_token_ids = set(eos_token_ids)
        self.steps = 0
        self.last_output = None                  # the latest step's SchedulerOutput
        self.last_logits: dict[str, np.ndarray] = {}   # its logits rows, by request id, for requests that sampled
        # Output rows at chosen prompt positions (encode(..., positions=)): wanted, and those computed so far.
        self.wanted_positions: dict[str, frozenset[int]] = {}
        self.position_outputs: dict[str, dict[int, np.ndarray]] = {}
        self.step_shapes: collections.Counter = collections.Counter()   # (tokens, sequences, table width) -> steps
        # A vision-language graph: 3-D positions (multimodal RoPE) and rows that replace token embeddings.
        self.mrope = "mrope_positions" in inputs
        self.takes_embeds = "embeds" in inputs
        self.hidden = int(inputs["embeds"].shape[1]) if self.takes_embeds else None
        self.deepstack_levels = int(inputs["deepstack_embeds"].shape[0]) if "deepstack_embeds" in inputs else 0
        self.prompt_embeds: dict[str, PromptEmbeddings] = {}

    def status(self) -> LLMEngineStatus:
        return self.blocks.status()

    def add_request(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams | None = None,
                    seed_offset: int = 0, embeddings: PromptEmbeddings | None = None) -> Request:
        """Queues one sequence. `seed_offset`: the i-th of n sequences sampled for one prompt draws from seed + i
        (their prompts share KV blocks through prefix caching). `embeddings`: rows (a vision tower's) that replace
        prompt tokens' embeddings and the prompt's multimodal-RoPE positions (a vision-language graph only)."""
        params = params or SamplingParams()
        request = Request(request_id, [int(t) for t in prompt_ids], params)
        if embeddings is not None:
            if embeddings.rows.size and not self.takes_embeds:
                raise ValueError("this graph takes no embeddings (it is not a vision-language model's step graph)")
            if embeddings.mrope_positions is not None and not self.mrope:
                raise ValueError("this graph has no multimodal RoPE: mrope_positions cannot be applied")
            embeddings.check(len(request.prompt_ids), self.hidden)
            levels = 0 if embeddings.deepstack is None else embeddings.deepstack.shape[0]
            if embeddings.rows.size and levels != self.deepstack_levels:
                raise ValueError(f"the graph adds {self.deepstack_levels} DeepStack levels; the embeddings carry "
                                 f"{levels}")
            request.prompt_keys = embeddings.cache_keys(request.prompt_ids)
        self.scheduler.add(request)
        if embeddings is not None:
            self.prompt_embeds[request_id] = embeddings
        self.samplers[request_id] = SequenceSampler(params, request.prompt_ids, seed_offset)
        return request

    def abort(self, request_id: str) -> None:
        self.scheduler.abort(request_id)
        self.prompt_embeds.pop(request_id, None)
        self._free_slot(request_id)

    def step(self) -> list[Request]:
        """Runs one model step; returns the requests that finished in it."""
        out = self.scheduler.schedule()
        self.last_output = out
        if not out.chunks:
            return []
        for src, dst in out.copies:   # copy on write of a shared block, before anything writes it
            for cache in self.key_cache + self.value_cache:
                cache[dst] = cache[src]
        chunks = out.chunks
        slots = self._state_slots(chunks) if self.states else []
        ids, positions, tables, seq_lens, query_lens = [], [], [], [], []
        for c in chunks:
            ids += c.request.all_ids[c.start:c.start + c.num_tokens]
            positions.append(self._positions(c))
            tables.append(c.block_table)
            seq_lens.append(c.start + c.num_tokens)
            query_lens.append(c.num_tokens)
        padding = padding_for(query_lens, self.blocks.block_size, self.scratch_blocks)
        for n, table in zip(padding.lengths, padding.block_tables):   # token 0 at positions 0.., into scratch blocks
            ids += [0] * n
            positions.append(np.broadcast_to(np.arange(n), (3, n)) if self.mrope else np.arange(n))
            tables.append(table)
            seq_lens.append(n)
            query_lens.append(n)
        # Block tables padded to a power of two (at least 4): a decoding sequence's table grows by one block every
        # block_size tokens; bucketed, the graph re-plans only on doubling.
        width = max(4, 1 << (max(len(t) for t in tables) - 1).bit_length())
        lens = np.array(query_lens, np.int64)
        feeds = {
            "input_ids": np.array(ids, np.int64),
            "mrope_positions" if self.mrope else "positions": np.concatenate(positions, axis=-1).astype(np.int64),
            "block_tables": np.array([list(t) + [0] * (width - len(t)) for t in tables], np.int64),
            "seq_lens": np.array(seq_lens, np.int64),
            "query_lens": lens,
            "last_token_index": np.maximum(np.cumsum(lens) - 1, 0),
        }
        extra = self._position_rows(chunks, lens) if self.wanted_positions else []
        if extra:   # rows of requested positions first, then every sequence's last row as always
            feeds["last_token_index"] = np.concatenate([np.array([r for r, _, _ in extra], np.int64),
                                                        feeds["last_token_index"]])
        if self.takes_embeds:
            feeds["embed_rows"], feeds["embeds"], deep = self._embedding_rows(chunks, lens)
            if self.deepstack_levels:
                feeds["deepstack_embeds"] = deep
        self.step_shapes[(len(ids), len(tables), width)] += 1
        for i, k, v in zip(self.kv_layers, self.key_cache, self.value_cache):
            feeds[f"key_cache.{i}"] = k
            feeds[f"value_cache.{i}"] = v
        if self.states:   # padding sequences: no slot (from zeros, nothing kept)
            feeds["state_slots"] = np.array(slots + [-1] * (len(tables) - len(slots)), np.int64)
            feeds.update(self.states)
        logits = self.model.predict(feeds)[0].get_data_to_numpy()
        for i, (_, rid, position) in enumerate(extra):
            self.position_outputs.setdefault(rid, {})[position] = logits[i].copy()
        logits = logits[len(extra):]
        self.last_logits = {c.request.request_id: logits[i] for i, c in enumerate(chunks) if c.samples}
        sampled = {rid: self.samplers[rid].next_token(row) for rid, row in self.last_logits.items()}
        self.steps += 1
        finished = self.scheduler.update(out, sampled, self.eos_token_ids)
        for r in finished:
            self.samplers.pop(r.request_id, None)
            self._free_slot(r.request_id)
        if self.prompt_embeds:   # also those ended outside step (stop strings, aborts)
            from .scheduler import RequestStatus
            for rid in [rid for rid in self.prompt_embeds if getattr(self.scheduler.requests.get(rid), "status",
                                                                      RequestStatus.FINISHED) in
                        (RequestStatus.FINISHED, RequestStatus.ABORTED)]:
                del self.prompt_embeds[rid]
        return finished

    def _positions(self, c) -> np.ndarray:
        """The chunk's token positions: [n], or [3, n] for multimodal RoPE (the prompt's own 3-D positions, then each
        generated token's index moved by the prompt's delta)."""
        index = np.arange(c.start, c.start + c.num_tokens)
        if not self.mrope:
            return index
        mm = self.prompt_embeds.get(c.request.request_id)
        if mm is None or mm.mrope_positions is None:
            return np.broadcast_to(index, (3, c.num_tokens))
        prompt_len = len(c.request.prompt_ids)
        out = np.broadcast_to(index + mm.position_delta(prompt_len), (3, c.num_tokens)).copy()
        inside = index < prompt_len
        out[:, inside] = mm.mrope_positions[:, index[inside]]
        return out

    def _embedding_rows(self, chunks, lens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step rows [K, 1], their embeddings [K, hidden], their DeepStack features [levels, K, hidden]) of the
        replaced prompt tokens this step computes."""
        rows, embeds, deep, offset = [], [], [], 0
        for c, n in zip(chunks, lens):
            mm = self.prompt_embeds.get(c.request.request_id)
            if mm is not None and mm.rows.size:
                pick = (mm.rows >= c.start) & (mm.rows < c.start + c.num_tokens)
                rows.append(mm.rows[pick] - c.start + offset)
                embeds.append(mm.embeds[pick])
                if self.deepstack_levels:
                    deep.append(mm.deepstack[:, pick])
            offset += int(n)
        if not rows:
            return (np.zeros((0, 1), np.int64), np.zeros((0, self.hidden), np.float32),
                    np.zeros((self.deepstack_levels, 0, self.hidden), np.float32))
        deep_rows = np.concatenate(deep, axis=1) if deep else np.zeros((0, 0, 0), np.float32)
        return np.concatenate(rows).reshape(-1, 1), np.concatenate(embeds), deep_rows

    def _free_slot(self, request_id: str) -> None:
        if request_id in self.state_slots:
            self.free_slots.append(self.state_slots.pop(request_id))

    def _state_slots(self, chunks) -> list[int]:
        """The state slot of each chunk's sequence: a sequence gets one when it first runs, zeroed whenever its first
        token runs; finished and aborted requests give theirs back at once, preempted ones (recomputed from the start
        later) here."""
        from .scheduler import RequestStatus
        for rid in [r for r in self.state_slots if self.scheduler.requests[r].status is not RequestStatus.RUNNING]:
            self._free_slot(rid)
        slots = []
        for c in chunks:
            rid = c.request.request_id
            if rid not in self.state_slots:
                self.state_slots[rid] = self.free_slots.pop()
            slot = self.state_slots[rid]
            if c.start == 0:
                for state in self.states.values():
                    state[slot] = 0
            slots.append(slot)
        return slots

    def _position_rows(self, chunks, lens) -> list[tuple[int, str, int]]:
        """(row in the step, request id, position) of each wanted position this step computes."""
        rows, offset = [], 0
        for c, n in zip(chunks, lens):
            wanted = self.wanted_positions.get(c.request.request_id)
            if wanted:
                rows += [(offset + p - c.start, c.request.request_id, p)
                         for p in sorted(wanted) if c.start <= p < c.start + c.num_tokens]
            offset += int(n)
        return rows

    def encode(self, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]] | None = None,
               embeddings: Sequence[PromptEmbeddings | None] | None = None) -> list[np.ndarray]:
        """The graph's output row at each prompt's last token, all prompts in one continuous batch: a logits graph's
        next-token logits, an embedding graph's (head "hidden") last-token state. Nothing is generated.
        `positions`: per prompt, the token positions whose rows to return instead ([len, width] per prompt, in the
        order given), computed as the prompt's chunks pass (a listwise reranker's marker tokens); prefix caching is
        off for those prompts, since a cached prefix's rows are never computed. `embeddings`: per prompt, its image
        rows and multimodal positions (or None), as add_request takes them."""
        base = f"enc{self.steps}_"
        ids = [f"{base}{i}" for i in range(len(prompts))]
        if positions is not None and len(positions) != len(prompts):
            raise ValueError(f"{len(positions)} position lists for {len(prompts)} prompts")
        if embeddings is not None and len(embeddings) != len(prompts):
            raise ValueError(f"{len(embeddings)} embeddings for {len(prompts)} prompts")
        for i, (rid, prompt) in enumerate(zip(ids, prompts)):
            if not prompt:
                raise ValueError("an empty prompt has no last token to encode")
            if positions is not None:
                bad = [p for p in positions[i] if not 0 <= int(p) < len(prompt)]
                if bad:
                    raise ValueError(f"prompt {i}: positions {bad} are outside its {len(prompt)} tokens")
                self.wanted_positions[rid] = frozenset(int(p) for p in positions[i])
            self.add_request(rid, prompt, SamplingParams(max_new_tokens=1, temperature=0),
                             embeddings=embeddings[i] if embeddings is not None else None)
        rows: dict[str, np.ndarray] = {}
        caching = self.blocks.prefix_caching
        self.blocks.prefix_caching = caching and positions is None
        try:
            while self.scheduler.has_work():
                self.step()
                rows.update({rid: row.copy() for rid, row in self.last_logits.items() if rid.startswith(base)})
        finally:
            self.blocks.prefix_caching = caching
        if positions is None:
            return [rows[rid] for rid in ids]
        out = []
        for rid, wanted in zip(ids, positions):
            got = self.position_outputs.pop(rid, {})
            self.wanted_positions.pop(rid, None)
            out.append(np.stack([got[int(p)] for p in wanted]) if len(wanted) else np.zeros((0, 0), np.float32))
        return out

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | None = None,
                 embeddings: Sequence[PromptEmbeddings | None] | None = None) -> list[list[int]]:
        """Generates for every prompt, all in one continuous batch; the new token ids of each, in prompt order.
        `embeddings`: per prompt, its image rows and multimodal positions (or None)."""
        base = f"gen{self.steps}_"
        if embeddings is not None and len(embeddings) != len(prompts):
            raise ValueError(f"{len(embeddings)} embeddings for {len(prompts)} prompts")
        requests = [self.add_request(f"{base}{i}", p, params,
                                     embeddings=embeddings[i] if embeddings is not None else None)
                    for i, p in enumerate(prompts)]
        while self.scheduler.has_work():
            self.step()
        return [r.output_ids for r in requests]

