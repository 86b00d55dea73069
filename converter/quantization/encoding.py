"""Compressed storage of float32 constants (format 1.7, `Tensor.storage`): float16/bfloat16 halves, and int8 or
int4 codes with per-tensor, per-channel or blocked scales. `decode` is the runtime's arithmetic in NumPy
(lite/src/format/weight_storage.cc): value = (code - zero_point) * scale."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

@dataclass
class StoredWeight:
    storage: str                       # float16, bfloat16, int8 or uint8 (signed / unsigned codes)
    data: np.ndarray                   # the bytes the weight section holds (1-D uint8/int8/uint16)
    scale: np.ndarray | None = None    # float32, the layout `axis`/`group_size` give (see schema QuantParam)
    zero_point: np.ndarray | None = None
    axis: int = -1
    bits: int = 8
    group_size: int = 0


def to_float16(w: np.ndarray) -> StoredWeight:
    h = w.astype(np.float16)
    if not np.all(np.isfinite(h[np.isfinite(w)])):
        raise ValueError("values beyond float16's range (65504)")
    return StoredWeight("float16", h.reshape(-1).view(np.uint16))


def to_bfloat16(w: np.ndarray) -> StoredWeight:
    bits = np.ascontiguousarray(w, np.float32).reshape(-1).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)   # round to nearest even
    return StoredWeight("bfloat16", rounded)


def _rows(w: np.ndarray, axis: int, group_size: int):
    """w as [scales, n]: one row of values per scale, rows in the scale layout's order (per tensor: one row;
    per channel: the index along `axis`; blocked: [outer, blocks, inner] around `axis`, the last block
    zero-padded). Returns the rows and a function mapping codes in that shape back to w's element order."""
    if axis == -1:
        return w.reshape(1, -1), lambda q: q.reshape(-1)
    dim = w.shape[axis]
    if group_size == 0:
        moved = np.moveaxis(w, axis, 0)
        return moved.reshape(dim, -1), lambda q: np.moveaxis(q.reshape(moved.shape), 0, axis).reshape(-1)
    outer = int(np.prod(w.shape[:axis], dtype=np.int64))
    inner = int(np.prod(w.shape[axis + 1:], dtype=np.int64))
    g = group_size
    blocks = -(-dim // g)
    x = w.reshape(outer, dim, inner)
    if blocks * g != dim:
        x = np.concatenate([x, np.zeros((outer, blocks * g - dim, inner), x.dtype)], axis=1)
    rows = x.reshape(outer, blocks, g, inner).transpose(0, 1, 3, 2).reshape(-1, g)

    def restore(q: np.ndarray) -> np.ndarray:
        q = q.reshape(outer, blocks, inner, g).transpose(0, 1, 3, 2).reshape(outer, blocks * g, inner)
        return q[:, :dim, :].reshape(-1)
    return rows, restore


def symmetric_scale(amax: np.ndarray, qmax: int) -> np.ndarray:
    """The symmetric scale of values whose largest magnitude is amax (1 where everything is 0)."""
    return np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)


def symmetric_scales(w: np.ndarray, bits: int, axis: int, group_size: int = 0) -> np.ndarray:
    """The scales quantize(w, bits, axis, group_size) (symmetric) chooses, without computing the codes."""
    x, _ = _rows(np.ascontiguousarray(w, np.float32), axis, group_size)
    return symmetric_scale(np.abs(x).max(axis=1, keepdims=True), 2 ** (bits - 1) - 1).reshape(-1)


def quantize(w: np.ndarray, bits: int, axis: int = -1, group_size: int = 0, symmetric: bool = True,
             qmax: int | None = None, like: StoredWeight | None = None) -> StoredWeight:
    """Codes of `bits` (8 or 4) per tensor (axis -1), per index along `axis` (group_size 0) or per block of
    `group_size` along `axis`. Symmetric: signed codes in [-(2^(b-1) - 1), 2^(b-1) - 1] (or [-qmax, qmax]),
    zero point 0; asymmetric: unsigned codes in [0, 2^b - 1] with a zero point per scale (the range always
    covers 0). With `like` (a quantisation of the same layout), its scales and zero points instead of w's own
    (GPTQ rounds adjusted weights on the original weights' grid)."""
    if bits not in (8, 4):
        raise ValueError(f"bits must be 8 or 4, got {bits}")
    w = np.ascontiguousarray(w, np.float32)
    if axis < -1 or axis >= w.ndim:
        raise ValueError(f"axis {axis} for a rank-{w.ndim} tensor")
    if axis == -1 and group_size:
        raise ValueError("a group size needs an axis")
    if group_size < 0:
        raise ValueError(f"group size {group_size}")
    x, restore = _rows(w, axis, group_size)
    if qmax is not None and (not symmetric or not 0 < qmax <= 2 ** (bits - 1) - 1):
        raise ValueError(f"qmax {qmax} for {bits}-bit {'symmetric' if symmetric else 'asymmetric'} codes")
    if like is not None and (like.scale.size != x.shape[0] or (like.zero_point is None) != symmetric):
        raise ValueError("`like` is a quantisation of another layout")
    if symmetric:
        qmax = qmax or 2 ** (bits - 1) - 1
        if like is None:
            scale = symmetric_scale(np.abs(x).max(axis=1, keepdims=True), qmax)
        else:
            scale = like.scale.reshape(-1, 1)
        q = x / scale   # in place from here, codes as int16: a checkpoint's blocks are quantised within ~3x their size
        np.rint(q, out=q)
        np.clip(q, -qmax, qmax, out=q)
        q = q.astype(np.int16)
        zp = None
    else:
        qmax = 2 ** bits - 1
        if like is None:
            lo = np.minimum(x.min(axis=1, keepdims=True), 0)
            hi = np.maximum(x.max(axis=1, keepdims=True), 0)
            scale = np.where(hi > lo, (hi - lo) / qmax, 1.0).astype(np.float32)
            zp = np.clip(np.rint(-lo / scale), 0, qmax).astype(np.int64)
        else:
            scale, zp = like.scale.reshape(-1, 1), like.zero_point.reshape(-1, 1).astype(np.int64)
        q = x / scale
        np.rint(q, out=q)
        q += zp
        np.clip(q, 0, qmax, out=q)
        q = q.astype(np.int16)
    codes = restore(q)
    return StoredWeight("int8" if symmetric else "uint8", _pack(codes, bits, symmetric), scale.reshape(-1),
                        None if zp is None else zp.reshape(-1), axis, bits, group_size)


def _pack(codes: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    if bits == 8:
        return codes.astype(np.int8 if signed else np.uint8)
    nib = (codes & 0xF).astype(np.uint8)
    if nib.size % 2:
        nib = np.concatenate([nib, np.zeros(1, np.uint8)])
    return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)


def decode(s: StoredWeight, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 values the runtime reads back."""
    n = int(np.prod(shape, dtype=np.int64))
    if s.storage == "float16":
        return s.data.view(np.float16).astype(np.float32).reshape(shape)
    if s.storage == "bfloat16":
        return (s.data.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    signed = s.storage == "int8"
    if s.bits == 8:
        codes = s.data.view(np.int8 if signed else np.uint8).astype(np.int64)
    else:
        b = s.data.view(np.uint8)
        codes = np.empty(b.size * 2, np.int64)
        codes[0::2], codes[1::2] = b & 0xF, b >> 4
        codes = codes[:n]
        if signed:
            codes = np.where(codes >= 8, codes - 16, codes)
    zp = s.zero_point if s.zero_point is not None else np.zeros(s.scale.size, np.int64)
    if s.axis == -1:
        return ((codes - zp[0]) * s.scale[0]).astype(np.float32).reshape(shape)
    outer = int(np.prod(shape[:s.axis], dtype=np.int64))
    dim = shape[s.axis]
    inner = int(np.prod(shape[s.axis + 1:], dtype=np.int64))
    c = codes.reshape(outer, dim, inner)
    if s.group_size == 0:
        sc = s.scale.reshape(1, dim, 1)
        z = zp.reshape(1, dim, 1)
    else:
        blocks = -(-dim // s.group_size)
        idx = np.arange(dim) // s.group_size
        sc = s.scale.reshape(outer, blocks, inner)[:, idx, :]
        z = zp.reshape(outer, blocks, inner)[:, idx, :]
    return ((c - z) * sc).astype(np.float32).reshape(shape)
