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


F32 = np.dtype(np.float32)
_CODE_RANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127), np.dtype(np.uint16): (0, 65535),
               np.dtype(np.int16): (-32768, 32767)}


class QuantizedImporter:
    """QDQ activations and ONNX's integer operators as float arithmetic on the dequantised values:
    QuantizeLinear = Cast(Clip(Round(x / scale) + zero_point)), DequantizeLinear = (Cast(q) - zero_point) * scale,
    DynamicQuantizeLinear from ReduceMin/ReduceMax, MatMulInteger/ConvInteger and QLinearMatMul/QLinearConv as
    the float product of their dequantised operands (requantised for the QLinear forms). Integer kernels
    would be faster; these give the same results (a code may differ by one where a product lands on a
    rounding boundary, as between any two int8 kernels that accumulate in a different order)."""

    def __init__(self, fe, node, attrs: dict, where: str):
        self.fe, self.node, self.a, self.where = fe, node, attrs, where
        self.name = node.name or node.op_type
        self.ins = list(node.input) + [""] * 9

    def run(self) -> None:
        getattr(self, "_" + self.node.op_type)()

    # -- helpers ---------------------------------------------------------------------------------------
    def _emit(self, op: str, inputs: list[str], attrs: dict | None = None, dtype=F32, output: str | None = None) -> str:
        return self.fe._emit(self.name, op, inputs, attrs or {}, np.dtype(dtype), output)

    def _const(self, value) -> str:
        return self.fe.g.add_constant(f"{self.name}_c", np.asarray(value))

    def _rank(self, x: str) -> int | None:
        shape = self.fe.value_shapes.get(x)
        if shape is None and x in self.fe.g.tensors:
            shape = self.fe.g.tensors[x].shape
        return None if shape is None else len(shape)

    def _param(self, name: str, x: str, axis: int, what: str) -> str:
        """A scale or zero point as a float32 constant that broadcasts along `axis` of x."""
        v = self.fe.g.constant(name)
        if v is None:   # computed (DynamicQuantizeLinear's scale and zero point): a scalar per tensor
            shape = self.fe.value_shapes.get(name)
            if shape is not None and int(np.prod([d if d > 0 else 2 for d in shape])) != 1:
                raise ConverterError(f"{self.where}: a computed {what} must be a scalar (got shape {shape})")
            return self._emit("Cast", [name], {"to": F32})
        if v.size == 1:
            return self._const(np.float32(v.reshape(()).astype(np.float64)))
        if v.ndim != 1:
            raise ConverterError(f"{self.where}: a {what} of shape {list(v.shape)} (blocked quantisation of "
                                 "activations is not supported)")
        rank = self._rank(x)
        if rank is None:
            raise ConverterError(f"{self.where}: a per-axis {what} needs the input's rank")
        ax = axis % rank
        return self._const(v.astype(np.float32).reshape([-1] + [1] * (rank - 1 - ax)))

    def _dequantize(self, q: str, scale: str, zp: str, axis: int) -> str:
        s = self._param(scale, q, axis, "scale")
        f = self._emit("Cast", [q], {"to": F32})
        if zp:
            z = self._param(zp, q, axis, "zero point")
            f = self._emit("Sub", [f, z])
        return self._emit("Mul", [f, s])

    def _quantize(self, x: str, scale: str, zp: str, axis: int, out_dtype: np.dtype, output: str | None) -> str:
        if out_dtype not in _CODE_RANGE:
            raise ConverterError(f"{self.where}: quantising to {out_dtype} (uint8, int8, uint16, int16 are supported)")
        s = self._param(scale, x, axis, "scale")
        r = self._emit("Round", [self._emit("Div", [x, s])])   # ONNX: round half to even, as Round
        if zp:
            z = self._param(zp, x, axis, "zero point")
            r = self._emit("Add", [r, z])
        lo, hi = _CODE_RANGE[out_dtype]
        c = self._emit("Clip", [r, self._const(np.float32(lo)), self._const(np.float32(hi))])
        return self._emit("Cast", [c], {"to": out_dtype}, out_dtype, output)

    def _out_dtype(self, zp: str) -> np.dtype:
        if zp:
            v = self.fe.g.constant(zp)
            if v is None:
                raise ConverterError(f"{self.where}: the zero point must be a constant")
            return np.dtype(v.dtype)
        return np.dtype(np.uint8)

    # -- operators -------------------------------------------------------------------------------------
    def _QuantizeLinear(self) -> None:
        i = self.ins
        if self.a.get("block_size", 0):
            raise ConverterError(f"{self.where}: blocked quantisation of activations is not supported")
        self._quantize(i[0], i[1], i[2], int(self.a.get("axis", 1)), self._out_dtype(i[2]), self.node.output[0])

    def _DequantizeLinear(self) -> None:
        i = self.ins
        if self.a.get("block_size", 0):
            raise ConverterError(f"{self.where}: blocked dequantisation of activations is not supported")
        y = self._dequantize(i[0], i[1], i[2], int(self.a.get("axis", 1)))
        self._emit("Cast", [y], {"to": F32, "_identity": True}, F32, self.node.output[0])

    def _DynamicQuantizeLinear(self) -> None:
        x, (y, y_scale, y_zp) = self.ins[0], (list(self.node.output) + ["", ""])[:3]
        zero = self._const(np.float32(0))
        lo = self._emit("Min", [self._emit("ReduceMin", [x], {"keepdims": False, "noop_with_empty_axes": False}), zero])
        hi = self._emit("Max", [self._emit("ReduceMax", [x], {"keepdims": False, "noop_with_empty_axes": False}), zero])
        scale = self._emit("Div", [self._emit("Sub", [hi, lo]), self._const(np.float32(255))], output=y_scale or None)
        zp = self._emit("Clip", [self._emit("Round", [self._emit("Div", [self._emit("Neg", [lo]), scale])]),
                                 self._const(np.float32(0)), self._const(np.float32(255))])
        if y_zp:
            self._emit("Cast", [zp], {"to": np.dtype(np.uint8)}, np.uint8, y_zp)
        r = self._emit("Add", [self._emit("Round", [self._emit("Div", [x, scale])]), zp])
        c = self._emit("Clip", [r, self._const(np.float32(0)), self._const(np.float32(255))])
        self._emit("Cast", [c], {"to": np.dtype(np.uint8)}, np.uint8, y)

    def _centred(self, q: str, zp: str, axis: int) -> str:
        """Cast(q) - zero point; a constant operand (the weight) becomes a float32 constant kept as its codes
        (scale 1) in the file."""
        codes, z = self.fe.g.constant(q), (self.fe.g.constant(zp) if zp else None)
        if codes is not None and codes.dtype.itemsize == 1 and (not zp or z is not None):
            ones = np.ones(z.shape if z is not None else (), np.float32)
            values, stored = dequantize_constant(codes, 8, ones, z, axis, 0, self.where)
            name = self.fe.g.add_constant(f"{self.name}_weight", values)
            self.fe.g.tensors[name].stored = stored
            return name
        f = self._emit("Cast", [q], {"to": F32})
        if zp:
            z = self._param(zp, q, axis, "zero point")
            f = self._emit("Sub", [f, z])
        return f

    def _MatMulInteger(self) -> None:
        i = self.ins
        a = self._centred(i[0], i[2], 0)      # a_zero_point: per tensor (or per row of a 2-D A)
        b = self._centred(i[1], i[3], -1)     # b_zero_point: per tensor or per column
        self._emit("Cast", [self._emit("MatMul", [a, b])], {"to": np.dtype(np.int32)}, np.int32, self.node.output[0])

    def _conv_attrs(self) -> dict:
        a = self.a
        return {"kernel_shape": a.get("kernel_shape", []), "strides": a.get("strides", []), "pads": a.get("pads", []),
                "dilations": a.get("dilations", []), "group": a.get("group", 1),
                "auto_pad": self.fe._auto_pad(a, self.where)}

    def _ConvInteger(self) -> None:
        i = self.ins
        x = self._centred(i[0], i[2], 1)
        w = self._centred(i[1], i[3], 0)
        y = self._emit("Conv", [x, w], self._conv_attrs())
        self._emit("Cast", [y], {"to": np.dtype(np.int32)}, np.int32, self.node.output[0])

    def _weight(self, q: str, scale: str, zp: str, axis: int) -> str:
        """A dequantised operand: a constant weight stays compressed in the file, an activation is computed."""
        codes, s = self.fe.g.constant(q), self.fe.g.constant(scale)
        z = self.fe.g.constant(zp) if zp else None
        if codes is not None and s is not None and (not zp or z is not None):
            values, stored = dequantize_constant(codes, 8, s.astype(np.float32), z, axis, 0, self.where)
            name = self.fe.g.add_constant(f"{self.name}_weight", values)
            self.fe.g.tensors[name].stored = stored
            return name
        return self._dequantize(q, scale, zp, axis)

    def _QLinearMatMul(self) -> None:
        i = self.ins
        a = self._weight(i[0], i[1], i[2], -1)
        b = self._weight(i[3], i[4], i[5], -1)
        y = self._emit("MatMul", [a, b])
        self._quantize(y, i[6], i[7], -1, self._out_dtype(i[7]), self.node.output[0])

    def _QLinearConv(self) -> None:
        i = self.ins
        x = self._weight(i[0], i[1], i[2], 1)
        w = self._weight(i[3], i[4], i[5], 0)
        inputs = [x, w]
        if i[8]:   # int32 bias at scale x_scale * w_scale (per output channel)
            bias, xs, ws = (self.fe.g.constant(n) for n in (i[8], i[1], i[4]))
            if bias is None or xs is None or ws is None:
                raise ConverterError(f"{self.where}: the bias and scales must be constants")
            inputs.append(self._const((bias.astype(np.float64) * xs.astype(np.float64).reshape(-1)[0]
                                       * ws.astype(np.float64).reshape(-1)).astype(np.float32)))
        y = self._emit("Conv", inputs, self._conv_attrs())
        self._quantize(y, i[6], i[7], 1, self._out_dtype(i[7]), self.node.output[0])
