"""`LLMEngine`: generation on a decoder step graph (model_zoo.decoder_graph) with the KV cache in paged blocks.

Each step the scheduler picks the tokens to run (decodes and prompt chunks of many sequences); the engine passes
them with their positions, block tables and lengths to the graph, whose paged Attention nodes write the new keys
and values into the cache arrays in place and read the past through the block tables (the cache arrays are bound
without a copy); the logits of each sequence's newest token go to its sampler."""
from __future__ import annotations

import os
from typing import Iterable, Mapping, Sequence

import numpy as np

from .. import Context, Model, ModelType
from .block_manager import BlockManager, LLMEngineStatus
from .sampling import SamplingParams, SequenceSampler
from .scheduler import Request, Scheduler


class LLMEngine:
    def __init__(self, model_path: str | os.PathLike, config: Mapping, num_blocks: int = 256, block_size: int = 16,
                 max_num_seqs: int = 16, max_num_batched_tokens: int = 256, threads: int = 1,
                 eos_token_ids: Iterable[int] = (), prefix_caching: bool = True):
        ctx = Context()
        ctx.cpu.thread_num = threads
        self.model = Model()
        self.model.build_from_file(model_path, ModelType.MINDIR_LITE, ctx)
        meta = self.model.get_metadata()
        if int(meta.get("kv_block_size", block_size)) != block_size:
            raise ValueError(f"the graph was built for KV blocks of {meta['kv_block_size']} tokens, not {block_size}")
        layers = int(config["num_hidden_layers"])
        kv_heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))
        shape = (num_blocks, kv_heads, block_size, head_dim)
        # The cache: two arrays per layer, bound to the graph without a copy and written by it in place.
        self.key_cache = [np.zeros(shape, np.float32) for _ in range(layers)]
        self.value_cache = [np.zeros(shape, np.float32) for _ in range(layers)]
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching)
        self.scheduler = Scheduler(self.blocks, max_num_seqs, max_num_batched_tokens)
        self.samplers: dict[str, SequenceSampler] = {}
        self.eos_token_ids = set(eos_token_ids)
        self.steps = 0

    def status(self) -> LLMEngineStatus:
        return self.blocks.status()

    def add_request(self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams | None = None) -> Request:
        params = params or SamplingParams()
        request = Request(request_id, [int(t) for t in prompt_ids], params)
        self.scheduler.add(request)
        self.samplers[request_id] = SequenceSampler(params, request.prompt_ids)
        return request

    def abort(self, request_id: str) -> None:
        self.scheduler.abort(request_id)

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
        # Block tables padded to a power of two (at least 4): the graph is planned per input shape, and a decoding
        # sequence's table grows by one block every block_size tokens; bucketed, it re-plans only on doubling.
        width = max(4, 1 << (max(len(c.block_table) for c in chunks) - 1).bit_length())
        ids, positions = [], []
        for c in chunks:
            ids += c.request.all_ids[c.start:c.start + c.num_tokens]
            positions += range(c.start, c.start + c.num_tokens)
        query_lens = np.array([c.num_tokens for c in chunks], np.int64)
        feeds = {
            "input_ids": np.array(ids, np.int64),
            "positions": np.array(positions, np.int64),
            "block_tables": np.array([list(c.block_table) + [0] * (width - len(c.block_table)) for c in chunks],
                                     np.int64),
            "seq_lens": np.array([c.start + c.num_tokens for c in chunks], np.int64),
            "query_lens": query_lens,
            "last_token_index": np.cumsum(query_lens) - 1,
        }
        for i, (k, v) in enumerate(zip(self.key_cache, self.value_cache)):
            feeds[f"key_cache.{i}"] = k
            feeds[f"value_cache.{i}"] = v
        logits = self.model.predict(feeds)[0].get_data_to_numpy()
        self.last_logits = {c.request.request_id: logits[i] for i, c in enumerate(chunks) if c.samples}
        sampled = {rid: self.samplers[rid].next_token(row) for rid, row in self.last_logits.items()}
        self.steps += 1
        finished = self.scheduler.update(out, sampled, self.eos_token_ids)
        for r in finished:
            self.samplers.pop(r.request_id, None)
        return finished

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams | None = None) -> list[list[int]]:
        """Generates for every prompt, all in one continuous batch; the new token ids of each, in prompt order."""
        base = f"gen{self.steps}_"
        requests = [self.add_request(f"{base}{i}", p, params) for i, p in enumerate(prompts)]
        while self.scheduler.has_work():
            self.step()
        return [r.output_ids for r in requests]


# -- text in, text out ----------------------------------------------------------------------------------------------
import json  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

from .detokenizer import IncrementalDetokenizer, StopStrings  # noqa: E402


@dataclass
class GenerationOutput:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None
    prompt_tokens: int
    time_to_first_token: float | None = None   # seconds
    tokens_per_second: float | None = None     # generated tokens after the first, per second


@dataclass
class _TextState:
    detok: IncrementalDetokenizer
    stops: StopStrings
    text: str = ""
    started: float = field(default_factory=time.perf_counter)
    first: float | None = None
    emitted: int = 0


def _decoder_weights(model_dir: str) -> dict:
    """The checkpoint's tensors from its safetensors files, read one tensor at a time (never a whole copy)."""
    import glob

    from safetensors import safe_open
    files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"'{model_dir}' has neither decoder.ms nor *.safetensors weights")
    weights = {}
    for path in files:
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():
                weights[name] = f.get_tensor(name)
    return weights


class TextEngine:
    """Text in, text out, on an LLMEngine: tokenisation, chat templates, incremental detokenisation, stop strings,
    streaming and per-request timings. `from_pretrained(dir)` takes a Hugging Face checkpoint directory (config.json,
    safetensors, tokenizer files); the step graph is converted on first use and cached there as decoder.ms."""

    def __init__(self, engine: LLMEngine, tokenizer):
        self.engine = engine
        self.tokenizer = tokenizer
        self.states: dict[str, _TextState] = {}
        self._ids = 0

    @classmethod
    def from_pretrained(cls, model_dir: str, block_size: int = 16, **engine_args) -> "TextEngine":
        from .tokenizer import ChatTokenizer
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        path = os.path.join(model_dir, f"decoder_b{block_size}.ms")
        if not os.path.isfile(path):
            from model_zoo.decoder_graph import write_decoder
            write_decoder(config, _decoder_weights(model_dir), path, block_size=block_size)
        tokenizer = ChatTokenizer(model_dir)
        engine = LLMEngine(path, config, block_size=block_size, eos_token_ids=tokenizer.eos_token_ids, **engine_args)
        return cls(engine, tokenizer)

    def add(self, prompt: str | list[dict] | Sequence[int], params: SamplingParams | None = None) -> str:
        """Queues a prompt (text, chat messages or token ids); returns its request id."""
        params = params or SamplingParams()
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif prompt and isinstance(prompt[0], dict):
            ids = self.tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True)
        else:
            ids = [int(t) for t in prompt]
        rid = f"req{self._ids}"
        self._ids += 1
        self.engine.add_request(rid, ids, params)
        self.states[rid] = _TextState(IncrementalDetokenizer(self.tokenizer, ids), StopStrings(params.stop))
        return rid

    def _advance(self) -> dict[str, str]:
        """One engine step; the new text of each request that got a token."""
        self.engine.step()
        deltas = {}
        for c in self.engine.last_output.chunks:
            r, st = c.request, self.states.get(c.request.request_id)
            if st is None or len(r.output_ids) <= st.emitted:
                continue
            if st.first is None:
                st.first = time.perf_counter()
            new = r.output_ids[st.emitted:]
            st.emitted = len(r.output_ids)
            text = "".join(st.detok.add(t) for t in new if t not in self.engine.eos_token_ids)
            safe, stopped = st.stops.feed(text)
            if stopped:
                self.engine.scheduler.finish(r.request_id, "stop")
            elif r.finish_reason is not None:
                safe += st.stops.flush()
            st.text += safe
            deltas[r.request_id] = safe
        return deltas

    def output(self, rid: str) -> GenerationOutput:
        r, st = self.engine.scheduler.requests[rid], self.states[rid]
        tps = None
        if st.first is not None and len(r.output_ids) > 1:
            tps = (len(r.output_ids) - 1) / max(time.perf_counter() - st.first, 1e-9)
        return GenerationOutput(rid, st.text, list(r.output_ids), r.finish_reason, len(r.prompt_ids),
                                None if st.first is None else st.first - st.started, tps)

    def generate(self, prompts: Sequence, params: SamplingParams | None = None) -> list[GenerationOutput]:
        ids = [self.add(p, params) for p in prompts]
        while self.engine.scheduler.has_work():
            self._advance()
        return [self.output(rid) for rid in ids]

    def stream(self, prompt, params: SamplingParams | None = None):
        """Yields the prompt's text as it is generated (other queued requests advance in the same steps)."""
        rid = self.add(prompt, params)
        request = self.engine.scheduler.requests[rid]
        while request.finish_reason is None:
            delta = self._advance().get(rid)
            if delta:
                yield delta
