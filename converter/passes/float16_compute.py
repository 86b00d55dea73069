"""Runs float16 models in float32 inside: float16 constants are widened, internal float16 tensors
become float32, and Casts at the graph edges keep the model's float16 inputs and outputs. The CPU
kernels compute in float32 (as ONNX Runtime's CPU provider does for most float16 operators), so the
results are at least as accurate as float16 arithmetic."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Tensor

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def lower_float16(graph: Graph) -> int:
    if not any(t.dtype == F16 for t in graph.tensors.values()):
        return 0
    changed = 0
    # A paged Attention's KV cache (inputs 4 and 5) is written in place: it stays float16, read and written as such
    # by the kernel (a float32 copy would take the writes and lose them).
    caches = {n.inputs[i] for n in graph.nodes if n.op_type == "Attention" and n.attrs.get("paged") for i in (4, 5)}
    edge_inputs = [n for n in graph.inputs if graph.tensors[n].dtype == F16 and n not in caches]
    edge_outputs = [n for n in graph.outputs if graph.tensors[n].dtype == F16]
    for name, t in list(graph.tensors.items()):
        if t.dtype != F16 or name in edge_inputs or name in caches:
            continue
        t.dtype = F32
        if t.data is not None:
            t.data = t.data.astype(F32)
        changed += 1
    for node in graph.nodes:
        if node.op_type == "Cast" and np.dtype(node.attrs.get("to")) == F16:
            node.attrs["to"] = F32
            changed += 1
    prologue = []
    for name in edge_inputs:   # the graph input stays float16; everything reads a float32 copy
        wide = graph.unique_name(f"{name}_f32")
        graph.tensors[wide] = Tensor(wide, F32, graph.tensors[name].shape)
        for n in graph.nodes:
            n.inputs = [wide if i == name else i for i in n.inputs]
        prologue.append(Node(f"{name}_to_f32", "Cast", [name], [wide], {"to": F32}))
    for name in edge_outputs:   # the graph output is float16 again, computed from a float32 tensor
        inner = graph.unique_name(f"{name}_f32")
        graph.tensors[inner] = Tensor(inner, F32, graph.tensors[name].shape)
        for n in graph.nodes:
            n.outputs = [inner if o == name else o for o in n.outputs]
            n.inputs = [inner if i == name else i for i in n.inputs]
        if name in edge_inputs:   # an input passed straight through
            continue
        graph.tensors[name].dtype = F16
        graph.nodes.append(Node(f"{name}_to_f16", "Cast", [inner], [name], {"to": F16}))
    graph.nodes[:0] = prologue
    return changed + len(prologue) + len(edge_outputs)
