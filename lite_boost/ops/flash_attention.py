"""`flash_attention`: one entry point that picks, per call, the fastest attention this process can run.

Order: FlashAttention-3 (`flash_attn_interface`, Hopper GPUs) > FlashAttention-2 (`flash_attn`, CUDA) > Ascend
(`torch_npu.npu_fusion_attention`, NPU tensors) > PyTorch `scaled_dot_product_attention` (anything). The
FlashAttention kernels need CUDA tensors in float16/bfloat16 and no arbitrary mask; other calls fall through.
`backend=` or the environment variable LITE_BOOST_ATTENTION_BACKEND (`fa3`, `fa2`, `npu`, `sdpa`) forces one.
Broken installs (an import that raises anything, e.g. a CUDA symbol error) count as absent;
`available_backends()` says what was found and why not.
"""
from __future__ import annotations

import importlib
import math
import os
from typing import Optional

import torch
from torch import Tensor

BACKENDS = ("fa3", "fa2", "npu", "sdpa")
ENV = "LITE_BOOST_ATTENTION_BACKEND"
_MODULES = {"fa3": "flash_attn_interface", "fa2": "flash_attn", "npu": "torch_npu"}
_probe: dict[str, object] = {}


def _module(backend: str):
    """The backend's module, or None when it is absent or broken (the reason kept for available_backends)."""
    if backend == "sdpa":
        return torch.nn.functional
    if backend not in _probe:
        try:
            _probe[backend] = importlib.import_module(_MODULES[backend])
        except Exception as e:   # a broken install raises more than ImportError
            _probe[backend] = e
    mod = _probe[backend]
    return None if isinstance(mod, Exception) else mod


def reset_probe() -> None:
    """Forget the import results (tests, or after installing a backend)."""
    _probe.clear()


def available_backends() -> dict[str, str]:
    """backend -> "available" or why it is not."""
    out = {}
    for b in BACKENDS:
        out[b] = "available" if _module(b) is not None else f"unavailable: {_probe.get(b)!r}"
    return out


def choose_backend(device_type: str, dtype: torch.dtype, has_mask: bool, capability: Optional[tuple[int, int]],
                   available: set[str], forced: Optional[str] = None) -> str:
    """The backend for a call on `device_type` tensors of `dtype`: the forced one when given (it must be
    available), else the first that can run it."""
    if forced is not None:
        if forced not in BACKENDS:
            raise ValueError(f"attention backend must be one of {BACKENDS}, got {forced!r}")
        if forced not in available:
            raise RuntimeError(f"attention backend {forced!r} was forced but is not available")
        return forced
    half = dtype in (torch.float16, torch.bfloat16)
    if device_type == "cuda" and half and not has_mask:
        if "fa3" in available and capability is not None and capability[0] == 9:
            return "fa3"
        if "fa2" in available:
            return "fa2"
    if device_type == "npu" and "npu" in available:
        return "npu"
    return "sdpa"


def to_bsnd(x: Tensor, layout: str, heads: Optional[int]) -> Tensor:
    """A BSND view of x in `layout` (BSND, BNSD, or BSH with `heads`)."""
    if layout == "BSND":
        return x
    if layout == "BNSD":
        return x.transpose(1, 2)
    if layout == "BSH":
        if not heads:
            raise ValueError("input_layout BSH needs head_num")
        return x.view(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
    raise ValueError(f"input_layout must be BNSD, BSND, BSH or TND, got {layout!r}")


def from_bsnd(x: Tensor, layout: str) -> Tensor:
    """x [B, S, N, D] in `layout`."""
    if layout == "BSND":
        return x
    if layout == "BNSD":
        return x.transpose(1, 2)
    return x.reshape(x.shape[0], x.shape[1], -1)


def _first(result):
    """FlashAttention-3 returns out or (out, lse) depending on its version; FA2 out; torch_npu a tuple."""
    return result[0] if isinstance(result, (tuple, list)) else result


def _sdpa(q, k, v, attn_mask, scale, is_causal):
    """BNSD SDPA with grouped-query heads."""
    gqa = q.shape[1] != k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale,
                                                            is_causal=is_causal, enable_gqa=gqa)


def flash_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor] = None, scale: Optional[float] = None,
                    is_causal: bool = False, head_num: Optional[int] = None, input_layout: str = "BNSD",
                    cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_k: Optional[Tensor] = None,
                    max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                    backend: Optional[str] = None) -> Tensor:
    """softmax(scale Q K^T [+ mask] [causal]) V in q's layout: BNSD, BSND, BSH (with head_num) or TND (with
    cu_seqlens_q/k, the cumulative sequence starts). attn_mask: PyTorch SDPA convention (bool True = attend,
    or additive float), broadcastable to [B, N, S, L]; with it only SDPA and the NPU run."""
    forced = backend or os.environ.get(ENV) or None
    available = {b for b in BACKENDS if _module(b) is not None}
    capability = torch.cuda.get_device_capability(q.device) if q.device.type == "cuda" else None
    chosen = choose_backend(q.device.type, q.dtype, attn_mask is not None, capability, available, forced)
    d = q.shape[-1] // head_num if input_layout == "BSH" and head_num else q.shape[-1]   # BSH: the hidden size
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    if input_layout == "TND":
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("input_layout TND needs cu_seqlens_q and cu_seqlens_k")
        return _varlen(chosen, q, k, v, attn_mask, scale, is_causal, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k)
    if chosen in ("fa3", "fa2"):
        if attn_mask is not None:
            raise ValueError(f"{chosen} takes no arbitrary attn_mask; use backend='sdpa'")
        qs, ks, vs = (to_bsnd(x, input_layout, head_num) for x in (q, k, v))
        out = _first(_module(chosen).flash_attn_func(qs, ks, vs, softmax_scale=scale, causal=is_causal))
        return from_bsnd(out, input_layout)
    if chosen == "npu":
        qs, ks, vs = (to_bsnd(x, input_layout, head_num) for x in (q, k, v))
        heads = qs.shape[2]
        mask, sparse_mode = None, 0
        if attn_mask is not None:   # torch_npu: True marks an excluded position
            if attn_mask.dtype != torch.bool or is_causal:
                raise ValueError("the NPU backend takes a bool attn_mask, and not together with is_causal")
            mask = ~attn_mask
        elif is_causal:   # leftUpCausal reads the compressed 2048 x 2048 upper-triangle mask
            mask = torch.ones(2048, 2048, dtype=torch.bool, device=qs.device).triu(1)
            sparse_mode = 2
        out = _first(_module("npu").npu_fusion_attention(qs, ks, vs, heads, "BSND", atten_mask=mask, scale=scale,
                                                         sparse_mode=sparse_mode))
        return from_bsnd(out, input_layout)
    qn, kn, vn = (to_bsnd(x, input_layout, head_num).transpose(1, 2) for x in (q, k, v))
    out = _sdpa(qn, kn, vn, attn_mask, scale, is_causal).transpose(1, 2)
    return from_bsnd(out, input_layout)


def _varlen(chosen, q, k, v, attn_mask, scale, is_causal, cu_q, cu_k, max_q, max_k):
    """TND [tokens, N, D] with cumulative starts: FlashAttention's varlen kernel, or SDPA per sample."""
    if chosen in ("fa3", "fa2"):
        max_q = max_q or int((cu_q[1:] - cu_q[:-1]).max())
        max_k = max_k or int((cu_k[1:] - cu_k[:-1]).max())
        return _first(_module(chosen).flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=scale,
                                                             causal=is_causal))
    if attn_mask is not None:
        raise ValueError("TND inputs take no attn_mask")
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    for i in range(len(starts_q) - 1):
        qs = q[starts_q[i]:starts_q[i + 1]].transpose(0, 1)[None]
        ks = k[starts_k[i]:starts_k[i + 1]].transpose(0, 1)[None]
        vs = v[starts_k[i]:starts_k[i + 1]].transpose(0, 1)[None]
        out[starts_q[i]:starts_q[i + 1]] = _sdpa(qs, ks, vs, None, scale, is_causal)[0].transpose(0, 1)
    return out
