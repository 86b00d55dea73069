"""Completes activation shapes the source model left unknown, from fully known input shapes, through the
operators whose output shape follows from their inputs' alone: Conv, elementwise activations, binary
elementwise ops and global pooling.

Exporters leave dims unknown wherever a shape was computed at run time: Hugging Face's MobileNetV2 computes its
TensorFlow-style "SAME" padding from the input's shape, so every tensor after the first Pad is [-1, C, -1, -1]
even with a fixed --inputShape. Once constant folding and pad folding have turned those Pads into Conv pads, the
sizes are plain arithmetic again; with them known, residual_fusion can prove a block's Add adds equal shapes.
A dim the model states is never changed; a computed dim that disagrees with one leaves the tensor as it was."""
from __future__ import annotations

from ..conv_window import conv_window
from ..ir import Graph, Node

_UNARY = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "Elu", "Selu",
          "Softplus", "Neg", "Abs", "Sqrt", "Exp", "Erf", "Identity", "Dropout"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"}


def _known(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def _conv_shape(graph: Graph, node: Node, x: list[int]) -> list[int] | None:
    w = graph.constant(node.inputs[1]) if len(node.inputs) > 1 else None
    if w is None or w.ndim != len(x) or len(x) < 3:
        return None
    window = conv_window(node.attrs, list(node.attrs.get("kernel_shape") or w.shape[2:]), x[2:])
    if window is None:
        return None
    sizes = [window.output_size(i, size) for i, size in enumerate(x[2:])]
    return None if None in sizes else [x[0], int(w.shape[0])] + sizes


def _broadcast(a: list[int], b: list[int]) -> list[int] | None:
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    out = []
    for p, q in zip(a, b):
        if p != q and 1 not in (p, q):
            return None
        out.append(max(p, q) if 1 in (p, q) else p)
    return out


def _output_shape(graph: Graph, node: Node) -> list[int] | None:
    shapes = [graph.tensors[i].shape if i and i in graph.tensors else None for i in node.inputs]
    op = node.op_type
    if op == "Conv" and shapes and _known(shapes[0]):
        return _conv_shape(graph, node, list(shapes[0]))
    if op in _UNARY and shapes and _known(shapes[0]):
        return list(shapes[0])
    if op in _BINARY and len(shapes) == 2 and _known(shapes[0]) and _known(shapes[1]):
        return _broadcast(list(shapes[0]), list(shapes[1]))
    if op in ("GlobalAveragePool", "GlobalMaxPool") and _known(shapes[0]) and len(shapes[0]) >= 3:
        return list(shapes[0][:2]) + [1] * (len(shapes[0]) - 2)
    return None


def _compatible(stated, computed: list[int]) -> bool:
    if stated is None:
        return True
    return len(stated) == len(computed) and all(
        not (isinstance(s, int) and s >= 0) or s == c for s, c in zip(stated, computed))


def complete_static_shapes(graph: Graph) -> int:
    """Fills the unknown dims of single-output nodes' outputs, in graph order; returns how many tensors changed."""
    changed = 0
    graph.topological_sort()
    for node in graph.nodes:
        if len(node.outputs) != 1 or not node.outputs[0] or node.outputs[0] not in graph.tensors:
            continue
        t = graph.tensors[node.outputs[0]]
        if _known(t.shape):
            continue
        shape = _output_shape(graph, node)
        if shape is None or not _compatible(t.shape, shape):
            continue
        t.shape = shape
        changed += 1
    return changed
