"""`LockStepDecoder`: an encoder-decoder's step graph (model_zoo.language.cross_decoder_graph: Whisper,
FireRedASR-AED) run over a few sequences in lock step: each slot owns a fixed run of KV-cache blocks, bound to the
graph without a copy and written by it in place; every step feeds the same number of new tokens per sequence, with
each sequence's cross-attention keys and values. Beam search reorders slots by copying their used blocks."""
from __future__ import annotations

import numpy as np


class LockStepDecoder:
    def __init__(self, model, slots: int, max_len: int):
        self.model = model
        inputs = {i.name: i for i in model.get_inputs()}
        self.layers = sorted(int(n.split(".")[1]) for n in inputs if n.startswith("key_cache."))
        if not self.layers:
            raise ValueError("not a decoder step graph (no key_cache inputs)")
        self.row_shape = tuple(inputs[f"key_cache.{self.layers[0]}"].shape[1:])   # (heads, block, head_dim)
        self.block = int(self.row_shape[1])
        self.slots, self.blocks_per_slot = 0, 0
        self.key_cache: list[np.ndarray] = []
        self.value_cache: list[np.ndarray] = []
        self.reserve(slots, max_len)

    def reserve(self, slots: int, max_len: int) -> None:
        """Room for `slots` sequences of up to `max_len` tokens (kept when already large enough); what the slots
        hold is kept when the room grows."""
        blocks = -(-max_len // self.block)
        if slots <= self.slots and blocks <= self.blocks_per_slot:
            return
        old_slots, old_blocks = self.slots, self.blocks_per_slot
        self.slots, self.blocks_per_slot = max(slots, self.slots), max(blocks, self.blocks_per_slot)
        shape = (self.slots * self.blocks_per_slot,) + self.row_shape

        def grown(cache: np.ndarray) -> np.ndarray:
            new = np.zeros(shape, np.float32)
            for s in range(old_slots):   # each slot's run of blocks moves to its new place
                new[s * self.blocks_per_slot:s * self.blocks_per_slot + old_blocks] = \
                    cache[s * old_blocks:(s + 1) * old_blocks]
            return new
        self.key_cache = [grown(c) for c in self.key_cache] if old_slots else \
            [np.zeros(shape, np.float32) for _ in self.layers]
        self.value_cache = [grown(c) for c in self.value_cache] if old_slots else \
            [np.zeros(shape, np.float32) for _ in self.layers]

    def ensure(self, length: int, chunk: int = 256) -> None:
        """Room for sequences of `length` tokens in every slot, grown `chunk` tokens at a time (a long generation
        allocates as it goes rather than for its worst case)."""
        if length > self.blocks_per_slot * self.block:
            self.reserve(self.slots, -(-length // chunk) * chunk)

    def step(self, tokens: np.ndarray, start: int, slots: np.ndarray, cross: dict[str, np.ndarray]) -> np.ndarray:
        """`tokens` [B, T] at positions start .. start + T - 1 of the sequences in `slots`; `cross`: cross_k.i /
        cross_v.i [B, S, D] in the same order. The last tokens' logits [B, vocab]."""
        B, T = tokens.shape
        if start + T > self.blocks_per_slot * self.block:
            raise ValueError(f"a sequence of {start + T} tokens exceeds the {self.blocks_per_slot * self.block} "
                             "reserved")
        tables = (np.asarray(slots, np.int64)[:, None] * self.blocks_per_slot +
                  np.arange(self.blocks_per_slot, dtype=np.int64)[None])
        feeds = {"input_ids": np.ascontiguousarray(tokens, np.int64).reshape(-1),
                 "positions": np.tile(np.arange(start, start + T, dtype=np.int64), B),
                 "block_tables": tables, "seq_lens": np.full(B, start + T, np.int64),
                 "query_lens": np.full(B, T, np.int64),
                 "last_token_index": np.arange(1, B + 1, dtype=np.int64) * T - 1}
        for i, k, v in zip(self.layers, self.key_cache, self.value_cache):
            feeds[f"key_cache.{i}"], feeds[f"value_cache.{i}"] = k, v
        feeds.update(cross)
        return self.model.predict(feeds)[0].get_data_to_numpy()

    def reorder(self, sources: np.ndarray, length: int) -> None:
        """Slot j takes the cache of slot sources[j] (its first `length` tokens): beam search's survivors."""
        used = -(-length // self.block)
        n = self.blocks_per_slot
        for cache in self.key_cache + self.value_cache:
            rows = [cache[s * n:s * n + used].copy() for s in sources]
            for j, r in enumerate(rows):
                cache[j * n:j * n + used] = r
