"""Fuses a residual `Add` into the producer's epilogue, so the addition happens while each output tile is
in cache instead of as a second pass over memory:

- `Conv -> Add(other)`: the Conv's fourth input, `residual`. Only when both operands have the same fully
  known shape (the convolution kernels add it tile by tile, with no broadcasting). A following Relu/Clip
  is then fused by activation_fusion (bias, residual, activation: ResNet's bottleneck tail).
- `MatMul -> Add(other)`: the MatMul's fourth input, an addend with Add's broadcasting semantics (the
  kernel adds it in the GEMM's registers when it has the product's shape, and after the product
  otherwise), so it fires whatever the shapes: transformers' `dense(x) + residual` before each norm.

Neither fires when the producer already has an activation (that would have to come after the sum)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def _fuse_into_matmul(graph: Graph, add, mm, src: str, other: str) -> bool:
    if mm.attrs.get("activation") or len(mm.inputs) > 3:
        return False
    if graph.tensors[src].dtype != np.float32 or graph.tensors[other].dtype != np.float32:
        return False
    mm.inputs = list(mm.inputs) + [""] * (3 - len(mm.inputs)) + [other]
    mm.outputs = [add.outputs[0]]
    graph.nodes.remove(add)
    return True


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
            if conv is None or src in graph.outputs or len(consumers.get(src, [])) != 1 or other == src:
                continue
            if conv.op_type == "MatMul":
                if _fuse_into_matmul(graph, add, conv, src, other):
                    fused += 1
                    consumers = graph.consumers()
                    producers = graph.producers()
                    break
                continue
            if conv.op_type != "Conv" or conv.attrs.get("activation") or len(conv.inputs) > 3:
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
