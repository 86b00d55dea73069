"""The calibration run: the graph on the calibration samples in the lite runtime, with chosen tensors as its
outputs, so the quantisers see the values each layer reads."""
from __future__ import annotations

import dataclasses
import os
import tempfile

import numpy as np

from ..ir import Graph
from ..writer import write_ms
from .config import QuantConfig
from .report import run_samples, sample_inputs


def observe(graph: Graph, names: list[str], cfg: QuantConfig) -> dict[str, list[np.ndarray]]:
    """Each named tensor's values on the calibration samples, one array per sample. Only the nodes those tensors
    need run (the model is cut after them)."""
    samples, _ = sample_inputs(graph, cfg)
    names = list(dict.fromkeys(names))
    computed = [n for n in names if n not in graph.inputs]
    runs = [{} for _ in samples]
    if computed:
        probe = _cut(graph, computed)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "calibration.ms")
            write_ms(probe, path)
            runs = run_samples(path, samples, probe.outputs)
    return {name: [r[name] if name in r else s[name] for r, s in zip(runs, samples)] for name in names}


def _cut(graph: Graph, outputs: list[str]) -> Graph:
    """The part of the graph that computes `outputs` (its inputs all kept: the samples feed every one)."""
    needed = set(outputs)
    live = []
    for node in reversed(topologically_sorted(graph).nodes):
        if any(o in needed for o in node.outputs if o):
            live.append(node)
            needed.update(i for i in node.inputs if i)
    if any(isinstance(v, Graph) for node in live for v in node.attrs.values()):
        used = set(graph.tensors)   # a control-flow body may read any outer tensor
    else:
        used = needed | set(graph.inputs)
    return dataclasses.replace(graph, nodes=list(reversed(live)), outputs=list(outputs),
                               tensors={n: t for n, t in graph.tensors.items() if n in used})


def topologically_sorted(graph: Graph) -> Graph:
    """A copy of the graph (sharing its nodes and tensors) with its node list in topological order."""
    ordered = dataclasses.replace(graph, nodes=list(graph.nodes))
    ordered.topological_sort()
    return ordered
