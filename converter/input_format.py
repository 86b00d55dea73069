"""converter_lite --inputDataFormat=NHWC: the written model takes its 4-D inputs channels-last (images as most
pipelines hold them) and transposes them to the NCHW its operators read, as MindSpore Lite's converter does."""
from __future__ import annotations

import numpy as np

from .ir import ConverterError, Graph, Node, Tensor

INPUT_FORMATS = ("NCHW", "NHWC")


def apply_input_format(graph: Graph, fmt: str) -> list[str]:
    """Makes every 4-D floating input NHWC (fmt "NHWC"); returns the inputs changed. "NCHW" leaves the graph as it is."""
    fmt = fmt.upper()
    if fmt not in INPUT_FORMATS:
        raise ConverterError(f"--inputDataFormat must be NCHW or NHWC, got {fmt!r}")
    if fmt == "NCHW":
        return []
    changed = []
    for name in graph.inputs:
        t = graph.tensors[name]
        if t.shape is None or len(t.shape) != 4 or not np.issubdtype(t.dtype, np.floating):
            continue
        inner = graph.unique_name(f"{name}_nchw")
        graph.tensors[inner] = Tensor(inner, t.dtype, list(t.shape))
        graph.replace_uses(name, inner)
        n, c, h, w = t.shape
        t.shape = [n, h, w, c]
        if name in graph.symbolic_shapes:
            sym = graph.symbolic_shapes[name]
            graph.symbolic_shapes[name] = [sym[0], sym[2], sym[3], sym[1]] if len(sym) == 4 else sym
        graph.nodes.insert(0, Node(graph.unique_name(f"{name}_to_nchw"), "Transpose", [name], [inner],
                                   {"perm": [0, 3, 1, 2]}))
        changed.append(name)
    if not changed:
        raise ConverterError("--inputDataFormat=NHWC: the model has no 4-D floating-point input to take channels-last")
    return changed
