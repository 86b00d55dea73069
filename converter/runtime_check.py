"""Refuses at convert time what the runtime would refuse for a reason visible here, so a converted model never
fails at predict for something the converter could have seen:

- a node whose (operator, dtype) has no CPU kernel: the runtime looks kernels up by the operator and the dtype of
  the node's first input (lite/src/core/model.cc); this asks its registry the same question for every node,
  sub-graphs included, and reports every miss at once;
- with every input shape fixed, the written file is built once in the runtime before it is renamed into place:
  its shape inference and every kernel's checks (windows larger than the input, axes out of range, shapes that do
  not broadcast) run on the real shapes, and a refusal there becomes the converter's error."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .ir import ConverterError, Graph
from .writer import SUBGRAPH_ATTRS


def _kernel_keys(target: str) -> set[tuple[str, str]]:
    import lite
    return set(lite._lite.registered_kernels(target))


def _misses(graph: Graph, keys: set[tuple[str, str]], where: str) -> list[str]:
    misses = []
    for node in graph.nodes:
        first = next((i for i in node.inputs if i), None)
        dtype = np.dtype(graph.tensors[first].dtype).name if first and first in graph.tensors else None
        if dtype is not None and (node.op_type, dtype) not in keys and (node.op_type, "any") not in keys:
            misses.append(f"{node.op_type}({dtype}) at node '{node.name}'{where}")
        for attr in SUBGRAPH_ATTRS:
            body = node.attrs.get(attr)
            if isinstance(body, Graph):
                misses += _misses(body, keys, f" in {attr} of '{node.name}'")
    return misses


def check_runtime_kernels(graph: Graph, target: str = "cpu") -> None:
    misses = _misses(graph, _kernel_keys(target), "")
    if misses:
        shown = "; ".join(misses[:20]) + (f"; ... ({len(misses)} in all)" if len(misses) > 20 else "")
        raise ConverterError(f"the {target.upper()} runtime has no kernel for: {shown}. See docs/ops.md for the "
                             "dtypes each operator runs in")


def build_check(graph: Graph) -> Callable[[str], None] | None:
    """A `verify` for write_ms that builds the file in the runtime, or None when an input shape is open (the
    runtime then prepares per shape at predict, and checks there)."""
    for name in graph.inputs:
        shape = graph.tensors[name].shape
        if shape is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
            return None

    def verify(path: str) -> None:
        import lite
        model = lite.Model()
        try:
            model.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
        except (ValueError, TypeError, NotImplementedError) as e:
            raise ConverterError(f"the runtime refuses the converted model at its input shapes: {e}") from None
        except MemoryError as e:
            raise ConverterError(f"the converted model does not fit in memory at its input shapes: {e}") from None
    return verify
