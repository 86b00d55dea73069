"""The Triton RainFusion kernel (lite_boost.ops.rain_fusion_triton) against float64 PyTorch: on a CUDA device
where there is one, else through Triton's interpreter on CPU tensors (small shapes: it runs one NumPy op per
tile op). Same properties as the CPU kernel's tests: dense selection = attention, any selection = the token
mask, empty rows give 0 / -inf, layouts, grouped-query heads, ragged TND lengths, odd head sizes, masks,
half types; bad selections named."""
from __future__ import annotations

import math
import os

import pytest
import torch

from block_sparse_reference import (assert_tnd_equals_reference, block_mask, dense_select, random_select, reference,
                                    tnd_dense_select)
from lite_boost.ops import rain_fusion_attention, rain_fusion_triton, sparse_attention

pytestmark = pytest.mark.skipif(rain_fusion_triton.unavailable_reason() is not None,
                                reason=str(rain_fusion_triton.unavailable_reason()))
CUDA = torch.cuda.is_available()


@pytest.fixture
def dev(monkeypatch) -> str:
    """The device the kernel runs on: CUDA, or the CPU through Triton's interpreter."""
    if CUDA:
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and Triton's interpreter is off (tests/conftest.py turns it on before triton imports)")
    monkeypatch.setenv(rain_fusion_triton.FORCE_ENV, "triton")
    return "cpu"


def to(dev, *ts):
    return tuple(t.to(dev) for t in ts)


@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
@pytest.mark.parametrize("s,l,hq,hkv,d,dv,block", [(150, 170, 4, 2, 32, 32, (128, 128)),
                                                   (100, 75, 3, 1, 40, 24, (64, 32)),
                                                   (20, 33, 2, 2, 16, 16, (16, 16))])
def test_all_tiles_selected_equals_dense_attention(dev, layout, s, l, hq, hkv, d, dv, block):
    q, k, v = torch.randn(2, hq, s, d), torch.randn(2, hkv, l, d), torch.randn(2, hkv, l, dv)
    idx, num = dense_select(2 * math.ceil(s / block[0]), hq, math.ceil(l / block[1]))
    qd, kd, vd = to(dev, q, k, v)
    args = (qd, kd, vd) if layout == "BNSD" else tuple(t.transpose(1, 2) for t in (qd, kd, vd))
    out, lse = rain_fusion_attention(*args, idx, num, block_shape=block, q_input_layout=layout,
                                     num_key_value_heads=hkv)
    assert out.device.type == dev and lse.device.type == dev
    want, want_lse = reference(q, k, v)
    got = out if layout == "BNSD" else out.transpose(1, 2)
    torch.testing.assert_close(got.cpu(), want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.cpu(), want_lse.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("keep", [0.2, 0.6])
def test_any_selection_equals_the_token_mask(dev, keep):
    gen = torch.Generator().manual_seed(int(keep * 100))
    s, l, h, bq, bk = 130, 150, 2, 32, 32
    q, k, v = torch.randn(1, h, s, 16), torch.randn(1, h, l, 16), torch.randn(1, h, l, 16)
    idx, num, chosen = random_select(math.ceil(s / bq), h, math.ceil(l / bk), keep, gen)
    out, lse = rain_fusion_attention(*to(dev, q, k, v), idx, num, block_shape=(bq, bk))
    out, lse = out.cpu(), lse.cpu()
    want, want_lse = reference(q, k, v, block_mask(chosen, s, l, bq, bk, h))
    torch.testing.assert_close(out, want.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, want_lse.float(), atol=1e-5, rtol=1e-5)
    empty = (num == 0).repeat_interleave(bq, 0)[:s].T
    assert torch.isneginf(lse[0][empty]).all() and (out[0][empty] == 0).all()


def test_tnd_with_ragged_lengths(dev):
    lens, kv_lens, h, d = [50, 17, 90], [40, 100, 90], 4, 16
    q, k, v = torch.randn(sum(lens), h, d), torch.randn(sum(kv_lens), 2, d), torch.randn(sum(kv_lens), 2, d)
    bq, bk = 32, 32
    idx, num = tnd_dense_select(lens, kv_lens, bq, bk, h, 4)
    out, lse = rain_fusion_attention(*to(dev, q, k, v), idx, num, block_shape=(bq, bk), q_input_layout="TND",
                                     actual_seq_lengths=lens, actual_seq_lengths_kv=kv_lens)
    assert_tnd_equals_reference(out.cpu(), lse.cpu(), q, k, v, lens, kv_lens)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_half_types_accumulate_in_float32(dev, dtype, tol):
    if dev == "cpu" and dtype == torch.bfloat16:
        pytest.skip("Triton's interpreter multiplies bfloat16 tiles as raw integers (NumPy has no bfloat16)")
    q, k, v = (torch.randn(1, 2, 100, 64).to(dtype) for _ in range(3))
    idx, num = dense_select(1, 2, 1)
    out, lse = rain_fusion_attention(*to(dev, q, k, v), idx, num)
    assert out.dtype == dtype and lse.dtype == torch.float32
    want, _ = reference(q.float(), k.float(), v.float())
    torch.testing.assert_close(out.float().cpu(), want.float(), atol=tol, rtol=tol)


def test_mask_excludes_marked_pairs(dev):
    q, k, v = torch.randn(1, 2, 50, 16), torch.randn(1, 2, 60, 16), torch.randn(1, 2, 60, 16)
    excluded = torch.rand(50, 60) < 0.3
    excluded[7] = True   # a query that attends nothing
    idx, num = dense_select(1, 2, 1)
    out, lse = rain_fusion_attention(*to(dev, q, k, v), idx, num, block_shape=(64, 64), attn_mask=excluded)
    want, _ = reference(q, k, v, ~excluded[None, None].expand(1, 2, 50, 60))
    torch.testing.assert_close(out.cpu(), want.float(), atol=1e-5, rtol=1e-5)
    assert torch.isneginf(lse[0, :, 7].cpu()).all()


@pytest.mark.parametrize("change,message", [
    (dict(select_idx=torch.full((1, 2, 1), 5)), "names key block 5 of 1"),
    (dict(select_idx=torch.tensor([0, 0]).expand(1, 2, 2).contiguous(), select_num_idx=torch.full((1, 2), 2)),
     "select_num_idx .* must be in"),
    (dict(select_idx=torch.tensor([1, 0]).expand(1, 2, 2).contiguous(), select_num_idx=torch.full((1, 2), 2)),
     "not strictly ascending"),
])
def test_bad_selections_are_named(dev, change, message):
    args = dict(query=torch.randn(1, 2, 40, 16), key=torch.randn(1, 2, 40, 16), value=torch.randn(1, 2, 40, 16),
                select_idx=torch.zeros(1, 2, 1, dtype=torch.int64), select_num_idx=torch.ones(1, 2, dtype=torch.int64))
    args.update(change)
    if message == "not strictly ascending":
        args.update(key=torch.randn(1, 2, 200, 16), value=torch.randn(1, 2, 200, 16))
    for name in ("query", "key", "value"):
        args[name] = args[name].to(dev)
    with pytest.raises(ValueError, match=message):
        rain_fusion_attention(**args, block_shape=(64, 64))


def test_operands_on_different_devices_are_refused(dev):
    q = torch.randn(1, 2, 40, 16)
    idx, num = dense_select(1, 2, 1)
    if dev == "cpu":
        pytest.skip("one device here")
    with pytest.raises(ValueError, match="is on cpu, the query on cuda"):
        rain_fusion_attention(q.to(dev), q, q.to(dev), idx, num)


def rf_v2_token_mask(stats: dict, img: int, txt: int, block: int) -> torch.Tensor:
    """[B, N, S, S] bool in the original token order: the tiles rf_v2 kept (stats), mapped back through its
    reordering, padded keys dropped."""
    kept = stats["kept"].cpu()
    total = kept.shape[-1] * block
    img_padded = math.ceil(img / block) * block
    keep = kept.repeat_interleave(block, -2).repeat_interleave(block, -1)
    original = torch.full((total,), -1, dtype=torch.int64)
    original[:img] = stats["perm"].cpu()
    original[img_padded:img_padded + txt] = torch.arange(img, img + txt)
    real = torch.nonzero(original >= 0).flatten()
    at = original[real]
    mask = torch.zeros(kept.shape[:2] + (img + txt, img + txt), dtype=torch.bool)
    mask[:, :, at[:, None], at[None, :]] = keep[:, :, real[:, None], real[None, :]]
    return mask


def test_rf_v2_sparse_attention_equals_attention_over_its_tiles(dev):
    """The whole RainFusion 2.0 path (reorder, pool, select, attend, restore) on the device equals float64
    attention restricted to the tiles it selected."""
    frames, h, w, txt, heads, d, block = 2, 8, 12, 5, 2, 16, 32
    s = frames * h * w + txt
    q, k, v = (torch.randn(1, s, heads, d) for _ in range(3))
    stats: dict = {}
    got = sparse_attention(*to(dev, q, k, v), input_layout="BSND", sparse_type="rf_v2", latent_shape_q=(frames, h, w),
                           txt_len=txt, block_size=block, sparsity=0.5, stats=stats)
    assert 0.0 < stats["density"] < 1.0
    mask = rf_v2_token_mask(stats, frames * h * w, txt, block)
    want, _ = reference(*(t.transpose(1, 2) for t in (q, k, v)), mask)
    torch.testing.assert_close(got.cpu(), want.transpose(1, 2).float(), atol=1e-5, rtol=1e-5)
    dense, _ = reference(*(t.transpose(1, 2) for t in (q, k, v)))
    assert (got.cpu() - dense.transpose(1, 2).float()).abs().max() > 1e-3   # the selection dropped real tiles


@pytest.mark.skipif(not CUDA, reason="a video-sized sequence needs a GPU")
def test_video_sized_bf16_selection_on_the_gpu():
    """A Wan-like head (128 wide, 128 x 128 tiles) over 4,096 tokens at 75% sparsity, bf16, against float64 on
    the same rounded inputs."""
    gen = torch.Generator().manual_seed(3)
    s, heads, d, block = 4096, 4, 128, 128
    q, k, v = (torch.randn(1, heads, s, d, generator=gen).bfloat16() for _ in range(3))
    idx, num, chosen = random_select(s // block, heads, s // block, 0.25, gen)
    out, lse = rain_fusion_attention(*to("cuda", q, k, v), idx, num, block_shape=(block, block))
    want, want_lse = reference(q.float(), k.float(), v.float(), block_mask(chosen, s, s, block, block, heads))
    torch.testing.assert_close(out.float().cpu(), want.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.cpu(), want_lse.float(), atol=1e-2, rtol=1e-3)
