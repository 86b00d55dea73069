"""The operators the .ms format and runtime support, in canonical form, with their numpy semantics.

`SUPPORTED` maps a canonical op type to its output-dtype rule. `evaluate` computes a node on
constant inputs (constant folding); it returns None for operators it does not fold.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .ir import Node

_FLOAT_ONLY = "float"


def _same_as(i: int) -> Callable[[list[np.dtype], dict], list[np.dtype]]:
    return lambda dts, attrs: [dts[i]]


SUPPORTED: dict[str, Callable[[list[np.dtype], dict], list[np.dtype]]] = {
    **{op: _same_as(0) for op in (
        "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Clip", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Sqrt",
        "Reciprocal", "Neg", "Exp", "Erf", "MatMul", "Gemm", "Conv", "BatchNormalization", "Softmax",
        "LayerNormalization", "RMSNormalization", "RotaryEmbedding", "ReduceMean", "MaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Flatten",
        "Transpose", "Concat", "Slice", "Gather", "Squeeze", "Unsqueeze", "Expand")},
    **{op: _same_as(0) for op in (
        "Abs", "Sign", "Ceil", "Floor", "Round", "Log", "Sin", "Cos", "Tan", "Atan", "Asin", "Acos", "Sinh",
        "Cosh", "Not", "Softplus", "Softsign", "Mish", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu",
        "Gelu", "PRelu", "Mod", "And", "Or", "Xor", "BitShift", "Max", "Min", "Sum", "Mean", "ReduceSum",
        "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare")},
    **{op: (lambda dts, attrs: [np.dtype(np.bool_)]) for op in (
        "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN", "IsInf")},
    **{op: _same_as(0) for op in (
        "Tile", "Trilu", "CumSum", "Pad", "LogSoftmax", "Hardmax", "DepthToSpace", "SpaceToDepth",
        "GatherElements", "GatherND", "ScatterElements", "ScatterND", "InstanceNormalization",
        "GroupNormalization", "LpNormalization", "GlobalMaxPool", "Range", "ConvTranspose", "Resize",
        "Einsum", "Compress", "ReverseSequence", "LRN", "LpPool", "MaxUnpool")},
    **{op: (lambda dts, attrs: [dts[0]] * attrs["_num_outputs"]) for op in ("LSTM", "GRU", "RNN")},
    "If": lambda dts, attrs: [attrs["then_branch"].tensors[o].dtype for o in attrs["then_branch"].outputs],
    "Loop": lambda dts, attrs: [attrs["body"].tensors[o].dtype for o in attrs["body"].outputs[1:]],
    "Scan": lambda dts, attrs: [attrs["body"].tensors[o].dtype for o in attrs["body"].outputs],
    "DFT": _same_as(0),
    "Attention": lambda dts, attrs: [dts[0]] * attrs["_num_outputs"],
    "MoE": _same_as(0),   # Y, and present_key/present_value
    "CausalConv1D": _same_as(0),
    "GatedDeltaRule": _same_as(0),
    "STFT": _same_as(0),
    "ConstantOfShape": lambda dts, attrs: [dts[1] if len(dts) > 1 and dts[1] is not None else np.dtype(np.float32)],
    "OneHot": lambda dts, attrs: [dts[2]],
    "NonZero": lambda dts, attrs: [np.dtype(np.int64)],
    "NonMaxSuppression": lambda dts, attrs: [np.dtype(np.int64)],
    "Size": lambda dts, attrs: [np.dtype(np.int64)],
    "TopK": lambda dts, attrs: [dts[0], np.dtype(np.int64)],
    "ArgMax": lambda dts, attrs: [np.dtype(np.int64)],
    "ArgMin": lambda dts, attrs: [np.dtype(np.int64)],
    "Split": lambda dts, attrs: [dts[0]] * attrs["_num_outputs"],
    "Where": _same_as(1),
    "Cast": lambda dts, attrs: [attrs["to"]],
    "Shape": lambda dts, attrs: [np.dtype(np.int64)],
}


def output_dtypes(node: Node, input_dtypes: list[np.dtype]) -> list[np.dtype]:
    attrs = dict(node.attrs, _num_outputs=len(node.outputs))
    return SUPPORTED[node.op_type](input_dtypes, attrs)


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(b == 0, 0, np.abs(a) // np.where(b == 0, 1, np.abs(b)))
        return (q * np.sign(a) * np.sign(b)).astype(a.dtype)
    return a / b


def _slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, x.ndim)
        dim = x.shape[a]
        s, e = int(s), int(e)
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        index[a] = slice(s, None if e < 0 else e, st)
    return x[tuple(index)]


def _fold(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


def _mod(a, b, fmod):
    if fmod:
        return np.fmod(a, b).astype(a.dtype)
    return np.mod(a, b).astype(a.dtype)


def _gelu(x, tanh):
    if tanh:
        y = 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return y.astype(x.dtype)


def _fused_epilogue(y, attrs):
    """The activation a fusion pass put on MatMul/Gemm/Conv (attrs['activation'])."""
    act = attrs.get("activation")
    if act is None:
        return y
    fns = {"relu": lambda v: np.maximum(v, 0), "relu6": lambda v: np.clip(v, 0, 6),
           "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
           "hard_swish": lambda v: v * np.clip(v + 3, 0, 6) / 6, "gelu": lambda v: _gelu(v, False),
           "silu": lambda v: v / (1 + np.exp(-v)), "gelu_tanh": lambda v: _gelu(v, True),
           "quick_gelu": lambda v: v / (1 + np.exp(-1.702 * v))}
    return fns[act](y).astype(y.dtype)


def moe(x, logits, weights, *, top_k: int, normalize_top_k: bool = False, activation: str = "silu"):
    """The MoE operator in NumPy (float64 inside): weights = E gate-up matrices [H, 2I] then E down matrices [I, H]."""
    experts = len(weights) // 2
    z = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
    p = np.take_along_axis(probs, chosen, axis=-1)
    if normalize_top_k:
        p = p / p.sum(axis=-1, keepdims=True)
    y = np.zeros(x.shape, np.float64)
    for t in range(x.shape[0]):
        for e, pe in zip(chosen[t], p[t]):
            gu = x[t].astype(np.float64) @ weights[e]
            half = gu.shape[-1] // 2
            h = _fused_epilogue(gu[:half], {"activation": activation}) * gu[half:]
            y[t] += pe * (h @ weights[experts + e])
    return y.astype(x.dtype)


def _sequences(slots, query_lens):
    """(slot, first row, tokens) of each sequence of a stateful step."""
    starts = np.concatenate([[0], np.cumsum(query_lens)[:-1]]).astype(np.int64)
    return [(int(s), int(r), int(n)) for s, r, n in zip(slots, starts, query_lens)]


def causal_conv1d(x, weight, conv_state, slots, query_lens, *, activation=None):
    """CausalConv1D in NumPy (float64 inside); updates conv_state in place, as the runtime does."""
    K = weight.shape[1]
    y = np.zeros(x.shape, np.float64)
    for slot, r0, n in _sequences(slots, query_lens):
        past = conv_state[slot].astype(np.float64) if slot >= 0 else np.zeros((x.shape[1], K - 1))
        seq = np.concatenate([past, x[r0:r0 + n].T.astype(np.float64)], axis=1)   # [C, K - 1 + n]
        for t in range(n):
            y[r0 + t] = (seq[:, t:t + K] * weight).sum(axis=1)
        if slot >= 0 and n:
            conv_state[slot] = seq[:, -(K - 1):] if K > 1 else conv_state[slot]
    if activation == "silu":
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype)


def gated_delta_rule(qkv, g, beta, state, slots, query_lens, *, scale=0.0, qk_l2norm=True):
    """GatedDeltaRule in NumPy (float64 inside), token by token as transformers' recurrent form; updates state."""
    hv, dk, dv = state.shape[1:]
    hk = (qkv.shape[1] - hv * dv) // (2 * dk)
    scale = scale or dk ** -0.5
    out = np.zeros((qkv.shape[0], hv * dv), np.float64)
    for slot, r0, n in _sequences(slots, query_lens):
        S = state[slot].astype(np.float64) if slot >= 0 else np.zeros((hv, dk, dv))
        for t in range(r0, r0 + n):
            row = qkv[t].astype(np.float64)
            q = row[:hk * dk].reshape(hk, dk).repeat(hv // hk, axis=0)
            k = row[hk * dk:2 * hk * dk].reshape(hk, dk).repeat(hv // hk, axis=0)
            v = row[2 * hk * dk:].reshape(hv, dv)
            if qk_l2norm:
                q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
                k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
            S = S * np.exp(g[t].astype(np.float64))[:, None, None]
            delta = (v - np.einsum("hk,hkv->hv", k, S)) * beta[t][:, None]
            S = S + k[:, :, None] * delta[:, None, :]
            out[t] = np.einsum("hk,hkv->hv", q * scale, S).reshape(-1)
        if slot >= 0:
            state[slot] = S
    return out.astype(qkv.dtype)


def _reduce(fn, x, axes, attrs):
    if axes is None or len(axes) == 0:
        if attrs.get("noop_with_empty_axes"):
            return x
        axes = range(x.ndim)
    axes = tuple(_axis(int(a), x.ndim) for a in axes)
    return np.asarray(fn(x, axis=axes, keepdims=bool(attrs.get("keepdims", True)))).astype(x.dtype)


def _logsumexp(v, axis, keepdims):
    m = np.max(v, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(v - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _arg(fn, x, attrs):
    axis = _axis(attrs.get("axis", 0), x.ndim)
    if attrs.get("select_last_index"):
        flipped = np.flip(x, axis=axis)
        idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        idx = fn(x, axis=axis)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if attrs.get("keepdims", True) else idx


def _reduce_mean(x, axes, keepdims, noop):
    if axes is None or len(axes) == 0:
        if noop:
            return x
        axes = range(x.ndim)
    return np.mean(x, axis=tuple(_axis(int(a), x.ndim) for a in axes), keepdims=bool(keepdims)).astype(x.dtype)


def _softmax(x, axis, coerce_2d):
    axis = _axis(axis, x.ndim)
    if coerce_2d:
        shape = x.shape
        x2 = x.reshape(int(np.prod(shape[:axis])), -1)
        return _softmax(x2, 1, False).reshape(shape)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _erf(x):
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x


def _gemm(a, b, c, attrs):
    a = a.T if attrs.get("trans_a") else a
    b = b.T if attrs.get("trans_b") else b
    y = attrs.get("alpha", 1.0) * (a @ b)
    if c is not None:
        y = y + attrs.get("beta", 1.0) * c
    return y.astype(a.dtype)


def _layer_norm(x, scale, bias, attrs):
    axis = _axis(attrs.get("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + attrs.get("epsilon", 1e-5)) * scale
    return (y if bias is None else y + bias).astype(x.dtype)


def _rms_norm(x, scale, attrs):
    axis = _axis(attrs.get("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    ms = (x.astype(np.float32) ** 2).mean(axis=axes, keepdims=True)
    return (x / np.sqrt(ms + attrs.get("epsilon", 1e-5)) * scale).astype(x.dtype)


def rotary_embedding(x, cos, sin, position_ids=None, *, interleaved=False, num_heads=0, rotary_embedding_dim=0):
    """ONNX RotaryEmbedding (opset 23) in NumPy: x (B, N, S, H) or (B, S, N * H); cos/sin (B or 1, S, rot / 2), or
    (max_position, rot / 2) indexed by position_ids (B, S)."""
    three_d = x.ndim == 3
    if three_d:
        b, s, hidden = x.shape
        x = x.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)
    rot = rotary_embedding_dim or x.shape[-1]
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    cos, sin = cos[:, None], sin[:, None]   # over the heads
    xr = x[..., :rot]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = np.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(xr.shape)
    else:
        x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
        out = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    out = np.concatenate([out, x[..., rot:]], axis=-1).astype(x.dtype)
    if three_d:
        out = out.transpose(0, 2, 1, 3).reshape(b, s, hidden)
    return out


def _batch_norm(x, scale, bias, mean, var, attrs):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    a = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
    return (x * a.reshape(shape) + (bias - mean * a).reshape(shape)).astype(x.dtype)


def _reshape(x, shape, allowzero):
    shape = [int(d) for d in shape]
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _split(x, split, attrs, n):
    axis = _axis(attrs.get("axis", 0), x.ndim)
    if split is None:
        chunk = -(-x.shape[axis] // n)
        split = [min(chunk, x.shape[axis] - i * chunk) for i in range(n)]
    return np.split(x, np.cumsum([int(s) for s in split])[:-1], axis=axis)


def _shape(x, attrs):
    rank = x.ndim
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(x.shape[start:end], dtype=np.int64)


def _clip(x, lo, hi, attrs):
    lo = attrs.get("min") if lo is None else lo
    hi = attrs.get("max") if hi is None else hi
    if lo is not None:
        x = np.maximum(x, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        x = np.minimum(x, np.asarray(hi, dtype=x.dtype))
    return x


def _squeeze(x, axes):
    if axes is None or len(axes) == 0:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(_axis(int(a), x.ndim) for a in axes))


def _unsqueeze(x, axes):
    out_rank = x.ndim + len(axes)
    axes = sorted(_axis(int(a), out_rank) for a in axes)
    for a in axes:
        x = np.expand_dims(x, a)
    return x


def _transpose(x, perm):
    return np.transpose(x, perm if perm else None)


def _flatten(x, axis):
    axis = _axis(axis, x.ndim) if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def _hardswish(x):
    return (x * np.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype)


_EVAL: dict[str, Callable[..., Any]] = {
    "Add": lambda n, a, b: a + b,
    "Sub": lambda n, a, b: a - b,
    "Mul": lambda n, a, b: a * b,
    "Div": lambda n, a, b: _div(a, b),
    "Pow": lambda n, a, b: np.power(a, b).astype(a.dtype),
    "Equal": lambda n, a, b: np.equal(a, b),
    "Less": lambda n, a, b: np.less(a, b),
    "LessOrEqual": lambda n, a, b: np.less_equal(a, b),
    "Greater": lambda n, a, b: np.greater(a, b),
    "GreaterOrEqual": lambda n, a, b: np.greater_equal(a, b),
    "And": lambda n, a, b: np.logical_and(a, b),
    "Or": lambda n, a, b: np.logical_or(a, b),
    "Xor": lambda n, a, b: np.logical_xor(a, b),
    "Not": lambda n, x: np.logical_not(x),
    "Mod": lambda n, a, b: _mod(a, b, n.attrs.get("fmod", False)),
    "BitShift": lambda n, a, b: (np.left_shift(a, b) if n.attrs.get("left", True) else np.right_shift(a, b)).astype(a.dtype),
    "Max": lambda n, *xs: _fold(np.maximum, xs),
    "Min": lambda n, *xs: _fold(np.minimum, xs),
    "Sum": lambda n, *xs: _fold(np.add, xs),
    "Mean": lambda n, *xs: (_fold(np.add, xs) / len(xs)).astype(xs[0].dtype),
    "PRelu": lambda n, x, s: np.where(x < 0, x * s, x).astype(x.dtype),
    "Abs": lambda n, x: np.abs(x),
    "Sign": lambda n, x: np.sign(x),
    "Ceil": lambda n, x: np.ceil(x),
    "Floor": lambda n, x: np.floor(x),
    "Round": lambda n, x: np.round(x),
    "Log": lambda n, x: np.log(x),
    "Sin": lambda n, x: np.sin(x),
    "Cos": lambda n, x: np.cos(x),
    "Tan": lambda n, x: np.tan(x),
    "Atan": lambda n, x: np.arctan(x),
    "Asin": lambda n, x: np.arcsin(x),
    "Acos": lambda n, x: np.arccos(x),
    "Sinh": lambda n, x: np.sinh(x),
    "Cosh": lambda n, x: np.cosh(x),
    "IsNaN": lambda n, x: np.isnan(x),
    "IsInf": lambda n, x: (np.isposinf(x) & n.attrs.get("detect_positive", True))
                          | (np.isneginf(x) & n.attrs.get("detect_negative", True)),
    "Softplus": lambda n, x: np.logaddexp(0, x).astype(x.dtype),
    "Softsign": lambda n, x: (x / (1 + np.abs(x))).astype(x.dtype),
    "Mish": lambda n, x: (x * np.tanh(np.logaddexp(0, x))).astype(x.dtype),
    "Elu": lambda n, x: np.where(x >= 0, x, n.attrs["alpha"] * (np.exp(x) - 1)).astype(x.dtype),
    "Selu": lambda n, x: (n.attrs["gamma"] * np.where(x > 0, x, n.attrs["alpha"] * (np.exp(x) - 1))).astype(x.dtype),
    "Celu": lambda n, x: (np.maximum(0, x) + np.minimum(0, n.attrs["alpha"] * (np.exp(x / n.attrs["alpha"]) - 1))
                          ).astype(x.dtype),
    "HardSigmoid": lambda n, x: np.clip(n.attrs["alpha"] * x + n.attrs["beta"], 0, 1).astype(x.dtype),
    "ThresholdedRelu": lambda n, x: np.where(x > n.attrs["alpha"], x, 0).astype(x.dtype),
    "Gelu": lambda n, x: _gelu(x, n.attrs.get("tanh_approximation", False)),
    "ReduceSum": lambda n, x, axes=None: _reduce(np.sum, x, axes, n.attrs),
    "ReduceMax": lambda n, x, axes=None: _reduce(np.max, x, axes, n.attrs),
    "ReduceMin": lambda n, x, axes=None: _reduce(np.min, x, axes, n.attrs),
    "ReduceProd": lambda n, x, axes=None: _reduce(np.prod, x, axes, n.attrs),
    "ReduceL1": lambda n, x, axes=None: _reduce(lambda v, **k: np.sum(np.abs(v), **k), x, axes, n.attrs),
    "ReduceL2": lambda n, x, axes=None: _reduce(lambda v, **k: np.sqrt(np.sum(v * v, **k)), x, axes, n.attrs),
    "ReduceSumSquare": lambda n, x, axes=None: _reduce(lambda v, **k: np.sum(v * v, **k), x, axes, n.attrs),
    "ReduceLogSumExp": lambda n, x, axes=None: _reduce(_logsumexp, x, axes, n.attrs),
    "Range": lambda n, s, l, d: np.arange(s, l, d).astype(s.dtype),
    "ConstantOfShape": lambda n, shape, v=None: np.full([int(d) for d in shape], 0 if v is None else v.reshape(-1)[0],
                                                      dtype=np.float32 if v is None else v.dtype),
    "Tile": lambda n, x, r: np.tile(x, [int(v) for v in r]),
    "Size": lambda n, x: np.array(x.size, dtype=np.int64),
    "NonZero": lambda n, x: np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1),
    "NonMaxSuppression": lambda n, boxes, scores, max_out=None, iou=None, score=None: _nms(
        boxes, scores, max_out, iou, score, bool(n.attrs.get("center_point_box"))),
    "Trilu": lambda n, x, k=None: (np.triu if n.attrs.get("upper", True) else np.tril)(x, 0 if k is None else int(k)),
    "ArgMax": lambda n, x: _arg(np.argmax, x, n.attrs),
    "ArgMin": lambda n, x: _arg(np.argmin, x, n.attrs),
    "Where": lambda n, c, a, b: np.where(c, a, b),
    "Relu": lambda n, x: np.maximum(x, 0).astype(x.dtype),
    "Clip": lambda n, x, lo=None, hi=None: _clip(x, lo, hi, n.attrs),
    "Sigmoid": lambda n, x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "Tanh": lambda n, x: np.tanh(x),
    "HardSwish": lambda n, x: _hardswish(x),
    "LeakyRelu": lambda n, x: np.where(x >= 0, x, x * n.attrs.get("alpha", 0.01)).astype(x.dtype),
    "Sqrt": lambda n, x: np.sqrt(x),
    "Reciprocal": lambda n, x: (1 / x).astype(x.dtype),
    "Neg": lambda n, x: -x,
    "Exp": lambda n, x: np.exp(x),
    "Erf": lambda n, x: _erf(x),
    "CausalConv1D": lambda n, x, w, state, slots, lens: causal_conv1d(x, w, state, slots, lens,
                                                                      activation=n.attrs.get("activation")),
    "GatedDeltaRule": lambda n, qkv, g, beta, state, slots, lens: gated_delta_rule(
        qkv, g, beta, state, slots, lens, scale=float(n.attrs.get("scale", 0.0)),
        qk_l2norm=bool(n.attrs.get("qk_l2norm", True))),
    "MoE": lambda n, x, logits, *w: moe(x, logits, w, top_k=int(n.attrs["top_k"]),
                                        normalize_top_k=bool(n.attrs.get("normalize_top_k")),
                                        activation=n.attrs.get("activation", "silu")),
    "MatMul": lambda n, a, b, bias=None, addend=None, multiplier=None: _fused_epilogue(
        np.matmul(a, b.T if n.attrs.get("b_transposed") else b) + (0 if bias is None else bias)
        + (0 if addend is None else addend), n.attrs)
        * (1 if multiplier is None else multiplier),
    "Gemm": lambda n, a, b, c=None: _gemm(a, b, c, n.attrs),
    "Softmax": lambda n, x: _softmax(x, n.attrs.get("axis", -1), n.attrs.get("coerce_2d", False)).astype(x.dtype),
    "LayerNormalization": lambda n, x, s, b=None: _layer_norm(x, s, b, n.attrs),
    "RMSNormalization": lambda n, x, s: _rms_norm(x, s, n.attrs),
    "RotaryEmbedding": lambda n, x, c, s, p=None: rotary_embedding(
        x, c, s, p, interleaved=bool(n.attrs.get("interleaved")), num_heads=int(n.attrs.get("num_heads", 0)),
        rotary_embedding_dim=int(n.attrs.get("rotary_embedding_dim", 0))),
    "BatchNormalization": lambda n, x, s, b, m, v: _batch_norm(x, s, b, m, v, n.attrs),
    "ReduceMean": lambda n, x, axes=None: _reduce_mean(x, axes, n.attrs.get("keepdims", True),
                                                     n.attrs.get("noop_with_empty_axes", False)),
    "Reshape": lambda n, x, s: _reshape(x, s, n.attrs.get("allowzero", False)),
    "Flatten": lambda n, x: _flatten(x, n.attrs.get("axis", 1)),
    "Transpose": lambda n, x: _transpose(x, n.attrs.get("perm")),
    "Concat": lambda n, *xs: np.concatenate(xs, axis=n.attrs.get("axis", 0)),
    "Slice": lambda n, x, s, e, a=None, st=None: _slice(x, s, e, a, st),
    "Gather": lambda n, x, i: np.take(x, i.astype(np.int64), axis=n.attrs.get("axis", 0)),
    "Squeeze": lambda n, x, axes=None: _squeeze(x, axes),
    "Unsqueeze": lambda n, x, axes: _unsqueeze(x, axes),
    "Split": lambda n, x, split=None: _split(x, split, n.attrs, len(n.outputs)),
    "Cast": lambda n, x: x.astype(n.attrs["to"]),
    "Shape": lambda n, x: _shape(x, n.attrs),
    "Expand": lambda n, x, s: x * np.ones([int(d) for d in s], dtype=x.dtype),
}


def _nms(boxes, scores, max_out, iou, score, centre: bool) -> np.ndarray:
    """ONNX NonMaxSuppression as the runtime computes it (lite/src/cpu/detection/nms.cc): float32 IoU, candidates by
    score (ties by index, NaN last), a box of no area suppresses nothing."""
    max_out = 0 if max_out is None or max_out.size == 0 else int(max_out.reshape(-1)[0])
    iou = 0.0 if iou is None or iou.size == 0 else float(iou.reshape(-1)[0])
    boxes = boxes.astype(np.float32)
    if centre:
        half = boxes[..., 2:] / np.float32(2)
        boxes = np.concatenate([boxes[..., :2] - half, boxes[..., :2] + half], -1)
    lo, hi = np.minimum(boxes[..., :2], boxes[..., 2:]), np.maximum(boxes[..., :2], boxes[..., 2:])
    area = np.prod(hi - lo, -1)
    out = []
    for b in range(boxes.shape[0] if max_out > 0 else 0):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in range(len(s)) if score is None or score.size == 0 or s[i] > score.reshape(-1)[0]]
            cand.sort(key=lambda i: (np.isnan(s[i]), -s[i] if not np.isnan(s[i]) else 0.0))
            kept: list[int] = []
            for i in cand:
                if len(kept) >= max_out:
                    break
                ok = True
                for k in kept:
                    if not (area[b, k] > 0 and area[b, i] > 0):
                        continue
                    w = np.minimum(hi[b, k], hi[b, i]) - np.maximum(lo[b, k], lo[b, i])
                    if not (w[0] > 0 and w[1] > 0):
                        continue
                    inter = np.float32(w[0] * w[1])
                    if inter / np.float32(area[b, k] + area[b, i] - inter) > iou:
                        ok = False
                        break
                if ok:
                    kept.append(i)
            out += [(b, c, i) for i in kept]
    return np.array(out, dtype=np.int64).reshape(-1, 3)


def evaluate(node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray] | None:
    """Runs `node` on constant inputs with NumPy; None when the operator is not folded here."""
    fn = _EVAL.get(node.op_type)
    if fn is None:
        return None
    # Trailing omitted optional inputs are dropped; omitted ones in the middle stay None.
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    with np.errstate(all="ignore"):
        out = fn(node, *inputs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o, order="C") for o in outs]


# Constraints beyond the ONNX spec, shown in docs/ops.md (generated by converter.opdoc).
NOTES: dict[str, str] = {
    "Div": "integer division truncates; integer division by zero gives 0",
    "Pow": "an integer exponent of a float base is converted to float at convert time",
    "Clip": "bounds from inputs (opset 11+) or the legacy attributes; min > max gives max, NaN stays NaN",
    "MoE": "(ours, format 1.13) a mixture-of-experts feed-forward block: x [T, H], router logits [T, E], E gate-up weights [H, 2I] and E down weights [I, H]; per token the top_k experts by softmax probability (optionally renormalised), SiLU/GELU gating; only the chosen experts run (model_zoo.language.decoder_graph builds it for Qwen2-MoE and Qwen3-MoE)",
    "CausalConv1D": "(ours, format 1.14) a causal depthwise 1-D convolution carrying its window across steps: x [T, C] holding the step's tokens of several sequences (query_lens), weight [C, K], conv_state [slots, C, K - 1] updated in place, state_slots (-1: from zeros, nothing kept); SiLU optional (model_zoo.language.hybrid_decoder_graph builds it for Qwen3.5)",
    "GatedDeltaRule": "(ours, format 1.14) the gated delta rule of linear attention: packed q/k/v [T, 2 Hk Dk + Hv Dv], log decay g and write strength beta [T, Hv], recurrent_state [slots, Hv, Dk, Dv] updated in place, state_slots, query_lens; L2-normalised q and k, q scaled by 1/sqrt(Dk); value heads share key heads in groups (Qwen3.5's gated DeltaNet layers)",
    "MatMul": "batched with broadcast batch dims; 1-D operands; a bias Add, a per-column scale Mul and an activation (GELU, SiLU, ReLU, ...) after a constant-weight MatMul are fused into it, and a residual Add after any MatMul (its fourth input, with Add's broadcasting), and a gated linear unit's Mul of equal shapes (SwiGLU: silu(gate) * up) after a constant-weight MatMul (its fifth input, multiplied after the activation); (ours, format 1.14) b_transposed: a constant weight stored [N, K], as checkpoints hold Linear weights",
    "Gemm": "C broadcast from scalar, (N), (M,1) or (M,N)",
    "Conv": "1-D to 3-D; groups, dilations, strides, pads, auto_pad; a zero Pad before it, a residual Add and an activation after it are fused into it",
    "BatchNormalization": "inference mode only; folded into a preceding Conv/Gemm when it can be",
    "Softmax": "opset < 13 semantics (flatten from axis) preserved",
    "LayerNormalization": "output Y only (Mean/InvStdDev outputs rejected); the converter also fuses LayerNorm written out as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div(/Mul/Add) into it",
    "Attention": "opsets 23-25: a KV cache as past_key/past_value inputs and present_key/present_value outputs (BNSD; the queries sit after the past, causal masks and windows aligned bottom-right), bool or float mask, causal, opset 25's left/right sliding windows, softcap, grouped-query heads; a query with every key masked gives 0; nonpad_kv_seqlen and the qk_matmul output are refused; also what the converter fuses MatMul/Softmax/MatMul attention into (operands then read in BSND layout, without the head transposes; fully masked rows give NaN there, as softmax does, unless the fused graph zeroed them)",
    "RotaryEmbedding": "opset 23, float32: (B, N, S, H) or (B, S, N * H) input, rotate-half or interleaved, partial rotary_embedding_dim, (max_position, rot / 2) tables with position_ids or (B, S, rot / 2) tables without (batch 1 broadcasts); also what the converter fuses transformers' rotate_half RoPE (Slice/Neg/Concat/Mul/Add) and GPT-J's interleaved rotate_every_two into",
    "RMSNormalization": "opset 23; statistics in float32 (another stash_type is refused); also what the converter fuses RMSNorm written as Pow/ReduceMean/Add/Sqrt/Reciprocal (or Div)/Mul into, and what com.microsoft SimplifiedLayerNormalization becomes",
    "MaxPool": "1-D to 3-D, pads, strides, dilations, ceil_mode, auto_pad; the Indices output is rejected",
    "AveragePool": "1-D to 3-D, pads, strides, dilations, ceil_mode (a window larger than the input makes one output over what it covers), count_include_pad, auto_pad",
    "Reshape": "0 copies a dim, one -1 inferred, allowzero",
    "Slice": "negative steps, clamping, empty results",
    "Gather": "int32/int64 indices, negative and scalar indices; an out-of-range index is an error",
    "Squeeze": "axes as attribute (opset < 13) or input",
    "Unsqueeze": "axes as attribute (opset < 13) or input",
    "Split": "sizes as attribute (opset < 13) or input; opset-18 num_outputs with a smaller last part",
    "Cast": "float to integer saturates (NaN gives 0)",
    "Mod": "fmod=0 follows the divisor's sign (integers); floats need fmod=1",
    "BitShift": "unsigned types; shifting by the bit width or more gives 0",
    "Max": "variadic with broadcasting; NaN propagates",
    "Min": "variadic with broadcasting; NaN propagates",
    "Round": "half to even",
    "Gelu": "approximate none or tanh (opset 20)",
    "ReduceLogSumExp": "computed as max + log(sum(exp(x - max)))",
    "ArgMax": "keepdims, select_last_index",
    "ArgMin": "keepdims, select_last_index",
    "Expand": "",
    "Shape": "start/end (opset 15)",
    "ConvTranspose": "1-D to 3-D; groups, dilations, strides, pads, output_padding, output_shape (larger than the full result: zeros at the end), auto_pad",
    "Resize": "nearest (all nearest_modes) / linear / cubic (cubic_coeff_a, exclude_outside) over any axes; every "
              "coordinate_transformation_mode incl. tf_crop_and_resize; antialias and keep_aspect_ratio_policy "
              "other than stretch are rejected",
    "Pad": "constant / reflect / edge / wrap; negative pads crop; axes input (opset 18)",
    "TopK": "ties keep the lower index first; output always sorted",
    "NonZero": "output size depends on data: per-run mode unless the input is constant",
    "NonMaxSuppression": "center_point_box 0 / 1; output size depends on the scores: per-run mode unless the inputs "
                         "are constants; equal scores keep the lower box index first, NaN scores come last",
    "GroupNormalization": "opset-18 per-group scale/bias are expanded to per-channel at convert time",
    "ScatterElements": "reduction none/add/mul/max/min",
    "ScatterND": "reduction none/add/mul/max/min",
    "Einsum": "any equation incl. ellipsis and implicit output; computed by direct summation (not yet fast)",
    "Compress": "output size depends on the condition: per-run mode unless it is constant",
    "MaxUnpool": "output_shape input or the default size",
    "LSTM": "all directions and layouts, peepholes, clip, input_forget, sequence_lens, every ONNX activation",
    "GRU": "all directions and layouts, linear_before_reset, clip, sequence_lens, every ONNX activation",
    "RNN": "all directions and layouts, clip, sequence_lens, every ONNX activation",
    "DFT": "real or complex input, dft_length, inverse, onesided, negative axes; the opset-20 axis input constant "
           "or computed at run time; direct O(n^2) transform; an inverse one-sided DFT (irfft) is refused",
    "STFT": "signal [batch, length] or [batch, length, 1 or 2], window, frame_length, onesided; direct O(n^2) "
            "transform per frame",
    "If": "a convert-time-constant condition is inlined; otherwise both branches are sub-graphs run at run time",
    "Loop": "trip count and/or condition, carried values, scan outputs; bodies run at run time",
    "Scan": "opset 9+ form: states, scan inputs with axes/directions, scan outputs with axes/directions",
}
for _op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceSumSquare"):
    NOTES.setdefault(_op, "axes as attribute or input; keepdims; noop_with_empty_axes")
