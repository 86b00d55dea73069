"""lite_boost.ops.sparse_attention (RainFusion 2.0) and the attention backend chooser."""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch

import importlib
from lite_boost.ops import sparse_attention
from lite_boost.ops.flash_attention import choose_backend, flash_attention
from lite_boost.ops.sparse_attention import tile_order

torch.manual_seed(0)
fa_mod = importlib.import_module("lite_boost.ops.flash_attention")


@pytest.mark.parametrize("t,h,w", [(1, 8, 8), (2, 30, 52), (3, 45, 80), (1, 7, 5), (2, 16, 9)])
def test_reorder_is_a_bijection_of_8x8_tiles(t, h, w):
    perm = tile_order(t, h, w)
    assert sorted(perm.tolist()) == list(range(t * h * w))
    # The first tile of frame 0 is its top-left 8 x 8 patch (smaller at the edges), row-major.
    first = perm[:min(8, h) * min(8, w)].tolist()
    assert first == [r * w + c for r in range(min(8, h)) for c in range(min(8, w))]
    # Frames stay in order: frame f occupies positions [f h w, (f + 1) h w).
    frames = perm.view(t, h * w) // (h * w)
    assert (frames == torch.arange(t)[:, None]).all()


def dense(q, k, v, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale).float()


@pytest.mark.parametrize("latent,txt", [((2, 12, 20), 0), ((2, 30, 52), 40), ((1, 9, 14), 77)])
@pytest.mark.parametrize("sparsity", [0.0, 1e-9])   # 0 runs dense; a sliver above 0 runs every rf_v2 stage
def test_sparsity_zero_equals_dense(latent, txt, sparsity):
    s = math.prod(latent) + txt
    q, k, v = (torch.randn(1, 2, s, 32) for _ in range(3))
    stats = {}
    out = sparse_attention(q, k, v, sparse_type="rf_v2", latent_shape_q=latent, txt_len=txt, sparsity=sparsity,
                           block_size=64, stats=stats)
    torch.testing.assert_close(out, dense(q, k, v), atol=1e-5, rtol=1e-5)
    assert stats["density"] == 1.0 and ("kept" in stats) == (sparsity > 0)


def test_selection_equals_dense_attention_under_its_token_mask():
    latent, txt, block = (2, 24, 40), 50, 64
    s = math.prod(latent) + txt
    q, k, v = (torch.randn(2, 2, s, 16) for _ in range(3))   # two samples: a selection each
    stats = {}
    out = sparse_attention(q, k, v, sparse_type="rf_v2", latent_shape_q=latent, txt_len=txt, sparsity=0.7,
                           block_size=block, stats=stats)
    assert 0.25 < stats["density"] < 0.8
    perm, kept, valid = stats["perm"], stats["kept"], stats["block_valid"]
    img = math.prod(latent)
    img_padded = math.ceil(img / block) * block
    # Token positions (reordered, padded) of each original token, then the token mask of the kept blocks.
    position = torch.empty(s, dtype=torch.long)
    position[perm] = torch.arange(img)
    position[img:] = img_padded + torch.arange(txt)
    blk = position // block
    mask = kept[:, :, blk][:, :, :, blk]                                       # [B, N, S, S]
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask).float()
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    # Protected blocks: the first frame's and the text blocks as keys, the text blocks as queries.
    nblk = kept.shape[-1]
    first = math.ceil(latent[1] * latent[2] / block)
    text = torch.arange(nblk) >= img_padded // block
    assert kept[..., :first][..., valid[None, :first].expand(nblk, -1)].all()
    assert kept[..., text].all() and kept[:, :, text].all()


def test_layouts_and_half_precision():
    latent = (2, 16, 16)
    s = math.prod(latent)
    q, k, v = (torch.randn(1, s, 4, 32, dtype=torch.bfloat16) for _ in range(3))
    out = sparse_attention(q, k, v, input_layout="BSND", sparse_type="rf_v2", latent_shape_q=latent, sparsity=0.0)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    want = dense(q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)
    bsh = sparse_attention(q.reshape(1, s, 128), k.reshape(1, s, 128), v.reshape(1, s, 128), input_layout="BSH",
                           head_num=4, sparse_type="rf_v2", latent_shape_q=latent, sparsity=0.0)
    torch.testing.assert_close(bsh.float(), want.reshape(1, s, 128), atol=2e-2, rtol=2e-2)


def test_dense_path_goes_through_the_backend_chooser():
    q, k, v = (torch.randn(1, 2, 50, 16) for _ in range(3))
    torch.testing.assert_close(sparse_attention(q, k, v), dense(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kwargs,message", [
    (dict(sparse_type="rf_v3", latent_shape_q=(1, 4, 4)), "sparse_type"),
    (dict(sparse_type="rf_v2"), "latent_shape_q"),
    (dict(sparse_type="rf_v2", latent_shape_q=(1, 4, 5)), "txt_len"),
    (dict(sparse_type="rf_v2", latent_shape_q=(1, 4, 4), sparsity=1.0), "sparsity"),
    (dict(sparse_type="rf_v2", latent_shape_q=(1, 4, 4), is_causal=True), "is_causal"),
])
def test_bad_sparse_arguments(kwargs, message):
    q = torch.randn(1, 1, 16, 8)
    with pytest.raises(ValueError, match=message):
        sparse_attention(q, q, q, **kwargs)


# -- the backend chooser ----------------------------------------------------------------------------------
ALL = {"fa3", "fa2", "npu", "sdpa"}


@pytest.mark.parametrize("device,dtype,mask,cap,available,want", [
    ("cuda", torch.bfloat16, False, (9, 0), ALL, "fa3"),
    ("cuda", torch.bfloat16, False, (8, 0), ALL, "fa2"),            # FA3 is Hopper-only
    ("cuda", torch.float16, False, (9, 0), {"fa2", "sdpa"}, "fa2"),
    ("cuda", torch.float32, False, (9, 0), ALL, "sdpa"),            # FlashAttention needs half types
    ("cuda", torch.float16, True, (9, 0), ALL, "sdpa"),             # no arbitrary masks
    ("npu", torch.float16, False, None, ALL, "npu"),
    ("cpu", torch.float32, False, None, ALL, "sdpa"),
])
def test_choice_by_device_and_dtype(device, dtype, mask, cap, available, want):
    assert choose_backend(device, dtype, mask, cap, available) == want


def test_forced_backend_must_exist():
    assert choose_backend("cpu", torch.float32, False, None, ALL, forced="fa2") == "fa2"
    with pytest.raises(RuntimeError, match="forced but is not available"):
        choose_backend("cpu", torch.float32, False, None, {"sdpa"}, forced="fa3")
    with pytest.raises(ValueError, match="must be one of"):
        choose_backend("cpu", torch.float32, False, None, ALL, forced="xformers")


@pytest.fixture
def fake_backends(monkeypatch):
    """Fake flash_attn_interface (FA3: returns (out, lse)) and flash_attn (FA2: returns out) modules that run SDPA
    on BSND inputs and record their calls; a torch_npu whose import fails as broken installs do."""
    calls = []

    def fa(tag, returns_tuple):
        def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
            calls.append((tag, tuple(q.shape)))
            out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                   v.transpose(1, 2), scale=softmax_scale,
                                                                   is_causal=causal).transpose(1, 2)
            return (out, None) if returns_tuple else out
        return types.SimpleNamespace(flash_attn_func=flash_attn_func)

    real_import = importlib.import_module

    def importer(name):
        if name == "torch_npu":   # a broken install: the import fails with something other than ImportError
            raise OSError("libascendcl.so: cannot open shared object file")
        return real_import(name)

    monkeypatch.setitem(sys.modules, "flash_attn_interface", fa("fa3", True))
    monkeypatch.setitem(sys.modules, "flash_attn", fa("fa2", False))
    monkeypatch.setattr(fa_mod.importlib, "import_module", importer)
    fa_mod.reset_probe()
    yield calls
    fa_mod.reset_probe()


def test_fake_backends_are_found_and_called(fake_backends, monkeypatch):
    found = fa_mod.available_backends()
    assert found["fa3"] == found["fa2"] == found["sdpa"] == "available"
    assert found["npu"].startswith("unavailable") and "libascendcl" in found["npu"]
    q, k, v = torch.randn(2, 4, 33, 16), torch.randn(2, 4, 40, 16), torch.randn(2, 4, 40, 16)
    want = dense(q, k, v)
    for forced in ("fa3", "fa2"):
        out = flash_attention(q, k, v, backend=forced)    # FA3's tuple and FA2's tensor both unwrapped
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    monkeypatch.setenv("LITE_BOOST_ATTENTION_BACKEND", "fa2")
    flash_attention(q, k, v)
    assert [c[0] for c in fake_backends] == ["fa3", "fa2", "fa2"] and fake_backends[0][1] == (2, 33, 4, 16)


def test_sdpa_path_layouts_gqa_and_varlen():
    q, k, v = torch.randn(1, 8, 20, 16), torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16)
    rep = lambda x: x.repeat_interleave(4, 1)
    want = dense(q, rep(k), rep(v))
    torch.testing.assert_close(flash_attention(q, k, v, backend="sdpa"), want, atol=1e-5, rtol=1e-5)
    bsnd = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), input_layout="BSND")
    torch.testing.assert_close(bsnd, want.transpose(1, 2), atol=1e-5, rtol=1e-5)
    lens = [7, 13]
    tq, tk = torch.randn(20, 2, 16), torch.randn(20, 2, 16)
    cu = torch.tensor([0, 7, 20])
    out = flash_attention(tq, tk, tk, input_layout="TND", cu_seqlens_q=cu, cu_seqlens_k=cu)
    for a, b in ((0, 7), (7, 20)):
        ref = dense(tq[a:b].transpose(0, 1)[None], tk[a:b].transpose(0, 1)[None], tk[a:b].transpose(0, 1)[None])
        torch.testing.assert_close(out[a:b], ref[0].transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_npu_adapter_passes_layout_mask_and_causal_mode(monkeypatch):
    """A fake torch_npu: the adapter hands it BSND tensors, the head count, an exclusion mask (True = masked) or,
    for causal attention, sparse_mode 2 with the compressed 2048 x 2048 upper triangle."""
    seen = {}

    def npu_fusion_attention(q, k, v, head_num, input_layout, atten_mask=None, scale=1.0, sparse_mode=0):
        seen.update(layout=input_layout, heads=head_num, mask=None if atten_mask is None else tuple(atten_mask.shape),
                    sparse_mode=sparse_mode)
        qn, kn, vn = (x.transpose(1, 2) for x in (q, k, v))
        if sparse_mode == 2:
            out = torch.nn.functional.scaled_dot_product_attention(qn, kn, vn, scale=scale, is_causal=True)
        else:
            keep = None if atten_mask is None else ~atten_mask
            out = torch.nn.functional.scaled_dot_product_attention(qn, kn, vn, attn_mask=keep, scale=scale)
        return out.transpose(1, 2), None, None, None, 0, 0, 0

    monkeypatch.setitem(sys.modules, "torch_npu", types.SimpleNamespace(npu_fusion_attention=npu_fusion_attention))
    fa_mod.reset_probe()
    try:
        q, k, v = (torch.randn(1, 3, 10, 8) for _ in range(3))
        out = flash_attention(q, k, v, is_causal=True, backend="npu")
        assert seen == {"layout": "BSND", "heads": 3, "mask": (2048, 2048), "sparse_mode": 2}
        torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        keep = torch.rand(10, 10) < 0.7
        keep[:, 0] = True
        out = flash_attention(q, k, v, attn_mask=keep, backend="npu")
        assert seen["mask"] == (10, 10) and seen["sparse_mode"] == 0
        torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep))
    finally:
        fa_mod.reset_probe()
