"""In-memory graph IR that the frontends produce, the passes rewrite and the writer serialises.

Operators and attributes are already in the runtime's canonical form (see docs/ops.md): the
frontends normalise each source format's variants (attribute vs. input forms, opset differences).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class ConverterError(Exception):
    """A model that cannot be converted; the message says which node and why."""


@dataclass
class Tensor:
    name: str
    dtype: np.dtype
    shape: list[int] | None = None      # None: rank unknown; -1: dynamic dim
    data: np.ndarray | None = None      # set for constants
    # How the file stores a float32 constant when not as float32 (quantization.encoding.StoredWeight:
    # float16/bfloat16 halves or int8/int4 codes with scales); set by the quantisation step, after the passes.
    stored: Any = None
    # (scale, zero_point) of an activation the file carries as uint8 codes, value = (code - zero_point) * scale:
    # the output of an integer Conv read only by integer Convs (FULL_QUANT, quantization/integer_quant.py).
    # dtype is then uint8; the float model's tensor is float32.
    act_quant: tuple[float, int] | None = None

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]                   # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    name: str = "main"
    tensors: dict[str, Tensor] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    # Dims as the source model declared them (value_info): ints, symbol names ("batch", "s") or None where
    # unknown. Equal symbols mean equal sizes, which lets passes prove what plain -1 dims cannot.
    symbolic_shapes: dict[str, list[int | str | None]] = field(default_factory=dict)

    # -- queries ---------------------------------------------------------------------------
    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def constant(self, name: str) -> np.ndarray | None:
        t = self.tensors.get(name) if name else None
        return None if t is None else t.data

    # -- edits -----------------------------------------------------------------------------
    def add_constant(self, hint: str, value: np.ndarray) -> str:
        name = self.unique_name(hint)
        value = np.asarray(value, order="C")
        self.tensors[name] = Tensor(name, value.dtype, list(value.shape), value)
        return name

    def unique_name(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.tensors:
            k += 1
            name = f"{hint}_{k}"
        return name

    def replace_uses(self, old: str, new: str) -> None:
        """Points every reader of `old` (nodes and graph outputs) at `new`."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove_unused_tensors(self) -> None:
        used = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            used.update(i for i in n.inputs if i)
            used.update(o for o in n.outputs if o)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}

    def topological_sort(self) -> None:
        available = set(self.inputs) | {k for k, t in self.tensors.items() if t.is_constant}
        pending, ordered = list(self.nodes), []
        while pending:
            progress = []
            for n in pending:
                if all((not i) or i in available for i in n.inputs):
                    ordered.append(n)
                    available.update(o for o in n.outputs if o)
                else:
                    progress.append(n)
            if len(progress) == len(pending):
                missing = sorted({i for n in pending for i in n.inputs if i and i not in available})
                raise ConverterError(f"graph has a cycle or reads undefined tensors: {missing[:10]}")
            pending = progress
        self.nodes = ordered
