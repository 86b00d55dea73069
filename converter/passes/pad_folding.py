"""Folds a zero constant Pad of the spatial dims into the Conv that consumes it (Conv pads the same way,
without writing a padded copy of its input). Exporters emit such Pads for TensorFlow-style "SAME"
padding (MobileNet, EfficientNet) and for explicit padding layers."""
from __future__ import annotations

import numpy as np

from ..ir import Graph

_NOTSET = 0


def _spatial_pads(graph: Graph, pad) -> list[int] | None:
    """Begin/end pads of the spatial dims (ONNX order) when the Pad is a zero constant pad of those
    dims only; None otherwise."""
    if pad.attrs.get("mode", 0) != 0:
        return None
    pads = graph.constant(pad.inputs[1]) if len(pad.inputs) > 1 and pad.inputs[1] else None
    if pads is None:
        return None
    if len(pad.inputs) > 2 and pad.inputs[2]:
        value = graph.constant(pad.inputs[2])
        if value is None or value.size != 1 or float(value.reshape(-1)[0]) != 0.0:
            return None
    shape = graph.tensors[pad.inputs[0]].shape
    if shape is None:
        return None
    rank = len(shape)
    pads = [int(p) for p in pads.reshape(-1)]
    if len(pad.inputs) > 3 and pad.inputs[3]:   # opset 18 axes: expand to every dim
        axes = graph.constant(pad.inputs[3])
        if axes is None:
            return None
        full = [0] * (2 * rank)
        for i, ax in enumerate(int(a) % rank for a in axes.reshape(-1)):
            full[ax], full[ax + rank] = pads[i], pads[i + len(axes.reshape(-1))]
        pads = full
    if len(pads) != 2 * rank or rank < 3 or any(p < 0 for p in pads):
        return None
    if pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
        return None   # batch or channel padding is not a convolution's
    return pads[2:rank] + pads[rank + 2:]


def fold_pads_into_conv(graph: Graph) -> int:
    folded = 0
    consumers = graph.consumers()
    producers = graph.producers()
    for conv in list(graph.nodes):
        if conv.op_type != "Conv" or conv.attrs.get("auto_pad", _NOTSET) != _NOTSET:
            continue
        src = conv.inputs[0]
        pad = producers.get(src)
        if pad is None or pad.op_type != "Pad" or src in graph.outputs or len(consumers.get(src, [])) != 1:
            continue
        if graph.tensors[src].dtype not in (np.float32, np.float16):
            continue
        extra = _spatial_pads(graph, pad)
        if extra is None:
            continue
        nd = len(extra) // 2
        own = list(conv.attrs.get("pads") or [0] * (2 * nd))
        if len(own) != 2 * nd:
            continue
        conv.attrs["pads"] = [a + b for a, b in zip(own, extra)]
        conv.inputs[0] = pad.inputs[0]
        graph.nodes.remove(pad)
        folded += 1
        consumers = graph.consumers()
        producers = graph.producers()
    return folded
