"""Step-shape buckets (lite.llm.step_shapes): the padding that brings a step to its bucket shape."""
from __future__ import annotations

import pytest

from lite.llm.step_shapes import (NO_PADDING, padding_for, scratch_blocks_needed, sequence_bucket, token_bucket)


def test_buckets_are_few_and_close_above():
    assert [sequence_bucket(n) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    assert [token_bucket(n) for n in (1, 3, 8, 9, 17, 33, 64, 65, 500, 512, 513)] == \
        [1, 4, 8, 10, 20, 40, 64, 80, 512, 512, 640]
    buckets = {token_bucket(n) for n in range(1, 1025)}
    assert len(buckets) == 4 + 4 * 7   # powers of two to 8, then four per doubling up to 1024
    for n in range(1, 1025):
        b = token_bucket(n)
        assert n <= b and token_bucket(b) == b
        assert n <= 8 or b - n < n / 4   # padding under a quarter of the real tokens


def test_decode_steps_pad_with_one_token_sequences_in_their_own_blocks():
    pad = padding_for([1] * 5, 16, [100, 101, 102, 103])
    assert pad.lengths == (1, 1, 1) and pad.block_tables == ((100,), (101,), (102,))
    assert padding_for([1] * 4, 16, [100]) == NO_PADDING   # already a bucket


def test_mixed_steps_put_the_padding_tokens_in_one_sequence():
    pad = padding_for([40, 1], 16, [100, 101, 102])   # 41 tokens -> 48; 3 sequences -> 4
    assert pad.lengths == (7, 0) and pad.block_tables[0] == (100,)
    pad = padding_for([37], 4, [100, 101, 102])        # 37 -> 40: 3 tokens in one block of 4
    assert pad.lengths == (3,) and pad.block_tables == ((100,),)
    pad = padding_for([33], 2, [100, 101, 102, 103])   # 33 -> 40: 7 tokens in four blocks of 2
    assert pad.lengths == (7,) and pad.block_tables == ((100, 101, 102, 103),)
    assert padding_for([512], 16, [100]) == NO_PADDING


def test_too_few_scratch_blocks_leave_the_step_exact():
    assert padding_for([1] * 5, 16, [100]) == NO_PADDING
    assert padding_for([33], 2, [100, 101]) == NO_PADDING
    assert padding_for([3, 1], 16, []) == NO_PADDING


@pytest.mark.parametrize("seqs,tokens,block", [(16, 256, 8), (5, 512, 16), (1, 1, 16), (64, 2048, 4)])
def test_scratch_blocks_cover_every_step_the_scheduler_can_make(seqs, tokens, block):
    scratch = list(range(scratch_blocks_needed(seqs, tokens, block)))
    for s in range(1, seqs + 1):
        assert padding_for([1] * s, block, scratch).lengths == (1,) * (sequence_bucket(s) - s)
    for t in range(2, tokens + 1):
        pad = padding_for([t - 1, 1], block, scratch)
        assert t + pad.num_tokens == token_bucket(t)
