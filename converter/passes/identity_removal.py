"""Deletes Identity/Dropout copies (imported as a same-type Cast marked `_identity`).

A copy whose output is a graph output keeps the output's name by renaming its producer's output;
where that is impossible (input is a graph input, a constant or another output) the copy stays.
"""
from __future__ import annotations

from ..ir import Graph


def remove_identities(graph: Graph) -> int:
    removed = 0
    for node in list(graph.nodes):
        if not node.attrs.get("_identity"):
            continue
        src, dst = node.inputs[0], node.outputs[0]
        if dst not in graph.outputs:
            graph.nodes.remove(node)
            graph.replace_uses(dst, src)
            removed += 1
            continue
        producer = graph.producers().get(src)
        if producer is None or src in graph.outputs:
            continue
        # Rename src -> dst at its producer and every reader.
        graph.nodes.remove(node)
        producer.outputs = [dst if o == src else o for o in producer.outputs]
        for n in graph.nodes:
            n.inputs = [dst if i == src else i for i in n.inputs]
        graph.tensors[dst].dtype = graph.tensors[src].dtype
        removed += 1
    return removed
