"""The ONNX backend interface (`onnx.backend.base.Backend`) over converter + runtime.

    import onnx, lite.onnx_backend as backend
    rep = backend.prepare(onnx.load("model.onnx"))      # converts to .ms and builds it on the CPU
    outputs = rep.run([x])                              # a tuple of numpy arrays, in graph-output order

This is the interface ONNX's own backend test suite (`onnx.backend.test`) drives; tests/onnx_backend runs
that suite against lite in CI. Anything the converter or the runtime refuses surfaces as their exception
(`converter.ConverterError`, `NotImplementedError`, `lite.ModelFormatError`, `ValueError`, `TypeError`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from . import Context, Model, ModelType


class LiteBackendRep(BackendRep):
    """A converted, built model. `run` takes the graph inputs in order (or a dict name -> array)."""

    def __init__(self, model: Model, output_names: list[str], input_names: list[str]):
        self.model = model
        self.output_names = output_names
        self.input_names = input_names

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds: Any = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = [np.asarray(v) for v in inputs]
        outputs = [t.get_data_to_numpy() for t in self.model.predict(feeds)]
        return namedtupledict("Outputs", self.output_names)(*outputs)


class LiteBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", threads: int = 1,
                **kwargs: Any) -> LiteBackendRep:
        """Converts `model` (a ModelProto, its bytes or a path) to .ms in a temporary folder and builds it."""
        if not cls.supports_device(device):
            raise NotImplementedError(f"lite's ONNX backend runs on CPU, not '{device}'")
        import converter   # the converter imports lite; import it only when a model is prepared

        if isinstance(model, (bytes, bytearray)):
            model = onnx.load_model_from_string(bytes(model))
        elif isinstance(model, (str, os.PathLike)):
            model = onnx.load(os.fspath(model))
        workdir = tempfile.mkdtemp(prefix="lite_backend_")
        try:
            src = os.path.join(workdir, "model.onnx")
            onnx.save(model, src)
            ms = converter.Converter().convert(converter.FmkType.ONNX, src, os.path.join(workdir, "model"))
            ctx = Context()
            ctx.cpu.thread_num = threads
            built = Model()
            built.build_from_file(ms.output_file, ModelType.MINDIR_LITE, ctx)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)   # the model holds its own mapping of the file
        inits = {i.name for i in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        return LiteBackendRep(built, [o.name for o in model.graph.output], inputs)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 opset_version: int | None = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Runs one node on the given inputs (wrapped into a one-node model with those inputs' types)."""
        from onnx import helper

        names = [n for n in node.input if n]
        if len(names) != len(inputs):
            raise ValueError(f"node '{node.name or node.op_type}' names {len(names)} inputs, got {len(inputs)} arrays")
        arrays = [np.asarray(x) for x in inputs]
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays)]
        graph_outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opsets = [helper.make_opsetid(node.domain or "", opset_version or onnx.defs.onnx_opset_version())]
        if node.domain:
            opsets.append(helper.make_opsetid("", onnx.defs.onnx_opset_version()))
        model = helper.make_model(graph, opset_imports=opsets)
        return cls.run_model(model, arrays, device, **kwargs)


prepare = LiteBackend.prepare
run_model = LiteBackend.run_model
run_node = LiteBackend.run_node
supports_device = LiteBackend.supports_device
is_compatible = LiteBackend.is_compatible
