"""FULL_QUANT `bias_correction=true`: removes the mean error quantisation adds to each integer node's outputs.

A node computes y = W x + b in float and y' = Wq x' + b in integer arithmetic, where Wq is the dequantised weight
and x' the dequantised uint8 input (rounded, and clipped to the calibrated range). Rounding errors average out
over many products, but not always: a channel's weight errors need not sum to zero, and a clipped input range
(KL, REMOVAL_OUTLIER) shifts the input's mean. The expected output error is

    E[y' - y] = Wq E[x'] - W E[x]

(per output channel; E over the calibration samples and, for Conv, over pixels), which the node's bias then
subtracts. The means come from the calibration run's float inputs and their fake-quantised copies. A Conv's
input mean is taken per channel over all pixels, so border outputs that read the zero padding get the interior's
correction (the error of that approximation is the correction's own size times the border fraction)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node


def _per_input_channel(node: Node, values: list[np.ndarray]) -> np.ndarray:
    """The calibration inputs as rows of reduction-axis channels: Conv's channel axis 1, MatMul/Gemm's last."""
    axis = 1 if node.op_type == "Conv" else -1
    return np.concatenate([np.moveaxis(v.astype(np.float32), axis, -1).reshape(-1, v.shape[axis]) for v in values])


def fake_quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """What the integer kernel multiplies, in float: the uint8 code of x (cpu/quantized/qgemm QuantizeRowsU8) dequantised."""
    codes = np.clip(np.rint(x * np.float32(1.0 / scale)) + zero_point, 0, 255)
    return ((codes - zero_point) * scale).astype(np.float32)


def output_error(node: Node, weight: np.ndarray, decoded: np.ndarray, mean_x: np.ndarray,
                 mean_xq: np.ndarray) -> np.ndarray:
    """E[y' - y] per output channel, from the float and dequantised weights and the input channel means."""
    if node.op_type == "Conv":   # [O, C, k...]: sum the taps of each input channel first
        w = weight.reshape(weight.shape[0], weight.shape[1], -1).sum(axis=2, dtype=np.float64)
        wq = decoded.reshape(decoded.shape[0], decoded.shape[1], -1).sum(axis=2, dtype=np.float64)
        if int(node.attrs.get("group", 1)) > 1:   # depthwise [C, 1, k...]: output channel c reads input channel c
            return wq[:, 0] * mean_xq - w[:, 0] * mean_x
        return wq @ mean_xq - w @ mean_x
    if node.op_type == "Gemm" and node.attrs.get("trans_b"):   # [N, K]
        return decoded.astype(np.float64) @ mean_xq - weight.astype(np.float64) @ mean_x
    return mean_xq @ decoded.astype(np.float64) - mean_x @ weight.astype(np.float64)   # [K, N]


def correct_bias(graph: Graph, node: Node, weight: np.ndarray, decoded: np.ndarray, values: list[np.ndarray],
                 scale: float, zero_point: int, float_values: dict[str, np.ndarray]) -> None:
    """Gives `node` a bias that cancels its mean quantisation error on the calibration inputs `values`; the
    float model's value of that bias goes to float_values (the accuracy report's reference runs it)."""
    x = _per_input_channel(node, values)
    mean_x = x.mean(axis=0, dtype=np.float64)
    mean_xq = fake_quantize(x, scale, zero_point).mean(axis=0, dtype=np.float64)
    error = output_error(node, weight, decoded, mean_x, mean_xq)
    old_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    old = graph.constant(old_name) if old_name else np.zeros(error.shape[0], np.float32)
    new_name = graph.add_constant(f"{node.name}_bias_corrected", (old.astype(np.float64) - error).astype(np.float32))
    float_values[new_name] = float_values.get(old_name, old) if old_name else old
    if len(node.inputs) > 2:
        node.inputs[2] = new_name
    else:
        node.inputs.append(new_name)
    if old_name and not any(old_name in n.inputs for n in graph.nodes) and old_name not in graph.outputs:
        del graph.tensors[old_name]   # read by this node only: the corrected copy replaces it
