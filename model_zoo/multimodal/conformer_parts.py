"""What the Conformer speech encoders' graph builders share (FireRedASR-AED, WeNet): the conv2d front end that
subsamples fbank frames 4x, their sinusoidal position tables, and products with weights read as arrays (kernel-1
convolutions' weights, squeezed)."""
from __future__ import annotations

import numpy as np

from converter.deferred import DeferredArray

from ..graph_builder import GraphBuilder


def sinusoid_table(length: int, d: int, sign: float = 1.0) -> np.ndarray:
    """[length, d] sinusoidal positions as both projects' PositionalEncoding: sin at even, cos at odd columns of
    position x 10000^(-2i / d) (sign -1: negative positions)."""
    position = np.arange(length, dtype=np.float32)[:, None] * np.float32(sign)
    freq = np.exp(np.arange(0, d, 2, dtype=np.float32) * np.float32(-(np.log(10000.0) / d)))
    pe = np.zeros((length, d), np.float32)
    pe[:, 0::2], pe[:, 1::2] = np.sin(position * freq), np.cos(position * freq)
    return pe


def conv2d_subsampling(b: GraphBuilder, frames: str, convs: tuple[str, str], out: str, idim: int, d: int) -> str:
    """frames [1, T, idim] -> [1, T', d]: two 3x3 stride-2 convolutions without padding, each with ReLU (channel
    counts from the weights), the channels and remaining frequencies flattened per step (channel-major, as the
    projects' view(N, T, C x F) after the transpose), then the linear layer `out`."""
    x = b.node("Unsqueeze", [frames, b.const("channel_axis", np.array([1], np.int64))], hint="image")   # [1,1,T,F]
    c_in, freq = 1, idim
    for j, prefix in enumerate(convs, start=1):
        channels = b.w_shape(prefix + ".weight")[0]
        w = b.const(f"sub{j}_w", b.weight(prefix + ".weight", (channels, c_in, 3, 3)))
        x = b.node("Conv", [x, w, b.const(f"sub{j}_b", b.weight(prefix + ".bias", (channels,)))],
                   {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0] * 4, "dilations": [1, 1], "group": 1},
                   hint=f"sub{j}")
        x = b.node("Relu", [x], hint=f"sub{j}_relu")
        c_in, freq = channels, (freq - 1) // 2
    x = b.node("Transpose", [x], {"perm": [0, 2, 1, 3]}, hint="steps_first")                          # [1,T',C,F']
    x = b.node("Reshape", [x, b.const("step_rows", np.array([1, -1, c_in * freq], np.int64))], hint="step_rows")
    return b.linear(x, out, "sub_out", c_in * freq, d)


def matmul_array(b: GraphBuilder, x: str, w: np.ndarray, hint: str, bias: np.ndarray | None = None,
                 activation: str | None = None, residual: str = "", multiplier: str = "") -> str:
    """x @ w^T (+ bias) for a weight read here ([out, in]), with the fused MatMul's activation / residual /
    multiplier."""
    name, attrs = b.linear_weight(f"{hint}_w", DeferredArray.of(np.ascontiguousarray(w, np.float32)))
    if activation:
        attrs["activation"] = activation
    bias_name = "" if bias is None else b.const(f"{hint}_b", np.ascontiguousarray(bias, np.float32))
    return b.node("MatMul", [x, name, bias_name, residual, multiplier], attrs, hint=hint)
