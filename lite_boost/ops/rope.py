"""Rotary position embedding in float32 real arithmetic with cached cos/sin tables.

Tables are computed once in float64 (angles pos * theta^(-2i/d)), stored as float32 [positions, head_dim / 2],
and cached per (positions, head dim, theta, device, dtype, rank slice): a DiT calls RoPE twice per layer (query
and key) for every layer and step with the same grid, so after the first call each call is the rotation only.

- 1-D positions (LLMs): `rope_tables_1d(seq_len, head_dim)`.
- 3-D positions (video DiTs, Wan's split): the head dim is cut into t, h and w parts (h = w = 2 * (d // 6),
  t = the rest), each rotated by its axis's position; tokens are frame-major (t, h, w).
- `interleaved=True` rotates the pairs (x[2i], x[2i+1]) (Wan, the complex-number form); `interleaved=False`
  the halves (x[i], x[i + d/2]) (Llama's rotate_half).
- `rank_slice=(start, stop)` keeps the positions of one sequence-parallel rank's slice of the tokens.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor

from . import _kernel

_CACHE: "OrderedDict[tuple, tuple[Tensor, Tensor]]" = OrderedDict()
_CACHE_SIZE = 64


def _cached(key: tuple, build) -> tuple[Tensor, Tensor]:
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    value = build()
    _CACHE[key] = value
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value


def clear_cache() -> None:
    _CACHE.clear()


def _angles(positions: Tensor, dim: int, theta: float) -> Tensor:
    """[positions, dim / 2] float64 angles."""
    if dim % 2:
        raise ValueError(f"a rotary dim must be even, got {dim}")
    inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return positions.to(torch.float64)[:, None] * inv_freq[None, :]


def _tables(angles: Tensor, rank_slice, device, dtype) -> tuple[Tensor, Tensor]:
    if rank_slice is not None:
        angles = angles[rank_slice[0]:rank_slice[1]]
    return angles.cos().to(device=device, dtype=dtype), angles.sin().to(device=device, dtype=dtype)


def wan_split(head_dim: int) -> tuple[int, int, int]:
    """(t, h, w) rotary dims of Wan's 3-D split."""
    h = w = 2 * (head_dim // 6)
    return head_dim - h - w, h, w


def rope_tables_1d(seq_len: int, head_dim: int, theta: float = 10000.0, device=None, dtype=torch.float32,
                   rank_slice: Optional[tuple[int, int]] = None) -> tuple[Tensor, Tensor]:
    """(cos, sin), each [positions, head_dim / 2], for positions 0 .. seq_len - 1."""
    device = torch.device(device or "cpu")
    key = ("1d", seq_len, head_dim, float(theta), device, dtype, rank_slice)
    return _cached(key, lambda: _tables(_angles(torch.arange(seq_len), head_dim, theta), rank_slice, device, dtype))


def rope_tables_3d(grid: tuple[int, int, int], head_dim: int, theta: float = 10000.0, device=None,
                   dtype=torch.float32, rank_slice: Optional[tuple[int, int]] = None) -> tuple[Tensor, Tensor]:
    """(cos, sin), each [t * h * w tokens, head_dim / 2], for a frame-major t x h x w grid (Wan's split)."""
    device = torch.device(device or "cpu")
    t, h, w = (int(x) for x in grid)
    key = ("3d", (t, h, w), head_dim, float(theta), device, dtype, rank_slice)

    def build():
        dt, dh, dw = wan_split(head_dim)
        at, ah, aw = (_angles(torch.arange(n), d, theta) for n, d in ((t, dt), (h, dh), (w, dw)))
        angles = torch.cat([at[:, None, None].expand(t, h, w, -1), ah[None, :, None].expand(t, h, w, -1),
                            aw[None, None, :].expand(t, h, w, -1)], dim=-1).reshape(t * h * w, head_dim // 2)
        return _tables(angles, rank_slice, device, dtype)

    return _cached(key, build)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = True, layout: str = "BSND") -> Tensor:
    """Rotates x ([B, S, N, D] for BSND, [B, N, S, D] for BNSD) by the tables; float32 arithmetic, x's dtype out."""
    if layout not in ("BSND", "BNSD"):
        raise ValueError(f"layout must be BSND or BNSD, got {layout!r}")
    s = x.shape[1] if layout == "BSND" else x.shape[2]
    if cos.shape != (s, x.shape[-1] // 2) or sin.shape != cos.shape:
        raise ValueError(f"tables {tuple(cos.shape)} do not fit {s} positions x head dim {x.shape[-1]}")
    if x.device.type == "cpu" and x.dtype in _kernel.ELEM and cos.dtype == torch.float32 and x.dim() == 4:
        return _rotate_cpu(x, cos, sin, interleaved, layout)
    c, sn = (cos[:, None], sin[:, None]) if layout == "BSND" else (cos, sin)
    xf = x.float()
    if interleaved:
        pairs = xf.unflatten(-1, (-1, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = torch.stack((x1 * c - x2 * sn, x1 * sn + x2 * c), dim=-1).flatten(-2)
    else:
        half = x.shape[-1] // 2
        x1, x2 = xf[..., :half], xf[..., half:]
        out = torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)
    return out.to(x.dtype)


def _rotate_cpu(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool, layout: str) -> Tensor:
    """The C++ kernel: one pass over x, threads over positions."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    seq_dim, head_dim = (1, 2) if layout == "BSND" else (2, 1)
    spec = {"elem": _kernel.ELEM[x.dtype], "x": x.data_ptr(), "out": out.data_ptr(), "batch": x.shape[0],
            "seq": x.shape[seq_dim], "heads": x.shape[head_dim], "dim": x.shape[-1],
            "x_strides": [x.stride(0), x.stride(seq_dim), x.stride(head_dim)],
            "out_strides": [out.stride(0), out.stride(seq_dim), out.stride(head_dim)],
            "cos": cos.data_ptr(), "sin": sin.data_ptr(), "interleaved": interleaved}
    _kernel.rotary(spec)
    return out


def rope(x: Tensor, grid: Optional[tuple[int, int, int]] = None, theta: float = 10000.0, interleaved: bool = True,
         layout: str = "BSND", rank_slice: Optional[tuple[int, int]] = None) -> Tensor:
    """Rotary embedding of x with cached tables: 3-D positions when `grid` (t, h, w) is given, else 1-D."""
    s = x.shape[1] if layout == "BSND" else x.shape[2]
    if grid is not None:
        cos, sin = rope_tables_3d(grid, x.shape[-1], theta, x.device, torch.float32, rank_slice)
    else:
        cos, sin = rope_tables_1d(s if rank_slice is None else rank_slice[1], x.shape[-1], theta, x.device,
                                  torch.float32, rank_slice)
    return apply_rope(x, cos, sin, interleaved, layout)
