"""The calibration run: the graph on the calibration samples in the lite runtime, with chosen tensors as its
outputs, so the quantisers see the values each layer reads."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph
from ..passes.dead_code import remove_dead_nodes
from ..writer import ms_in_memory
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
        with ms_in_memory(probe) as (path, _):   # in memory: no copy of the model on disk
            runs = run_samples(path, samples, probe.outputs)
    return {name: [r[name] if name in r else s[name] for r, s in zip(runs, samples)] for name in names}


def _cut(graph: Graph, outputs: list[str]) -> Graph:
    """The part of the graph that computes `outputs` (its inputs all kept: the samples feed every one)."""
    cut = dataclasses.replace(graph, nodes=list(graph.nodes), outputs=list(outputs))
    remove_dead_nodes(cut)   # sorts and sweeps the copy's node list; the nodes themselves are not changed
    if any(isinstance(v, Graph) for node in cut.nodes for v in node.attrs.values()):
        return cut   # a control-flow body may read any outer tensor
    # every output of a kept node stays, read or not: a Split whose other part only feeds nodes past the cut still
    # writes it (YOLOv8's head: the boxes' part calibrated, the classes' part cut away)
    used = ({i for node in cut.nodes for i in node.inputs if i} | {o for node in cut.nodes for o in node.outputs if o}
            | set(outputs) | set(graph.inputs))
    cut.tensors = {n: t for n, t in graph.tensors.items() if n in used}
    return cut


def topologically_sorted(graph: Graph) -> Graph:
    """A copy of the graph (sharing its nodes and tensors) with its node list in topological order."""
    ordered = dataclasses.replace(graph, nodes=list(graph.nodes))
    ordered.topological_sort()
    return ordered
