"""Bookkeeping of a paged KV cache: fixed-size blocks of token slots, a block table per sequence, reference counts,
and prefix caching (vLLM's scheme): a full block is identified by the hash of its tokens and of every token before
it, so a sequence whose prompt starts with the same blocks as an earlier one shares them instead of recomputing
them. A shared block about to be written is copied first (copy on write). The memory itself belongs to the
runtime; this decides which block each token goes to."""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Sequence


class OutOfBlocks(RuntimeError):
    """Not enough free KV-cache blocks; nothing was changed."""


@dataclass(frozen=True)
class LLMEngineStatus:
    block_size: int
    num_total_blocks: int
    num_free_blocks: int      # unused blocks, including cached ones nobody uses (evicted when needed)
    num_cached_blocks: int    # blocks holding a reusable prefix


@dataclass(frozen=True)
class Allocation:
    block_table: list[int]
    num_cached_tokens: int    # prompt tokens whose keys/values are already in shared blocks: skip their prefill


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks} and {block_size}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.prefix_caching = prefix_caching
        self.refs = [0] * num_blocks
        self.free: collections.deque[int] = collections.deque(range(num_blocks))   # no reusable content
        self.evictable: collections.OrderedDict[int, None] = collections.OrderedDict()   # ref 0, cached, LRU first
        self.cached: dict[int, int] = {}        # prefix hash -> block
        self.block_hash: dict[int, int] = {}    # block -> prefix hash
        self.tables: dict[object, list[int]] = {}
        self.tokens: dict[object, list[int]] = {}
        self.registered: dict[object, int] = {}   # full blocks of the sequence already hashed

    # -- queries --------------------------------------------------------------------------------------------
    def status(self) -> LLMEngineStatus:
        return LLMEngineStatus(self.block_size, self.num_blocks, len(self.free) + len(self.evictable), len(self.cached))

    def _prefix_hashes(self, token_ids: Sequence[int], limit: int) -> list[int]:
        """The hashes of the first `limit` full blocks of token_ids."""
        hashes, parent = [], None
        for b in range(limit):
            parent = hash((parent, tuple(token_ids[b * self.block_size:(b + 1) * self.block_size])))
            hashes.append(parent)
        return hashes

    def _cached_prefix(self, token_ids: Sequence[int]) -> list[int]:
        """Blocks holding this prompt's leading full blocks. The block with the last prompt token is never reused:
        that token is run again for its logits, and its keys/values are written."""
        if not self.prefix_caching:
            return []
        blocks = []
        for h in self._prefix_hashes(token_ids, (len(token_ids) - 1) // self.block_size):
            block = self.cached.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def blocks_needed(self, token_ids: Sequence[int]) -> int:
        """New blocks a prompt would take now (its cached prefix excluded)."""
        total = -(-len(token_ids) // self.block_size)
        hits = self._cached_prefix(token_ids)
        return total - len(hits) + sum(1 for b in hits if self.refs[b] == 0)   # reviving an evictable one costs one

    def can_allocate(self, token_ids: Sequence[int]) -> bool:
        return self.blocks_needed(token_ids) <= len(self.free) + len(self.evictable)

    # -- changes --------------------------------------------------------------------------------------------
    def _take(self) -> int:
        if self.free:
            return self.free.popleft()
        block, _ = self.evictable.popitem(last=False)   # the least recently used cached block
        del self.cached[self.block_hash.pop(block)]
        return block

    def _ref(self, block: int) -> None:
        if self.refs[block] == 0:
            self.evictable.pop(block, None)
        self.refs[block] += 1

    def _unref(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            if block in self.block_hash:
                self.evictable[block] = None
            else:
                self.free.append(block)

    def allocate(self, seq_id: object, token_ids: Sequence[int]) -> Allocation:
        """Blocks for a new sequence's prompt; raises OutOfBlocks (changing nothing) when they do not fit."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already has blocks")
        if not token_ids:
            raise ValueError("a prompt needs at least one token")
        if not self.can_allocate(token_ids):
            raise OutOfBlocks(f"the prompt needs {self.blocks_needed(token_ids)} KV-cache blocks of "
                              f"{self.block_size} tokens; {len(self.free) + len(self.evictable)} are free")
        hits = self._cached_prefix(token_ids)
        for b in hits:
            self._ref(b)
        table = list(hits)
        while len(table) * self.block_size < len(token_ids):
            block = self._take()
            self._ref(block)
            table.append(block)
        self.tables[seq_id] = table
        self.tokens[seq_id] = list(token_ids)
        self.registered[seq_id] = len(hits)
        return Allocation(list(table), len(hits) * self.block_size)

    def mark_computed(self, seq_id: object, num_computed: int | None = None) -> None:
        """After a step wrote the keys/values of the sequence's first `num_computed` tokens (default: all): its full
        blocks among them become reusable prefixes."""
        if not self.prefix_caching:
            return
        tokens, table = self.tokens[seq_id], self.tables[seq_id]
        full = min(len(tokens), len(tokens) if num_computed is None else num_computed) // self.block_size
        hashes = self._prefix_hashes(tokens, full)
        for b in range(self.registered[seq_id], full):
            block, h = table[b], hashes[b]
            if h not in self.cached and block not in self.block_hash:
                self.cached[h] = block
                self.block_hash[block] = h
        self.registered[seq_id] = full

    def append_token(self, seq_id: object, token_id: int) -> tuple[int, int] | None:
        """Room for one more token of a sequence. Returns (source, destination) when the block it goes to was
        shared and had to be copied first (the runtime copies those slots), else None. Raises OutOfBlocks."""
        tokens, table = self.tokens[seq_id], self.tables[seq_id]
        copy = None
        if len(tokens) == len(table) * self.block_size:   # the last block is full: a fresh one
            if not self.free and not self.evictable:
                raise OutOfBlocks(f"no free KV-cache block for sequence {seq_id!r}")
            block = self._take()
            self._ref(block)
            table.append(block)
        elif self.refs[table[-1]] > 1:   # shared with a fork: copy on write
            if not self.free and not self.evictable:
                raise OutOfBlocks(f"no free KV-cache block to copy for sequence {seq_id!r}")
            old, block = table[-1], self._take()
            self._ref(block)
            self._unref(old)
            table[-1] = block
            copy = (old, block)
        tokens.append(int(token_id))
        return copy

    def fork(self, parent: object, child: object) -> None:
        """The child shares every block of the parent (n > 1 choices of one prompt)."""
        if child in self.tables:
            raise ValueError(f"sequence {child!r} already has blocks")
        for b in self.tables[parent]:
            self._ref(b)
        self.tables[child] = list(self.tables[parent])
        self.tokens[child] = list(self.tokens[parent])
        self.registered[child] = self.registered[parent]

    def free_sequence(self, seq_id: object) -> None:
        for b in self.tables.pop(seq_id):
            self._unref(b)
        del self.tokens[seq_id], self.registered[seq_id]

    def block_table(self, seq_id: object) -> list[int]:
        return list(self.tables[seq_id])
