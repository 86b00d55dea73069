"""Propagates element types from inputs and constants through every node (the file stores them
and the runtime checks its kernels against them)."""
from __future__ import annotations

from ..ir import ConverterError, Graph
from ..ops import output_dtypes


def infer_dtypes(graph: Graph) -> int:
    graph.topological_sort()
    changed = 0
    for node in graph.nodes:
        in_dtypes = []
        for name in node.inputs:
            if not name:
                in_dtypes.append(None)
                continue
            t = graph.tensors.get(name)
            if t is None:
                raise ConverterError(f"node '{node.name}' ({node.op_type}) reads undefined tensor '{name}'")
            in_dtypes.append(t.dtype)
        try:
            outs = output_dtypes(node, in_dtypes)
        except (IndexError, KeyError, TypeError) as e:
            raise ConverterError(f"node '{node.name}' ({node.op_type}): malformed inputs or attributes ({e})") from None
        for name, dt in zip(node.outputs, outs):
            if name and graph.tensors[name].dtype != dt:
                graph.tensors[name].dtype = dt
                changed += 1
    return changed
