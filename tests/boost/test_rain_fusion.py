"""lite_boost.ops.rain_fusion_attention against PyTorch: every tile selected equals dense attention; any
selection equals attention under the equivalent token mask; the log-sum-exp merges partial results; layouts,
grouped-query heads, ragged lengths, half types; bad input is named."""
from __future__ import annotations

import math

import pytest
import torch

from block_sparse_reference import (assert_tnd_equals_reference, block_mask, dense_select, random_select, reference,
                                    tnd_dense_select)
from lite_boost.ops import rain_fusion_attention

torch.manual_seed(0)


@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
@pytest.mark.parametrize("s,l,hq,hkv,block", [(300, 333, 4, 2, (128, 128)), (64, 64, 2, 2, (128, 128)),
                                              (200, 150, 3, 1, (64, 32))])
def test_all_tiles_selected_equals_dense_attention(layout, s, l, hq, hkv, block):
    q, k, v = torch.randn(2, hq, s, 32), torch.randn(2, hkv, l, 32), torch.randn(2, hkv, l, 32)
    idx, num = dense_select(2 * math.ceil(s / block[0]), hq, math.ceil(l / block[1]))
    args = (q, k, v) if layout == "BNSD" else tuple(t.transpose(1, 2) for t in (q, k, v))   # BSND views, no copy
    out, lse = rain_fusion_attention(*args, idx, num, block_shape=block, q_input_layout=layout,
                                     num_key_value_heads=hkv)
    want, want_lse = reference(q, k, v)
    got = out if layout == "BNSD" else out.transpose(1, 2)
    torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_any_selection_equals_the_token_mask(keep):
    gen = torch.Generator().manual_seed(int(keep * 100))
    s, l, h, bq, bk = 257, 301, 2, 64, 32
    q, k, v = torch.randn(1, h, s, 16), torch.randn(1, h, l, 16), torch.randn(1, h, l, 16)
    idx, num, chosen = random_select(math.ceil(s / bq), h, math.ceil(l / bk), keep, gen)
    out, lse = rain_fusion_attention(q, k, v, idx, num, block_shape=(bq, bk))
    want, want_lse = reference(q, k, v, block_mask(chosen, s, l, bq, bk, h))
    torch.testing.assert_close(out, want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse.float(), atol=1e-5, rtol=1e-5)
    empty = (num == 0).repeat_interleave(bq, 0)[:s].T   # [H, S]: queries whose block selected nothing
    assert torch.isneginf(lse[0][empty]).all() and (out[0][empty] == 0).all()


def test_log_sum_exp_merges_disjoint_selections():
    s = l = 256
    q, k, v = torch.randn(1, 2, s, 32), torch.randn(1, 2, l, 32), torch.randn(1, 2, l, 32)
    qb, kb = 2, 4
    even = torch.tensor([0, 2, -1, -1]).expand(qb, 2, 4).contiguous()
    odd = torch.tensor([1, 3, -1, -1]).expand(qb, 2, 4).contiguous()
    two = torch.full((qb, 2), 2)
    o1, l1 = rain_fusion_attention(q, k, v, even, two, block_shape=(128, 64))
    o2, l2 = rain_fusion_attention(q, k, v, odd, two, block_shape=(128, 64))
    lse = torch.logaddexp(l1, l2)
    merged = o1 * torch.exp(l1 - lse)[..., None] + o2 * torch.exp(l2 - lse)[..., None]
    want, want_lse = reference(q, k, v)
    torch.testing.assert_close(merged, want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse.float(), atol=1e-5, rtol=1e-5)


def test_tnd_with_ragged_lengths():
    lens, kv_lens, h, d = [100, 37, 260], [90, 200, 260], 4, 16
    q, k, v = torch.randn(sum(lens), h, d), torch.randn(sum(kv_lens), 2, d), torch.randn(sum(kv_lens), 2, d)
    bq, bk = 64, 64
    idx, num = tnd_dense_select(lens, kv_lens, bq, bk, h, 5)
    out, lse = rain_fusion_attention(q, k, v, idx, num, block_shape=(bq, bk), q_input_layout="TND",
                                     actual_seq_lengths=lens, actual_seq_lengths_kv=kv_lens)
    assert_tnd_equals_reference(out, lse, q, k, v, lens, kv_lens)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_half_types_compute_in_float32(dtype, tol):
    q, k, v = (torch.randn(1, 2, 200, 64).to(dtype) for _ in range(3))
    idx, num = dense_select(2, 2, 2)
    out, lse = rain_fusion_attention(q, k, v, idx, num)
    assert out.dtype == dtype and lse.dtype == torch.float32
    want, _ = reference(q.float(), k.float(), v.float())   # the same rounded inputs, exact arithmetic
    torch.testing.assert_close(out.float(), want.float(), atol=tol, rtol=tol)


def test_mask_excludes_marked_pairs():
    q, k, v = torch.randn(1, 2, 100, 16), torch.randn(1, 2, 120, 16), torch.randn(1, 2, 120, 16)
    excluded = torch.rand(100, 120) < 0.3
    idx, num = dense_select(1, 2, 1)
    out, _ = rain_fusion_attention(q, k, v, idx, num, block_shape=(128, 128), attn_mask=excluded)
    want, _ = reference(q, k, v, ~excluded[None, None].expand(1, 2, 100, 120))
    torch.testing.assert_close(out, want.float(), atol=1e-5, rtol=1e-5)


def test_runs_under_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q, k, v = torch.empty(1, 4, 100, 32), torch.empty(1, 2, 100, 32), torch.empty(1, 2, 100, 48)
        idx, num = torch.zeros(1, 4, 1, dtype=torch.int64), torch.ones(1, 4, dtype=torch.int64)
        out, lse = rain_fusion_attention(q, k, v, idx, num)
        assert out.shape == (1, 4, 100, 48) and lse.shape == (1, 4, 100)


@pytest.mark.parametrize("change,message", [
    (dict(q_input_layout="NSD"), "q_input_layout must be one of"),
    (dict(select_idx=torch.zeros(2, 2, 1, dtype=torch.int64)), "select_idx must be"),
    (dict(select_idx=torch.full((1, 2, 1), 5)), "names key block 5 of 1"),
    (dict(select_idx=torch.tensor([0, 0]).expand(1, 2, 2).contiguous(), select_num_idx=torch.full((1, 2), 2)),
     "select_num_idx .* must be in|not strictly ascending"),
    (dict(num_key_value_heads=1), "num_key_value_heads is 1"),
    (dict(block_shape=(0, 128)), "block_shape"),
    (dict(inner_precise=2), "inner_precise"),
    (dict(query=torch.randn(1, 2, 100, 8)), "head sizes differ"),
    (dict(attn_mask=torch.zeros(100, 100)), "must be bool"),
])
def test_bad_arguments_are_named(change, message):
    args = dict(query=torch.randn(1, 2, 100, 16), key=torch.randn(1, 2, 100, 16), value=torch.randn(1, 2, 100, 16),
                select_idx=torch.zeros(1, 2, 1, dtype=torch.int64), select_num_idx=torch.ones(1, 2, dtype=torch.int64))
    args.update(change)
    with pytest.raises(ValueError, match=message):
        rain_fusion_attention(**args)
