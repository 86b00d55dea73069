"""The optimised graph and the per-pass report as one JSON file (`converter_lite --dumpGraph=FILE`,
`Converter.convert(..., dump_graph=FILE)`): what each pass did, the operator counts before and after, and
every node with its inputs, outputs and attributes, for reviewing what the converter made of a model."""
from __future__ import annotations

import collections
import json
import os
import tempfile
from typing import Any

import numpy as np

from .ir import Graph
from .passes import PassReport


def op_counts(graph: Graph) -> dict[str, int]:
    return dict(sorted(collections.Counter(n.op_type for n in graph.nodes).items()))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Graph):
        return {"subgraph": value.name, "nodes": len(value.nodes)}
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 64 else {"array": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, np.dtype) or isinstance(value, type):
        return str(np.dtype(value))
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _tensor(graph: Graph, name: str) -> dict[str, Any]:
    t = graph.tensors.get(name)
    return {"name": name, "dtype": str(t.dtype) if t is not None else None,
            "shape": list(t.shape) if t is not None and t.shape is not None else None}


def graph_report(graph: Graph, report: PassReport, before: dict[str, int], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        **meta,
        "passes": [{"name": k, "fired": report.fired[k], "ms": round(report.seconds.get(k, 0.0) * 1e3, 3)}
                   for k in report.fired],
        "op_counts_before": before,
        "op_counts_after": op_counts(graph),
        "graph": {
            "inputs": [_tensor(graph, i) for i in graph.inputs],
            "outputs": [_tensor(graph, o) for o in graph.outputs],
            "nodes": [{"name": n.name, "op": n.op_type, "inputs": list(n.inputs), "outputs": list(n.outputs),
                       "attrs": _jsonable(n.attrs)} for n in graph.nodes],
        },
    }


def write_json_atomically(data: dict[str, Any], path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".dump-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
