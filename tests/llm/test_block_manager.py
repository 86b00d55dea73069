"""Paged KV-cache bookkeeping: prefix sharing allocates common blocks once, copy on write for forks, LRU reuse of
cached blocks, and running out of blocks changes nothing."""
from __future__ import annotations

import pytest

from lite.llm import BlockManager, OutOfBlocks


def test_common_prefix_is_allocated_once():
    m = BlockManager(num_blocks=32, block_size=16)
    prefix = list(range(1000, 1100))                    # 100 tokens: 6 full blocks
    a = m.allocate("a", prefix + [1, 2, 3])
    assert a.num_cached_tokens == 0 and len(a.block_table) == 7
    m.mark_computed("a")
    free_before = m.status().num_free_blocks
    b = m.allocate("b", prefix + [7, 8, 9, 10])
    assert b.num_cached_tokens == 96                    # 6 blocks of 16 shared
    assert b.block_table[:6] == a.block_table[:6] and b.block_table[6] != a.block_table[6]
    assert m.status().num_free_blocks == free_before - 1   # only the seventh block is new


def test_whole_prompt_cached_still_recomputes_its_last_token():
    m = BlockManager(num_blocks=8, block_size=4)
    m.allocate("a", list(range(8)))
    m.mark_computed("a")
    b = m.allocate("b", list(range(8)))
    assert b.num_cached_tokens == 4                     # the block with the last prompt token is not reused


def test_cached_blocks_survive_their_sequence_and_are_evicted_lru():
    m = BlockManager(num_blocks=4, block_size=4)
    m.allocate("a", list(range(9)))                     # 3 blocks, 2 full
    m.mark_computed("a")
    m.free_sequence("a")
    s = m.status()
    assert s.num_free_blocks == 4 and s.num_cached_blocks == 2
    assert m.allocate("b", list(range(9))).num_cached_tokens == 8    # revived from the cache
    m.free_sequence("b")
    m.allocate("c", [50 + i for i in range(16)])        # needs all 4: the cached ones are evicted
    assert m.status().num_cached_blocks == 0
    m.free_sequence("c")
    assert m.allocate("d", list(range(9))).num_cached_tokens == 0


def test_fork_copies_on_write():
    m = BlockManager(num_blocks=8, block_size=4)
    m.allocate("p", [1, 2, 3, 4, 5, 6])                 # 2 blocks, the second half full
    m.fork("p", "c")
    assert m.block_table("c") == m.block_table("p")
    src, dst = m.append_token("c", 7)
    assert src == m.block_table("p")[1] and m.block_table("c")[1] == dst != src
    assert m.append_token("p", 9) is None               # the parent's block is no longer shared
    assert m.append_token("c", 8) is None
    assert len(m.block_table("c")) == 2
    m.append_token("c", 9)                              # the block is full: a fresh one
    assert len(m.block_table("c")) == 3


def test_out_of_blocks_changes_nothing():
    m = BlockManager(num_blocks=4, block_size=4)
    m.allocate("a", list(range(10)))                    # 3 blocks
    before = (m.status(), m.block_table("a"))
    assert not m.can_allocate(list(range(100, 108)))
    with pytest.raises(OutOfBlocks, match="needs 2 KV-cache blocks"):
        m.allocate("b", list(range(100, 108)))
    assert (m.status(), m.block_table("a")) == before and "b" not in m.tables
    m.append_token("a", 10)
    m.append_token("a", 11)                             # fills the third block
    m.allocate("c", [5])                                # the last free block
    with pytest.raises(OutOfBlocks):
        m.append_token("a", 12)
    assert m.block_table("a") == before[1]


def test_only_computed_blocks_become_reusable():
    """A prompt prefilled in chunks: blocks whose keys/values are not written yet are not offered to others."""
    m = BlockManager(num_blocks=8, block_size=4)
    m.allocate("a", list(range(20)))
    m.mark_computed("a", 9)                             # two full blocks written
    assert m.status().num_cached_blocks == 2
    assert m.allocate("b", list(range(20))).num_cached_tokens == 8
    m.mark_computed("a", 20)
    assert m.status().num_cached_blocks == 5
