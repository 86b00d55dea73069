"""Pre-quantised ONNX weights: DequantizeLinear of a constant (QDQ weight-only models, int8/uint8/int4/uint4
codes, per tensor, per axis or blocked) and com.microsoft MatMulNBits (ONNX Runtime's 4/8-bit weight-only
MatMul). Both become float32 constants whose file storage keeps the original codes and scales
(`Tensor.stored`), so nothing is re-quantised and the .ms file stays as small as the source."""
from __future__ import annotations

import numpy as np

from ..ir import ConverterError
from ..quantization.encoding import StoredWeight, _pack, decode


def dequantize_constant(codes: np.ndarray, bits: int, scale: np.ndarray, zero_point: np.ndarray | None,
                        axis: int, block_size: int, where: str) -> tuple[np.ndarray, StoredWeight | None]:
    """ONNX DequantizeLinear on constant codes. Returns the float32 values and, for 8/4-bit codes, the
    storage that keeps them compressed (None for int16/int32 codes such as QDQ biases: stored as float)."""
    if scale.dtype != np.float32:
        raise ConverterError(f"{where}: scale of dtype {scale.dtype} (float32 is supported)")
    if zero_point is not None and zero_point.shape != scale.shape:
        raise ConverterError(f"{where}: zero point shape {list(zero_point.shape)} differs from the scale's "
                             f"{list(scale.shape)}")
    rank = codes.ndim
    if scale.size == 1 and block_size == 0:
        q_axis = -1
    else:
        if not -rank <= axis < rank:
            raise ConverterError(f"{where}: axis {axis} for a rank-{rank} input")
        q_axis = axis % rank
        if block_size == 0:
            if scale.ndim != 1 or scale.size != codes.shape[q_axis]:
                raise ConverterError(f"{where}: per-axis scale of shape {list(scale.shape)} for axis {q_axis} of "
                                     f"{list(codes.shape)}")
        else:
            want = list(codes.shape)
            want[q_axis] = -(-want[q_axis] // block_size)
            if list(scale.shape) != want:
                raise ConverterError(f"{where}: blocked scale of shape {list(scale.shape)}, block size {block_size} "
                                     f"along axis {q_axis} of {list(codes.shape)} needs {want}")
    signed = np.issubdtype(codes.dtype, np.signedinteger)
    zp = None if zero_point is None else zero_point.astype(np.int64).reshape(-1)
    if bits not in (8, 4) or codes.dtype.itemsize > 1:
        # Wider codes (QDQ biases in int32): plain float32.
        z = 0 if zero_point is None else zero_point.astype(np.float64)
        if q_axis == -1:
            values = (codes.astype(np.float64) - z) * scale.astype(np.float64).reshape(-1)[0]
        else:
            shape = [1] * rank
            shape[q_axis] = -1
            if block_size:
                raise ConverterError(f"{where}: blocked dequantisation of {codes.dtype} codes is not supported")
            values = (codes.astype(np.float64) - np.reshape(z, shape)) * scale.astype(np.float64).reshape(shape)
        return values.astype(np.float32), None
    if zp is not None and signed and not zp.any():
        zp = None
    stored = StoredWeight("int8" if signed else "uint8", _pack(codes.astype(np.int64).reshape(-1), bits, signed),
                          scale.reshape(-1).astype(np.float32), zp, q_axis, bits, block_size if q_axis != -1 else 0)
    return decode(stored, codes.shape), stored


def matmul_nbits_weight(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int, n: int, bits: int,
                        block_size: int, where: str) -> tuple[np.ndarray, StoredWeight]:
    """com.microsoft MatMulNBits' B ([N, blocks, block_size * bits / 8] uint8), scales ([N, blocks] or flat) and
    zero points (packed uint8 codes, default 2^(bits-1)) as the [K, N] float32 weight of a MatMul, stored as
    unsigned codes in blocks of block_size along K."""
    if bits not in (4, 8):
        raise ConverterError(f"{where}: bits={bits} (4 and 8 are supported)")
    if block_size < 16 or block_size & (block_size - 1):
        raise ConverterError(f"{where}: block_size={block_size} (a power of two, at least 16)")
    blocks = -(-k // block_size)
    blob = block_size * bits // 8
    if b.dtype != np.uint8 or b.size != n * blocks * blob:
        raise ConverterError(f"{where}: B holds {b.size} {b.dtype} values, N={n} x {blocks} blocks x {blob} bytes needed")
    if scales.dtype != np.float32 or scales.size != n * blocks:
        raise ConverterError(f"{where}: scales hold {scales.size} {scales.dtype} values, N x blocks = {n * blocks} "
                             "float32 needed")
    raw = b.reshape(n, blocks * blob)
    if bits == 4:
        codes = np.empty((n, blocks * blob * 2), np.int64)
        codes[:, 0::2], codes[:, 1::2] = raw & 0xF, raw >> 4
    else:
        codes = raw.astype(np.int64)
    codes = codes[:, :k]                                   # [N, K]
    if zero_points is None:
        zp = np.full((n, blocks), 1 << (bits - 1), np.int64)
    elif zero_points.dtype == np.uint8:
        per_row = -(-blocks * bits // 8)
        if zero_points.size != n * per_row:
            raise ConverterError(f"{where}: zero_points hold {zero_points.size} bytes, {n * per_row} needed")
        zr = zero_points.reshape(n, per_row)
        if bits == 4:
            zp = np.empty((n, per_row * 2), np.int64)
            zp[:, 0::2], zp[:, 1::2] = zr & 0xF, zr >> 4
            zp = zp[:, :blocks]
        else:
            zp = zr.astype(np.int64)
    else:
        raise ConverterError(f"{where}: zero_points of dtype {zero_points.dtype} (packed uint8 is supported)")
    stored = StoredWeight("uint8", _pack(codes.T.reshape(-1), bits, False),
                          np.ascontiguousarray(scales.reshape(n, blocks).T).reshape(-1).astype(np.float32),
                          np.ascontiguousarray(zp.T).reshape(-1), 0, bits, block_size)
    return decode(stored, (k, n)), stored
