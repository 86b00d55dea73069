"""Fuses `Conv -> Add(other)` into the Conv (a fourth input, `residual`), so the addition happens in the
convolution's epilogue while each output tile is in cache, instead of as a second pass over memory.
A following Relu/Clip is then fused by activation_fusion (bias, residual, activation: ResNet's
bottleneck tail). Fires only when both operands have the same fully known shape (no broadcasting)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def fuse_residual_add(graph: Graph) -> int:
    fused = 0
    consumers = graph.consumers()
    producers = graph.producers()
    for add in list(graph.nodes):
        if add.op_type != "Add" or len(add.inputs) != 2:
            continue
        for pos in (0, 1):
            src, other = add.inputs[pos], add.inputs[1 - pos]
            conv = producers.get(src)
            if (conv is None or conv.op_type != "Conv" or conv.attrs.get("activation") or len(conv.inputs) > 3
                    or src in graph.outputs or len(consumers.get(src, [])) != 1 or other == src):
                continue
            t_conv, t_other = graph.tensors[src], graph.tensors[other]
            if t_conv.dtype != np.float32 or t_other.dtype != np.float32:
                continue
            if not _static(t_conv.shape) or list(t_conv.shape) != list(t_other.shape or []):
                continue
            if graph.constant(conv.inputs[1]) is None:
                continue
            conv.inputs = list(conv.inputs) + [""] * (3 - len(conv.inputs)) + [other]
            conv.outputs = [add.outputs[0]]
            graph.nodes.remove(add)
            fused += 1
            consumers = graph.consumers()
            producers = graph.producers()
            break
    if fused:
        graph.topological_sort()   # a Conv now reads the other branch, which may come later in the list
    return fused
