"""ONNX -> IR: loads the model (with external data), fixes input shapes, runs ONNX shape inference
and rewrites every node into the runtime's canonical operator form."""
from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from ..dtypes import numpy_from_onnx
from ..ir import ConverterError, Graph, Node, Tensor
from ..ops import SUPPORTED
from .onnx_quantized import QuantizedImporter, dequantize_constant, matmul_nbits_weight

MIN_OPSET = 11
# The newest opset whose operators this importer was checked against (onnx 1.23's, with the backend suite): a model
# of a newer one converts with a warning naming the operators whose definitions were last checked at this opset.
NEWEST_CHECKED_OPSET = 28
# com.microsoft operators (ONNX Runtime's transformer optimiser) imported by decomposition.
MS_CONTRIB_OPS = {"FastGelu", "BiasGelu", "QuickGelu", "FusedMatMul", "SkipLayerNormalization",
                  "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization", "MultiHeadAttention",
                  "RotaryEmbedding", "Attention", "GroupQueryAttention", "MatMulNBits", "DynamicQuantizeLSTM"}
# Operators removed or replaced while importing (not runtime operators).
_IMPORT_ONLY = {"Identity", "Dropout", "Constant", "DequantizeLinear", "CastLike"}
# Quantised operators (QDQ activations and the QOperator form) imported as float arithmetic: the same values
# the integer kernels compute, up to float rounding of the accumulations (see onnx_quantized.py).
_QUANTIZED_OPS = {"QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearMatMul",
                  "QLinearConv"}
_CODE_TYPES = {TensorProto.INT4: (np.int8, 4), TensorProto.UINT4: (np.uint8, 4)}   # packed sub-byte initializers
_AUTO_PAD = {"NOTSET": 0, "SAME_UPPER": 1, "SAME_LOWER": 2, "VALID": 3}
_CONTROL_FLOW = {"If", "Loop", "Scan"}
_PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}
_RESIZE_MODES = {"nearest": 0, "linear": 1, "cubic": 2}
_RNN_DIRECTIONS = {"forward": 0, "reverse": 1, "bidirectional": 2}
# name -> (schema code, (default alpha or None if unused, default beta or None))
_RNN_ACTIVATIONS = {
    "Sigmoid": (0, (None, None)), "Tanh": (1, (None, None)), "Relu": (2, (None, None)),
    "HardSigmoid": (3, (0.2, 0.5)), "LeakyRelu": (4, (0.01, None)), "ThresholdedRelu": (5, (1.0, None)),
    "ScaledTanh": (6, (1.0, 1.0)), "Affine": (7, (1.0, 0.0)), "Elu": (8, (1.0, None)), "Softsign": (9, (None, None)),
    "Softplus": (10, (None, None)),
}
_COORD_MODES = {"half_pixel": 0, "half_pixel_symmetric": 1, "pytorch_half_pixel": 2, "align_corners": 3,
                "asymmetric": 4, "tf_crop_and_resize": 5}
_NEAREST_MODES = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}
_SCATTER_REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
# Parameterised activations: ONNX attribute defaults.
_ACTIVATION_DEFAULTS = {
    "Elu": {"alpha": 1.0}, "Celu": {"alpha": 1.0}, "ThresholdedRelu": {"alpha": 1.0},
    "Selu": {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    "HardSigmoid": {"alpha": 0.2, "beta": 0.5},
}


def parse_input_shapes(spec: str | None) -> dict[str, list[int]]:
    """'name:1,3,224,224;other:1,128' -> {'name': [1, 3, 224, 224], ...}."""
    shapes: dict[str, list[int]] = {}
    if not spec:
        return shapes
    for item in spec.split(";"):
        item = item.strip()
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise ConverterError(f"--inputShape entry '{item}' must look like name:1,3,224,224")
        if name in shapes:
            raise ConverterError(f"--inputShape names '{name}' twice")
        try:
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise ConverterError(f"--inputShape entry '{item}' has a non-integer dim") from None
        bad = [d for d in shapes[name] if d < -1]
        if bad:   # (-1 keeps a dim dynamic; 0 is an empty dim)
            raise ConverterError(f"--inputShape entry '{item}' has negative dim(s) {bad}: dims are >= 0, or -1 "
                                 "for a dim left dynamic")
    return shapes


def load_onnx(path: str, weight_file: str | None = None) -> onnx.ModelProto:
    """The model with its external data, read from beside it, or from `weight_file` (converter_lite --weightFile: the
    file holding the weights when it is not where the model names it)."""
    if not os.path.isfile(path):
        raise ConverterError(f"model file '{path}' does not exist")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf raises several types for garbage input
        raise ConverterError(f"'{path}' is not a valid ONNX model: {e}") from None
    if not model.graph.node and not model.graph.output:
        raise ConverterError(f"'{path}' is not a valid ONNX model: it has no graph")
    base_dir = os.path.dirname(os.path.abspath(path))
    if weight_file is not None:
        base_dir = _redirect_external_data(model, weight_file)
    try:
        onnx.external_data_helper.load_external_data_for_model(model, base_dir)
    except Exception as e:
        raise ConverterError(f"cannot load external data of '{path}': {e}") from None
    _check_initializer_sizes(model)
    return model


# Element types whose values are stored one per element (typed fields) or at a fixed itemsize (raw_data). 4-bit and
# string types are left to numpy_helper, which checks them as it reads them.
_PACKED_TYPES = {TensorProto.INT4, TensorProto.UINT4, TensorProto.STRING} | (
    {TensorProto.FLOAT4E2M1} if hasattr(TensorProto, "FLOAT4E2M1") else set())


def _check_initializer_sizes(model: onnx.ModelProto) -> None:
    """Every constant holds as many values as its dims say: a malformed one is refused here, before ONNX's shape
    inference (whose data propagation allocates by the dims it is told: a 1-element shape tensor holding 2 values
    sent it past 24 GB in the sanitizer fuzz job)."""
    for t in onnx.external_data_helper._get_all_tensors(model):
        if t.data_type in _PACKED_TYPES or t.data_location == TensorProto.EXTERNAL or not t.data_type:
            continue
        dims = [int(d) for d in t.dims]
        if any(d < 0 for d in dims):
            raise ConverterError(f"constant '{t.name}' has a negative dim: {dims}")
        count = int(np.prod(dims, dtype=np.float64)) if dims else 1
        if t.HasField("raw_data"):
            try:
                itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
            except (KeyError, TypeError, ValueError):
                continue
            held = len(t.raw_data) // itemsize if itemsize else count
        else:
            fields = [f for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")
                      if len(getattr(t, f))]
            if not fields:
                continue
            held = len(getattr(t, fields[0]))
            if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
                held //= 2
        if held != count:
            raise ConverterError(f"constant '{t.name}' declares dims {dims} ({count} values) but holds {held}")


def _redirect_external_data(model: onnx.ModelProto, weight_file: str) -> str:
    """Points every external tensor at `weight_file`; returns its directory. The model must keep its external data in
    one file (else which file is which is unknowable)."""
    if not os.path.isfile(weight_file):
        raise ConverterError(f"weight file '{weight_file}' does not exist")
    external = [t for t in onnx.external_data_helper._get_all_tensors(model)
                if onnx.external_data_helper.uses_external_data(t)]
    if not external:
        raise ConverterError("--weightFile was given, but the model keeps all its weights inside (no external data)")
    locations = {e.value for t in external for e in t.external_data if e.key == "location"}
    if len(locations) > 1:
        raise ConverterError(f"the model's external data lies in {len(locations)} files ({', '.join(sorted(locations))});"
                             " --weightFile names one: keep them beside the model instead")
    for t in external:
        for e in t.external_data:
            if e.key == "location":
                e.value = os.path.basename(weight_file)
    return os.path.dirname(os.path.abspath(weight_file))


def _opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return MIN_OPSET


def _apply_input_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> None:
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = {i.name: i for i in model.graph.input if i.name not in inits}
    unknown = sorted(set(shapes) - set(graph_inputs))
    if unknown:
        raise ConverterError(f"--inputShape names unknown inputs {unknown}; model inputs are {sorted(graph_inputs)}")
    for name, dims in shapes.items():
        tt = graph_inputs[name].type.tensor_type
        old = tt.shape.dim
        if len(old) and len(old) != len(dims):
            raise ConverterError(f"--inputShape gives input '{name}' rank {len(dims)}, the model has rank {len(old)}")
        tt.shape.ClearField("dim")
        for d in dims:
            tt.shape.dim.add().dim_value = d
    # Stale value_info would contradict the new shapes; inference recomputes it.
    if shapes:
        del model.graph.value_info[:]


def _shape_of(vi: onnx.ValueInfoProto) -> list[int] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]


def _symbolic_shape_of(vi: onnx.ValueInfoProto) -> list[int | str | None] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub-)graph reads but does not define, including those of bodies nested inside it."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    used: set[str] = set()
    for n in graph.node:
        defined.update(o for o in n.output if o)
        used.update(i for i in n.input if i)
        for attr in n.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                used |= _free_names(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    used |= _free_names(g)
    used.update(o.name for o in graph.output)
    return used - defined


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


class _ReadAttrs(dict):
    """A node's attributes that remember which ones the importer looked at, so an attribute it never read (one
    a newer opset added, say) is refused instead of silently ignored: a wrong number is worse than a refusal."""

    def __init__(self, values: dict[str, Any]):
        super().__init__(values)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def _all(self) -> None:
        self.read.update(super().keys())

    def keys(self):  # type: ignore[override]
        self._all()
        return super().keys()

    def items(self):  # type: ignore[override]
        self._all()
        return super().items()

    def values(self):  # type: ignore[override]
        self._all()
        return super().values()

    def __iter__(self):
        self._all()
        return super().__iter__()


# Attributes no inference result depends on: read or not, they never change the outputs (saturate, round_mode:
# float8 targets only, refused as a dtype; training-only settings; the branch an inlined If drops; the layout of
# MaxPool's Indices output, refused when used).
_INERT_ATTRIBUTES = {"Cast": {"saturate", "round_mode"}, "CastLike": {"saturate", "round_mode"},
                     "BatchNormalization": {"momentum"}, "Dropout": {"ratio", "seed"},
                     "If": {"then_branch", "else_branch"}, "MaxPool": {"storage_order"}}


def _schema_default(node: onnx.NodeProto, name: str, opset: int) -> tuple[bool, Any]:
    """(True, value) when the operator's schema gives `name` a default, else (False, None)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:   # an operator onnx does not know (com.microsoft ones): no defaults to compare with
        return False, None
    attr = schema.attributes.get(name)
    if attr is None or attr.default_value is None or not attr.default_value.name:
        return False, None
    return True, helper.get_attribute_value(attr.default_value)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bytes) or isinstance(b, bytes):
        return (a.decode() if isinstance(a, bytes) else a) == (b.decode() if isinstance(b, bytes) else b)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


class _Importer:
    def __init__(self, model: onnx.ModelProto, source: str):
        self.model = model
        self.opset = _opset(model)
        self.g = Graph(name=model.graph.name or "main")
        self.g.metadata.update({
            "source_format": "ONNX", "source_model": os.path.basename(source), "onnx_opset": str(self.opset),
            "onnx_producer": f"{model.producer_name} {model.producer_version}".strip(),
        })
        self.value_shapes: dict[str, list[int] | None] = {}
        self.value_dtypes: dict[str, np.dtype] = {}

    def run(self, captures: list[Tensor] | None = None) -> Graph:
        """Imports the graph. `captures` are outer-scope values a sub-graph reads: they become trailing
        graph inputs (the control-flow node passes them explicitly)."""
        g, m = self.g, self.model
        if self.opset < MIN_OPSET:
            raise ConverterError(f"ONNX opset {self.opset} is older than the oldest supported ({MIN_OPSET}); "
                                 "upgrade it with onnx.version_converter")
        if self.opset > NEWEST_CHECKED_OPSET and captures is None:
            ops = sorted({n.op_type for n in m.graph.node if n.domain in ("", "ai.onnx")})
            warnings.warn(f"ONNX opset {self.opset} is newer than the newest this converter was checked against "
                          f"({NEWEST_CHECKED_OPSET}): these operators were imported with their opset-"
                          f"{NEWEST_CHECKED_OPSET} definitions: {', '.join(ops)}", stacklevel=2)
        for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                self.value_shapes[vi.name] = _shape_of(vi)
                symbolic = _symbolic_shape_of(vi)
                if symbolic is not None:
                    g.symbolic_shapes[vi.name] = symbolic
                try:
                    self.value_dtypes[vi.name] = numpy_from_onnx(vi.type.tensor_type.elem_type, f"value '{vi.name}'")
                except ValueError:
                    pass
        self.code_inits: dict[str, np.ndarray] = {}   # int4/uint4 initializers: only DequantizeLinear reads them
        for init in m.graph.initializer:
            if init.data_type in _CODE_TYPES:
                self.code_inits[init.name] = numpy_helper.to_array(init).astype(_CODE_TYPES[init.data_type][0])
                continue
            arr = self._to_numpy(init, f"initializer '{init.name}'")
            g.tensors[init.name] = Tensor(init.name, arr.dtype, list(arr.shape), arr)
        inits = {i.name for i in m.graph.initializer}
        for vi in m.graph.input:
            if vi.name in inits:
                continue   # an initializer listed as input (old exporters): a constant
            elem = vi.type.tensor_type.elem_type
            dtype = self._dtype(elem, f"graph input '{vi.name}'")
            shape = _shape_of(vi)
            g.tensors[vi.name] = Tensor(vi.name, dtype, shape if shape is not None else None)
            g.inputs.append(vi.name)
        for t in captures or []:
            g.tensors[t.name] = Tensor(t.name, t.dtype, t.shape)
            g.inputs.append(t.name)
            self.value_dtypes.setdefault(t.name, t.dtype)
        self._check_supported()
        problems = []   # every unsupported attribute value in one report, not just the first
        for node in m.graph.node:
            try:
                self._import_node(node)
            except ConverterError as e:
                problems.append(str(e))
            except (KeyError, ValueError, TypeError) as e:
                problems.append(f"node '{node.name}' ({node.op_type}): malformed attributes ({e})")
        if problems:
            raise ConverterError(f"{len(problems)} node(s) cannot be converted:\n  " + "\n  ".join(problems))
        g.outputs = [o.name for o in m.graph.output]
        for name in g.outputs:
            if name not in g.tensors and not any(name in n.outputs for n in g.nodes):
                raise ConverterError(f"graph output '{name}' is not produced by any node")
        return g

    # -- helpers -------------------------------------------------------------------------------
    def _dtype(self, elem: int, where: str) -> np.dtype:
        try:
            return numpy_from_onnx(elem, where)
        except ValueError as e:
            raise ConverterError(str(e)) from None

    def _to_numpy(self, t: onnx.TensorProto, where: str) -> np.ndarray:
        self._dtype(t.data_type, where)
        try:
            return np.asarray(numpy_helper.to_array(t), order="C")
        except Exception as e:
            raise ConverterError(f"{where}: cannot read tensor data: {e}") from None

    def _check_supported(self) -> None:
        missing: dict[str, list[str]] = {}
        for i, n in enumerate(self.model.graph.node):
            if n.op_type in MS_CONTRIB_OPS and n.domain in ("", "ai.onnx", "com.microsoft"):
                continue   # ONNX Runtime registers SimplifiedLayerNormalization in the default domain too
            if n.domain not in ("", "ai.onnx"):
                missing.setdefault(f"{n.domain}::{n.op_type}", []).append(n.name or f"#{i}")
            elif (n.op_type not in SUPPORTED and n.op_type not in _IMPORT_ONLY and n.op_type not in _CONTROL_FLOW
                  and n.op_type not in _QUANTIZED_OPS):
                missing.setdefault(n.op_type, []).append(n.name or f"#{i}")
        if missing:
            parts = [f"{op} (nodes: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''})"
                     for op, names in sorted(missing.items())]
            raise ConverterError("unsupported operators: " + "; ".join(parts) + ". See docs/ops.md")

    def _const_input(self, hint: str, values, dtype=np.int64) -> str:
        return self.g.add_constant(hint, np.asarray(values, dtype=dtype))

    def _add(self, node: onnx.NodeProto, op: str, inputs: list[str], attrs: dict[str, Any],
             outputs: list[str] | None = None) -> None:
        outputs = list(node.output) if outputs is None else outputs
        name = node.name or f"{op}_{len(self.g.nodes)}"
        for o in outputs:
            if o and o not in self.g.tensors:
                self.g.tensors[o] = Tensor(o, self.value_dtypes.get(o, np.dtype(np.float32)), self.value_shapes.get(o))
        while inputs and inputs[-1] == "":
            inputs = inputs[:-1]
        self.g.nodes.append(Node(name, op, list(inputs), outputs, attrs))

    def _require_unused(self, node: onnx.NodeProto, from_index: int, what: str) -> None:
        used = {i for n in self.model.graph.node for i in n.input} | {o.name for o in self.model.graph.output}
        for o in node.output[from_index:]:
            if o and o in used:
                raise ConverterError(f"node '{node.name}' ({node.op_type}): the {what} output is not supported")

    def _emit(self, name: str, op: str, inputs: list[str], attrs: dict[str, Any], dtype: np.dtype,
              output: str | None = None) -> str:
        """Adds one canonical node (part of a decomposition) and returns its output name."""
        out = output or self.g.unique_name(f"{name}_{op.lower()}")
        if out not in self.g.tensors:
            self.g.tensors[out] = Tensor(out, dtype, self.value_shapes.get(out))
        self.g.nodes.append(Node(f"{name}/{op}_{len(self.g.nodes)}", op, inputs, [out], attrs))
        return out

    def _import_contrib(self, node: onnx.NodeProto, a: dict[str, Any]) -> None:
        """com.microsoft operators (what ONNX Runtime's transformer optimiser writes), decomposed into
        canonical operators. Later fusion passes re-fuse them into fast kernels."""
        op, ins, name = node.op_type, list(node.input) + [""] * 12, node.name or node.op_type
        dt = self.value_dtypes.get(ins[0], np.dtype(np.float32))
        outs = list(node.output) + [""] * 4
        f32 = lambda v: self.g.add_constant(f"{name}_c", np.array(v, dtype=dt))  # noqa: E731
        if op in ("FastGelu", "BiasGelu"):
            x = self._emit(name, "Add", [ins[0], ins[1]], {}, dt) if ins[1] else ins[0]
            self._emit(name, "Gelu", [x], {"tanh_approximation": op == "FastGelu"}, dt, outs[0])
        elif op == "QuickGelu":
            scaled = self._emit(name, "Mul", [ins[0], f32(a.get("alpha", 1.702))], {}, dt)
            gate = self._emit(name, "Sigmoid", [scaled], {}, dt)
            self._emit(name, "Mul", [ins[0], gate], {}, dt, outs[0])
        elif op == "FusedMatMul":
            def trans(x: str, flag: str, batch_flag: str) -> str:
                if not a.get(flag) and not a.get(batch_flag):
                    return x
                known = self.g.tensors[x].shape if x in self.g.tensors else None
                rank = len(self.value_shapes.get(x) or known or [])
                if rank < 2:
                    raise ConverterError(f"node '{name}' (FusedMatMul): transposes need a known input rank")
                perm = list(range(rank))
                if a.get(batch_flag):   # move the first dim to just before the last (ORT's transBatch)
                    perm = perm[1:-1] + [0] + perm[-1:]
                if a.get(flag):
                    perm[-1], perm[-2] = perm[-2], perm[-1]
                return self._emit(name, "Transpose", [x], {"perm": perm}, dt)
            y = self._emit(name, "MatMul", [trans(ins[0], "transA", "transBatchA"), trans(ins[1], "transB", "transBatchB")],
                           {}, dt, None if a.get("alpha", 1.0) != 1.0 else outs[0])
            if a.get("alpha", 1.0) != 1.0:
                self._emit(name, "Mul", [y, f32(a["alpha"])], {}, dt, outs[0])
        elif op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
            bias = ins[4] if op == "SkipLayerNormalization" else ins[3]
            total = self._emit(name, "Add", [ins[0], ins[1]], {}, dt)
            if bias:
                total = self._emit(name, "Add", [total, bias], {}, dt)
            if outs[3]:   # input_skip_bias_sum output
                self._emit(name, "Cast", [total], {"to": dt}, dt, outs[3])
            eps = a.get("epsilon", 1e-12 if op == "SkipLayerNormalization" else 1e-5)
            if op == "SkipLayerNormalization":
                self._emit(name, "LayerNormalization", [total, ins[2]] + ([ins[3]] if ins[3] else []),
                           {"axis": -1, "epsilon": eps}, dt, outs[0])
            else:
                self._rms_norm(name, total, ins[2], -1, eps, dt, outs[0])
        elif op == "SimplifiedLayerNormalization":
            if int(a.get("stash_type", 1)) != 1:   # 1: statistics in float32, as lite computes them
                raise ConverterError(f"node '{name}' ({op}): stash_type {a['stash_type']} is not supported")
            self._rms_norm(name, ins[0], ins[1], a.get("axis", -1), a.get("epsilon", 1e-5), dt, outs[0])
        elif op == "MultiHeadAttention":
            self._multi_head_attention(node, a, ins, outs, dt)
        elif op == "GroupQueryAttention":
            self._group_query_attention(node, a, ins, outs, dt)
        elif op == "Attention":
            self._attention(node, a, ins, outs, dt)
        elif op == "RotaryEmbedding":
            self._rotary_embedding(node, a, ins, outs, dt)
        elif op == "MatMulNBits":
            self._matmul_nbits(node, a, ins, outs, dt)
        elif op == "DynamicQuantizeLSTM":
            self._dynamic_quantize_lstm(node, a, ins)
        else:
            raise ConverterError(f"node '{name}' (com.microsoft::{op}) is not supported yet")
        if op.endswith("LayerNormalization"):
            used = {i for n in self.model.graph.node for i in n.input} | {o.name for o in self.model.graph.output}
            if any(extra and extra in used for extra in outs[1:3]):
                raise ConverterError(f"node '{name}' (com.microsoft::{op}): the mean/inv_std_var outputs are not supported")

    def _dynamic_quantize_lstm(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str]) -> None:
        """com.microsoft DynamicQuantizeLSTM (ONNX Runtime's quantize_dynamic of an LSTM): int8/uint8 weights
        W [dirs, input, 4 hidden] and R [dirs, hidden, 4 hidden] with scales and zero points per direction or per
        column, the input quantised per run. Imported as an LSTM on the dequantised weights (transposed to ONNX's
        [dirs, 4 hidden, input]), computed in float32: the outputs differ from ONNX Runtime's integer products by
        the input's 8-bit rounding."""
        where = f"node '{node.name}' (com.microsoft::DynamicQuantizeLSTM)"

        def dequantized(w: str, scale: str, zero: str, what: str) -> str:
            codes, s, z = (self.g.constant(n) if n else None for n in (w, scale, zero))
            if codes is None or s is None or z is None:
                raise ConverterError(f"{where}: {what}, its scale and zero point must be constants")
            if codes.ndim != 3 or codes.dtype not in (np.int8, np.uint8):
                raise ConverterError(f"{where}: {what} must be 3-D int8/uint8, got {codes.dtype} {list(codes.shape)}")
            dirs, cols = codes.shape[0], codes.shape[2]
            if s.size not in (dirs, dirs * cols) or z.size != s.size:
                raise ConverterError(f"{where}: {what}'s scale/zero point must hold one value per direction or per "
                                     f"column ({dirs} or {dirs * cols}), got {s.size} and {z.size}")
            per = (dirs, 1, cols) if s.size == dirs * cols else (dirs, 1, 1)
            values = (codes.astype(np.float32) - z.reshape(per).astype(np.float32)) * s.reshape(per).astype(np.float32)
            return self.g.add_constant(f"{node.name or 'lstm'}_{what}", np.ascontiguousarray(values.transpose(0, 2, 1)))

        w = dequantized(ins[1], ins[8], ins[9], "W")
        r = dequantized(ins[2], ins[10], ins[11], "R")
        outputs = [o or self.g.unique_name(f"{node.name or 'lstm'}_unused{i}") for i, o in enumerate(node.output)]
        self._add(node, "LSTM", [ins[0], w, r] + ins[3:8], self._recurrent_attrs("LSTM", a, where), outputs)

    def _dequantize_linear(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str], where: str) -> None:
        """DequantizeLinear of constant codes (weight-only QDQ): a float32 constant kept compressed in the file."""
        codes = self.code_inits.get(ins[0])
        bits = 4 if codes is not None else 8
        if codes is None:
            codes = self.g.constant(ins[0])
        if codes is None:   # an activation (QDQ): float arithmetic
            QuantizedImporter(self, node, a, where).run()
            return
        scale = self.g.constant(ins[1])
        zp_name = ins[2] if len(ins) > 2 else ""
        zp = (self.code_inits.get(zp_name) if zp_name in self.code_inits else self.g.constant(zp_name)) if zp_name else None
        if scale is None or (zp_name and zp is None):
            raise ConverterError(f"{where}: scale and zero point must be constants")
        if not np.issubdtype(codes.dtype, np.integer):
            raise ConverterError(f"{where}: input of dtype {codes.dtype} (integer codes are supported)")
        values, stored = dequantize_constant(codes, bits, scale, zp, int(a.get("axis", 1)), int(a.get("block_size", 0)),
                                             where)
        out = node.output[0]
        self.g.tensors[out] = Tensor(out, values.dtype, list(values.shape), values)
        self.g.tensors[out].stored = stored

    def _matmul_nbits(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str], outs: list[str],
                      dt: np.dtype) -> None:
        """com.microsoft MatMulNBits: MatMul with a float32 weight kept as its 4/8-bit codes in the file."""
        name, where = node.name or "matmul_nbits", f"node '{node.name}' (com.microsoft::MatMulNBits)"
        b, scales = self.g.constant(ins[1]), self.g.constant(ins[2])
        zp = self.g.constant(ins[3]) if ins[3] else None
        if b is None or scales is None or (ins[3] and zp is None):
            raise ConverterError(f"{where}: B, scales and zero_points must be constants")
        if ins[4]:
            raise ConverterError(f"{where}: g_idx (act-order) is not supported")
        k, n = int(a["K"]), int(a["N"])
        values, stored = matmul_nbits_weight(b, scales, zp, k, n, int(a.get("bits", 4)), int(a["block_size"]), where)
        w = self.g.add_constant(f"{name}_weight", values)
        self.g.tensors[w].stored = stored
        if ins[5]:   # bias
            y = self._emit(name, "MatMul", [ins[0], w], {}, dt)
            self._emit(name, "Add", [y, ins[5]], {}, dt, outs[0])
        else:
            self._emit(name, "MatMul", [ins[0], w], {}, dt, outs[0])

    def _multi_head_attention(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str], outs: list[str],
                              dt: np.dtype) -> None:
        """com.microsoft MultiHeadAttention with separate 3-D query/key/value, optional bias, key padding
        mask (B, L) and attention bias: softmax(Q K^T * scale + masks) V over num_heads heads."""
        name, where = node.name or "mha", f"node '{node.name}' (com.microsoft::MultiHeadAttention)"
        heads = int(a.get("num_heads", 0))
        unsupported = []
        if bool(ins[6]) != bool(ins[7]):
            unsupported.append("past_key without past_value (or the reverse)")
        if a.get("unidirectional"):   # ONNX Runtime's causal convention for MHA with S != L is not pinned down
            unsupported.append("unidirectional=1")
        q_shape, k_shape = self.value_shapes.get(ins[0]), self.value_shapes.get(ins[1])
        if not ins[1] or not ins[2] or not q_shape or len(q_shape) != 3 or not k_shape or len(k_shape) != 3:
            unsupported.append("packed or 4-D query/key/value")
        if unsupported or heads < 1:
            raise ConverterError(f"{where}: unsupported {', '.join(unsupported) or 'num_heads'}")
        q, k, v = ins[0], ins[1], ins[2]
        if ins[3]:   # bias: [q | k | v] along the last dim
            bias = self.g.constant(ins[3])
            if bias is None:
                raise ConverterError(f"{where}: bias must be a constant")
            d = q_shape[2] if q_shape[2] > 0 else bias.size // 3
            parts = [bias[:d], bias[d:2 * d], bias[2 * d:]]
            q, k, v = (self._emit(name, "Add", [t, self.g.add_constant(f"{name}_bias", b)], {}, dt)
                       for t, b in zip((q, k, v), parts))
        mask_shape = None
        if ins[4]:
            mask_shape = self.value_shapes.get(ins[4]) or (self.g.tensors[ins[4]].shape if ins[4] in self.g.tensors else None)
        # A KV cache: past_key/past_value (B, N, P, H) before this step's keys and values; present_key/value both.
        self._attention_core(name, where, q, k, v, heads, q_shape[2], a, ins[5], ins[4], mask_shape, dt, outs[0],
                             past=(ins[6], ins[7]) if ins[6] else None, present=(outs[1], outs[2]))

    def _attention_core(self, name: str, where: str, q: str, k: str, v: str, heads: int, hidden: int,
                        a: dict[str, Any], attn_bias: str, mask: str, mask_shape: list[int] | None, dt: np.dtype,
                        out: str, past: tuple[str, str] | None = None,
                        present: tuple[str, str] = ("", "")) -> tuple[str, str]:
        """softmax(Q K^T * scale + attention bias + padding mask + causal mask) V on projected 3-D q, k, v; with
        `past` (key, value: B, N, P, H) this step's keys and values follow them (the causal mask and the padding mask
        then cover P + L keys). Returns the keys and values attended to (B, N, P + L, H), written to `present`'s
        names where given."""
        head_dim = hidden // heads if hidden > 0 else -1
        scale = a.get("scale", 0.0) or (1.0 / np.sqrt(head_dim) if head_dim > 0 else None)
        if scale is None:
            raise ConverterError(f"{where}: the hidden size must be static to derive the default scale")
        c = lambda hint, vals: self._const_input(f"{name}_{hint}", vals)  # noqa: E731
        split = c("heads", [0, 0, heads, -1])
        Q = self._emit(name, "Transpose", [self._emit(name, "Reshape", [q, split], {}, dt)], {"perm": [0, 2, 1, 3]}, dt)
        K = self._emit(name, "Transpose", [self._emit(name, "Reshape", [k, split], {}, dt)], {"perm": [0, 2, 1, 3]}, dt,
                       None if past else present[0] or None)
        V = self._emit(name, "Transpose", [self._emit(name, "Reshape", [v, split], {}, dt)], {"perm": [0, 2, 1, 3]}, dt,
                       None if past else present[1] or None)
        if past:
            K = self._emit(name, "Concat", [past[0], K], {"axis": 2}, dt, present[0] or None)
            V = self._emit(name, "Concat", [past[1], V], {"axis": 2}, dt, present[1] or None)
        Kt = self._emit(name, "Transpose", [K], {"perm": [0, 1, 3, 2]}, dt)
        scores = self._emit(name, "Mul", [self._emit(name, "MatMul", [Q, Kt], {}, dt),
                                          self.g.add_constant(f"{name}_scale", np.array(scale, dtype=dt))], {}, dt)
        filt = self.g.add_constant(f"{name}_filter", np.array(a.get("mask_filter_value", -10000.0), dtype=dt))
        one = self.g.add_constant(f"{name}_one", np.array(1, dtype=dt))
        if attn_bias:
            scores = self._emit(name, "Add", [scores, attn_bias], {}, dt)
        if mask:
            if not mask_shape or len(mask_shape) != 2:
                raise ConverterError(f"{where}: only a (batch, kv_length) padding mask is supported")
            keep = self._emit(name, "Cast", [mask], {"to": dt}, dt)
            penalty = self._emit(name, "Mul", [self._emit(name, "Sub", [one, keep], {}, dt), filt], {}, dt)
            penalty = self._emit(name, "Unsqueeze", [penalty, c("mask_axes", [1, 2])], {}, dt)
            scores = self._emit(name, "Add", [scores, penalty], {}, dt)
        if a.get("unidirectional"):
            # causal: query i (of S) sees keys j <= i + (L - S); built from the run-time S and L.
            i64 = np.dtype(np.int64)
            s_len = self._emit(name, "Shape", [q], {"start": 1, "end": 2}, i64)
            l_len = self._emit(name, "Shape", [K], {"start": 2, "end": 3}, i64)
            ones = self._emit(name, "ConstantOfShape", [self._emit(name, "Concat", [s_len, l_len], {"axis": 0}, i64),
                                                        self.g.add_constant(f"{name}_one_v", np.array([1], dtype=dt))], {}, dt)
            diag = self._emit(name, "Squeeze", [self._emit(name, "Sub", [l_len, s_len], {}, i64), c("sq", [0])], {}, i64)
            allowed = self._emit(name, "Trilu", [ones, diag], {"upper": False}, dt)
            scores = self._emit(name, "Add", [scores, self._emit(
                name, "Mul", [self._emit(name, "Sub", [one, allowed], {}, dt), filt], {}, dt)], {}, dt)
        probs = self._emit(name, "Softmax", [scores], {"axis": -1, "coerce_2d": False}, dt)
        ctx = self._emit(name, "Transpose", [self._emit(name, "MatMul", [probs, V], {}, dt)], {"perm": [0, 2, 1, 3]}, dt)
        self._emit(name, "Reshape", [ctx, c("merge", [0, 0, -1])], {}, dt, out)
        return K, V

    def _attention(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str], outs: list[str],
                   dt: np.dtype) -> None:
        """com.microsoft Attention: packed QKV projection (weights [in, q+k+v], bias) then attention."""
        name, where = node.name or "attention", f"node '{node.name}' (com.microsoft::Attention)"
        heads = int(a.get("num_heads", 0))
        unsupported = [n for n, i in (("past_sequence_length (a shared past/present buffer)", 6),) if ins[i]]
        if a.get("do_rotary"):
            unsupported.append("do_rotary=1")
        if a.get("past_present_share_buffer"):
            unsupported.append("past_present_share_buffer=1")
        weights = self.g.constant(ins[1])
        if weights is None or weights.ndim != 2:
            unsupported.append("non-constant weights")
        if unsupported or heads < 1:
            raise ConverterError(f"{where}: unsupported {', '.join(unsupported) or 'num_heads'}")
        sizes = list(a.get("qkv_hidden_sizes", [])) or [weights.shape[1] // 3] * 3
        if sum(sizes) != weights.shape[1] or sizes[0] != sizes[1]:
            raise ConverterError(f"{where}: qkv_hidden_sizes {sizes} do not match weights {list(weights.shape)}")
        bias = self.g.constant(ins[2]) if ins[2] else None
        if ins[2] and bias is None:
            raise ConverterError(f"{where}: bias must be a constant")
        parts = []
        begin = 0
        for i, size in enumerate(sizes):   # one projection per q, k, v (the fusion passes may merge them)
            w = self.g.add_constant(f"{name}_w{i}", weights[:, begin:begin + size])
            proj = self._emit(name, "MatMul", [ins[0], w], {}, dt)
            if bias is not None:
                proj = self._emit(name, "Add", [proj, self.g.add_constant(f"{name}_b{i}", bias[begin:begin + size])], {}, dt)
            parts.append(proj)
            begin += size
        mask_shape = None
        if ins[3]:
            mask_shape = self.value_shapes.get(ins[3]) or (self.g.tensors[ins[3]].shape if ins[3] in self.g.tensors else None)
        # A KV cache: past (2, B, N, P, H) holds keys then values; present the same with this step's appended.
        past = None
        if ins[4]:
            past = tuple(self._emit(name, "Gather", [ins[4], self.g.add_constant(f"{name}_kv{i}", np.array(i, np.int64))],
                                    {"axis": 0}, dt) for i in range(2))
        K, V = self._attention_core(name, where, parts[0], parts[1], parts[2], heads, sizes[0], a, ins[5], ins[3],
                                    mask_shape, dt, outs[0], past=past)
        if outs[1]:
            zero = self._const_input(f"{name}_stack", [0])
            self._emit(name, "Concat", [self._emit(name, "Unsqueeze", [K, zero], {}, dt),
                                        self._emit(name, "Unsqueeze", [V, zero], {}, dt)], {"axis": 0}, dt, outs[1])

    def _rotary_embedding(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str], outs: list[str],
                          dt: np.dtype) -> None:
        """com.microsoft RotaryEmbedding (rotate-half or interleaved) on (B, S, D) or (B, N, S, H) input,
        with (B, S) position ids or a (1,) position offset: one RotaryEmbedding node."""
        name, where = node.name or "rope", f"node '{node.name}' (com.microsoft::RotaryEmbedding)"
        shape = self.value_shapes.get(ins[0])
        if not shape or len(shape) not in (3, 4):
            raise ConverterError(f"{where}: the input rank must be known (3 or 4)")
        if a.get("is_packed_batching") or a.get("scale", 1.0) != 1.0:
            raise ConverterError(f"{where}: is_packed_batching and scale != 1 are not supported")
        heads = int(a.get("num_heads", 0))
        if len(shape) == 3:
            if heads < 1 or shape[2] < 0:
                raise ConverterError(f"{where}: 3-D input needs num_heads and a static hidden size")
            head_dim = shape[2] // heads
        else:
            head_dim, heads = shape[3], 0
        rot = int(a.get("rotary_embedding_dim", 0)) or head_dim
        if head_dim < 0 or rot > head_dim or rot % 2:
            raise ConverterError(f"{where}: rotary_embedding_dim {rot} does not fit head size {head_dim}")
        pos_shape = self.value_shapes.get(ins[1]) or (self.g.tensors[ins[1]].shape if ins[1] in self.g.tensors else None)
        offset = pos_shape is not None and len(pos_shape) == 1
        self._rope(name, ins[0], heads, rot, ins[2], ins[3], ins[1], offset, bool(a.get("interleaved")), dt, outs[0])

    def _rope(self, name: str, x: str, heads: int, rot: int, cos_cache: str, sin_cache: str, pos: str,
              pos_is_offset: bool, interleaved: bool, dt: np.dtype, out: str | None = None) -> str:
        """RotaryEmbedding of x, (B, N, S, H) when heads is 0, else (B, S, heads * H), with (max_position, rot / 2)
        tables. `pos` holds (B, S) position ids, or a (1,) start offset when pos_is_offset."""
        if pos_is_offset:   # positions = offset + arange(S), the same for every batch
            c = lambda hint, v: self._const_input(f"{name}_{hint}", v)  # noqa: E731
            i64 = np.dtype(np.int64)
            seq_axis = 2 if heads == 0 else 1
            seq = self._emit(name, "Shape", [x], {"start": seq_axis, "end": seq_axis + 1}, i64)
            start = self._emit(name, "Squeeze", [self._emit(name, "Cast", [pos], {"to": i64}, i64), c("sq0", [0])], {}, i64)
            limit = self._emit(name, "Add", [start, self._emit(name, "Squeeze", [seq, c("sq", [0])], {}, i64)], {}, i64)
            one = self.g.add_constant(f"{name}_one", np.array(1, i64))
            row = self._emit(name, "Unsqueeze", [self._emit(name, "Range", [start, limit, one], {}, i64), c("batch", [0])],
                             {}, i64)
            batch = self._emit(name, "Shape", [x], {"start": 0, "end": 1}, i64)
            pos = self._emit(name, "Expand", [row, self._emit(name, "Concat", [batch, seq], {"axis": 0}, i64)], {}, i64)
        return self._emit(name, "RotaryEmbedding", [x, cos_cache, sin_cache, pos],
                          {"interleaved": interleaved, "num_heads": heads, "rotary_embedding_dim": rot}, dt, out)

    def _static_last_dim(self, value: str, depth: int = 0) -> int:
        """The last dimension of `value` where ONNX shape inference left it unknown (behind com.microsoft operators)
        but its producer fixes it: a MatMul / MatMulNBits by a constant weight, or an Add / Cast of one; else -1."""
        shape = self.value_shapes.get(value)
        if shape and shape[-1] >= 0:
            return int(shape[-1])
        producer = next((n for n in self.model.graph.node if value in n.output), None)
        if producer is None or depth > 4:
            return -1
        if producer.op_type == "MatMul" and len(producer.input) > 1:
            w = self.g.constant(producer.input[1])
            return int(w.shape[-1]) if w is not None and w.ndim >= 2 else -1
        if producer.op_type == "MatMulNBits":
            return int(next((helper.get_attribute_value(x) for x in producer.attribute if x.name == "N"), -1))
        if producer.op_type in ("Add", "Cast", "Identity"):
            return max(self._static_last_dim(i, depth + 1) for i in producer.input if i)
        return -1

    def _group_query_attention(self, node: onnx.NodeProto, a: dict[str, Any], ins: list[str], outs: list[str],
                               dt: np.dtype) -> None:
        """com.microsoft GroupQueryAttention (the decoder layers ONNX Runtime GenAI's model builder writes): q, k, v
        separate or packed in the query, optional rotary on q and k, causal attention with key/value heads shared by
        groups of query heads, and the KV cache. Sequence b's S new tokens sit at positions seqlens_k[b] + 1 - S + i
        (a first prompt, S == total_sequence_length: at i, right-padded to seqlens_k[b] + 1); present_key/value
        hold past_key/value (B, kv_heads, P, H; absent for a first prompt) with the new keys and values written at
        those positions, max(P, total_sequence_length) rows long: a present of its own, or the past's buffer when
        they share it (P >= every length); query i of sequence b sees keys j <= min(its position, seqlens_k[b])."""
        name, where = node.name or "gqa", f"node '{node.name}' (com.microsoft::GroupQueryAttention)"
        ins = ins + [""] * (11 - len(ins))
        heads, kv_heads = int(a.get("num_heads", 0)), int(a.get("kv_num_heads", 0))
        q_shape = self.value_shapes.get(ins[0])
        if (not q_shape or len(q_shape) != 3 or q_shape[2] < 0) and self._static_last_dim(ins[0]) > 0:
            q_shape = [-1, -1, self._static_last_dim(ins[0])]   # behind operators shape inference does not know
        unsupported = [n for n, i in (("position_ids", 9), ("attention_bias", 10)) if ins[i]]
        if a.get("local_window_size", -1) != -1:
            unsupported.append("local_window_size")
        if a.get("softcap", 0.0) or a.get("smooth_softmax", 0):
            unsupported.append("softcap/smooth_softmax")
        if bool(ins[1]) != bool(ins[2]):
            unsupported.append("a key without a value (or the reverse)")
        if bool(ins[3]) != bool(ins[4]):
            unsupported.append("past_key without past_value (or the reverse)")
        if not q_shape or len(q_shape) != 3 or q_shape[2] < 0:
            unsupported.append("a query without a static (batch, seq, hidden) shape")
        if unsupported or heads < 1 or kv_heads < 1 or heads % kv_heads:
            raise ConverterError(f"{where}: unsupported {', '.join(unsupported) or 'num_heads/kv_num_heads'}")
        packed = not ins[1]
        head_dim = q_shape[2] // (heads + 2 * kv_heads if packed else heads)
        c = lambda hint, v: self._const_input(f"{name}_{hint}", v)  # noqa: E731
        i64, b8 = np.dtype(np.int64), np.dtype(np.bool_)
        q3, k3, v3 = ins[0], ins[1], ins[2]
        if packed:   # [q | k | v] along the hidden axis
            bounds = np.cumsum([0, heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
            q3, k3, v3 = (self._emit(name, "Slice", [ins[0], c(f"s{i}", [bounds[i]]), c(f"e{i}", [bounds[i + 1]]),
                                                     c(f"ax{i}", [2])], {}, dt) for i in range(3))
        # Positions (B, S): i for a first prompt, seqlens_k[b] + 1 - S + i after it.
        s_len = self._emit(name, "Shape", [q3], {"start": 1, "end": 2}, i64)
        s_scalar = self._emit(name, "Squeeze", [s_len, c("sq", [0])], {}, i64)
        steps = self._emit(name, "Range", [self.g.add_constant(f"{name}_r0", np.array(0, i64)), s_scalar,
                                           self.g.add_constant(f"{name}_r1", np.array(1, i64))], {}, i64)   # (S,)
        lens = self._emit(name, "Unsqueeze", [self._emit(name, "Cast", [ins[5]], {"to": i64}, i64), c("lens", [1])],
                          {}, i64)                                                                   # (B, 1)
        total = self._emit(name, "Reshape", [self._emit(name, "Cast", [ins[6]], {"to": i64}, i64), c("tot", [1])],
                           {}, i64)                                                                  # (1,)
        first_prompt = self._emit(name, "Equal", [total, s_len], {}, b8)
        later = self._emit(name, "Add", [self._emit(name, "Sub", [lens, s_len], {}, i64),
                                         self._emit(name, "Add", [steps, c("one", [1])], {}, i64)], {}, i64)
        pos = self._emit(name, "Where", [first_prompt, self._emit(name, "Unsqueeze", [steps, c("row", [0])], {}, i64),
                                         later], {}, i64)                                            # (B, S)
        if a.get("do_rotary"):
            rot = 2 * (self.g.tensors[ins[7]].shape[1] if ins[7] in self.g.tensors and self.g.tensors[ins[7]].shape
                       else head_dim // 2)
            interleaved = bool(a.get("rotary_interleaved"))
            q3 = self._rope(f"{name}_q", q3, heads, rot, ins[7], ins[8], pos, False, interleaved, dt)
            k3 = self._rope(f"{name}_k", k3, kv_heads, rot, ins[7], ins[8], pos, False, interleaved, dt)
        q4 = self._emit(name, "Reshape", [q3, c("qs", [0, 0, heads, head_dim])], {}, dt)
        k4 = self._emit(name, "Reshape", [k3, c("ks", [0, 0, kv_heads, head_dim])], {}, dt)
        v4 = self._emit(name, "Reshape", [v3, c("vs", [0, 0, kv_heads, head_dim])], {}, dt)
        Q = self._emit(name, "Transpose", [q4], {"perm": [0, 2, 1, 3]}, dt)                  # (B, N, S, H)
        if not ins[3]:   # a first prompt: the cache is this step's keys and values
            K = self._emit(name, "Transpose", [k4], {"perm": [0, 2, 1, 3]}, dt, outs[1] or None)   # (B, kvN, S, H)
            V = self._emit(name, "Transpose", [v4], {"perm": [0, 2, 1, 3]}, dt, outs[2] or None)
        else:
            # max(P, total) rows: the past zero-padded at the end, then the new rows scattered to their positions.
            past_len = self._emit(name, "Shape", [ins[3]], {"start": 2, "end": 3}, i64)
            grow = self._emit(name, "Max", [self._emit(name, "Sub", [total, past_len], {}, i64), c("zero", [0])], {}, i64)
            pads = self._emit(name, "Concat", [c("pad0", [0, 0, 0, 0, 0, 0]), grow, c("pad1", [0])], {"axis": 0}, i64)
            kv_shape = self._emit(name, "Shape", [self._emit(name, "Transpose", [k4], {"perm": [0, 2, 1, 3]}, dt)], {}, i64)
            where = self._emit(name, "Expand", [self._emit(name, "Unsqueeze", [pos, c("pa", [1, 3])], {}, i64), kv_shape],
                               {}, i64)                                                               # (B, kvN, S, H)
            caches = []
            for past, new, out, hint in ((ins[3], k4, outs[1], "k"), (ins[4], v4, outs[2], "v")):
                padded = self._emit(f"{name}_{hint}", "Pad", [past, pads], {}, dt)
                rows = self._emit(f"{name}_{hint}", "Transpose", [new], {"perm": [0, 2, 1, 3]}, dt)
                caches.append(self._emit(f"{name}_{hint}", "ScatterElements", [padded, where, rows], {"axis": 2}, dt,
                                         out or None))
            K, V = caches
        if heads != kv_heads:   # each kv head serves heads / kv_heads query heads
            rep = heads // kv_heads
            group = c("grow", [1, 1, rep, 1, 1])
            K = self._emit(name, "Reshape", [self._emit(name, "Expand", [self._emit(name, "Unsqueeze", [K, c("g", [2])], {}, dt), group], {}, dt),
                                             c("kr", [0, heads, -1, head_dim])], {}, dt)
            V = self._emit(name, "Reshape", [self._emit(name, "Expand", [self._emit(name, "Unsqueeze", [V, c("g2", [2])], {}, dt), group], {}, dt),
                                             c("vr", [0, heads, -1, head_dim])], {}, dt)
        scale = a.get("scale", 0.0) or 1.0 / np.sqrt(head_dim)
        scores = self._emit(name, "Mul", [self._emit(name, "MatMul", [Q, self._emit(name, "Transpose", [K], {"perm": [0, 1, 3, 2]}, dt)], {}, dt),
                                          self.g.add_constant(f"{name}_scale", np.array(scale, dtype=dt))], {}, dt)
        big_neg = self.g.add_constant(f"{name}_neg", np.array(np.finfo(np.float32).min, dtype=dt))
        zero_f = self.g.add_constant(f"{name}_zero_f", np.array(0, dtype=dt))
        # key j visible to query i of sequence b when j <= min(position(b, i), seqlens_k[b])
        t_len = self._emit(name, "Shape", [K], {"start": 2, "end": 3}, i64)
        keys = self._emit(name, "Range", [self.g.add_constant(f"{name}_k0", np.array(0, i64)),
                                          self._emit(name, "Squeeze", [t_len, c("sqt", [0])], {}, i64),
                                          self.g.add_constant(f"{name}_k1", np.array(1, i64))], {}, i64)   # (T,)
        last = self._emit(name, "Unsqueeze", [self._emit(name, "Min", [pos, lens], {}, i64), c("la", [1, 3])], {}, i64)
        keep = self._emit(name, "LessOrEqual", [keys, last], {}, b8)                                       # (B, 1, S, T)
        scores = self._emit(name, "Add", [scores, self._emit(name, "Where", [keep, zero_f, big_neg], {}, dt)], {}, dt)
        probs = self._emit(name, "Softmax", [scores], {"axis": -1, "coerce_2d": False}, dt)
        ctx = self._emit(name, "Transpose", [self._emit(name, "MatMul", [probs, V], {}, dt)], {"perm": [0, 2, 1, 3]}, dt)
        self._emit(name, "Reshape", [ctx, c("merge", [0, 0, -1])], {}, dt, outs[0])

    def _rms_norm(self, name: str, x: str, scale: str, axis: int, eps: float, dt: np.dtype, out: str) -> None:
        """RMSNorm, x / sqrt(mean(x^2 over axes >= axis) + eps) * scale, as one RMSNormalization node."""
        self._emit(name, "RMSNormalization", [x, scale], {"axis": axis, "epsilon": float(eps)}, dt, out)

    def _onnx_attention(self, node: onnx.NodeProto, a: dict, ins: list[str], where: str) -> None:
        """ONNX Attention (opsets 23-25): 4-D operands are BNSD, 3-D ones [B, S, heads * D]; a KV cache as
        past_key/past_value inputs and present_key/present_value outputs (BNSD; the queries then sit after the past,
        causal masks and windows aligned bottom-right); a query whose every key is masked gives 0 (the spec since
        opset 23's errata, and ONNX Runtime)."""
        ins = ins + [""] * (7 - len(ins))
        if ins[6]:
            raise ConverterError(f"{where}: nonpad_kv_seqlen (an external, padded KV cache) is not supported")
        if bool(ins[4]) != bool(ins[5]):
            raise ConverterError(f"{where}: past_key and past_value must be given together")
        self._require_unused(node, 3, "qk_matmul_output")
        outs = list(node.output) + [""] * 3
        cache = bool(ins[4]) or any(outs[1:3])
        if cache:   # present_key/present_value: the kernel writes both (a name of its own where one is unused)
            outs[1:3] = [o or self.g.unique_name(f"{node.name or 'attention'}_present{i}")
                         for i, o in enumerate(outs[1:3])]
        softcap = float(a.get("softcap", 0.0))
        if not (softcap >= 0.0 and np.isfinite(softcap)):
            raise ConverterError(f"{where}: softcap must be a finite value >= 0, got {softcap}")
        if int(a.get("qk_matmul_output_mode", 0)) != 0:
            raise ConverterError(f"{where}: qk_matmul_output_mode {a['qk_matmul_output_mode']} is not supported")
        a.get("softmax_precision")   # the softmax runs in float32 whatever precision is asked
        windows = {k: int(a.get(k, -1)) for k in ("left_window_size", "right_window_size")}
        if any(v < -1 for v in windows.values()):
            raise ConverterError(f"{where}: window sizes must be -1 or nonnegative, got {windows}")
        attrs: dict[str, Any] = {"scale": float(a.get("scale", 0.0)), "is_causal": bool(a.get("is_causal", 0)),
                                 "q_num_heads": int(a.get("q_num_heads", 0)),
                                 "kv_num_heads": int(a.get("kv_num_heads", 0)), "zero_masked_rows": True,
                                 "softcap": softcap, **windows}
        for i, key in enumerate(("q_layout", "k_layout", "v_layout")):
            shape = self.value_shapes.get(ins[i]) or (self.g.tensors[ins[i]].shape if ins[i] in self.g.tensors else None)
            if shape is None or len(shape) not in (3, 4):
                raise ConverterError(f"{where}: the rank of input {i} must be known and 3 or 4")
            if len(shape) == 3 and not attrs["q_num_heads" if i == 0 else "kv_num_heads"]:
                raise ConverterError(f"{where}: 3-D inputs need the q_num_heads and kv_num_heads attributes")
            attrs[key] = "BSND" if len(shape) == 3 else "BNSD"
        attrs["out_layout"] = attrs["q_layout"]
        self._add(node, "Attention", ins[:6] if cache else ins[:4], attrs, outs[:3] if cache else outs[:1])

    # -- per operator normalisation -------------------------------------------------------------
    def _import_node(self, node: onnx.NodeProto) -> None:
        a = _ReadAttrs(_attrs(node))
        self._convert_node(node, a)
        ignored = []
        for name in sorted(set(dict.keys(a)) - a.read - _INERT_ATTRIBUTES.get(node.op_type, set())):
            has_default, default = _schema_default(node, name, self.opset)
            if not (has_default and _same_value(dict.__getitem__(a, name), default)):
                ignored.append(name)
        if ignored:
            raise ConverterError(f"node '{node.name}' ({node.op_type}): attribute{'s' if len(ignored) > 1 else ''} "
                                 f"{', '.join(repr(n) for n in ignored)} not supported (lite would ignore "
                                 f"{'them' if len(ignored) > 1 else 'it'})")

    def _convert_node(self, node: onnx.NodeProto, a: _ReadAttrs) -> None:
        op, ins = node.op_type, list(node.input)
        where = f"node '{node.name}' ({op})"
        if node.domain == "com.microsoft" or (op in MS_CONTRIB_OPS and op not in SUPPORTED):
            self._import_contrib(node, a)
            return
        if any(i in self.code_inits for i in ins) and op != "DequantizeLinear":
            raise ConverterError(f"{where}: reads a 4-bit initializer (only DequantizeLinear may)")
        if op == "If":
            self._inline_constant_if(node, a, where)
        elif op == "DequantizeLinear":
            self._dequantize_linear(node, a, ins, where)
        elif op in _QUANTIZED_OPS:
            QuantizedImporter(self, node, a, where).run()
        elif op == "Constant":
            self._constant(node, a)
        elif op in ("Identity", "Dropout"):
            if op == "Dropout":
                self._require_unused(node, 1, "mask")
                mode = self.g.constant(ins[2]) if len(ins) > 2 and ins[2] else None
                if a.get("training_mode") or (mode is not None and bool(mode.reshape(-1)[0])):
                    raise ConverterError(f"{where}: training mode is not supported")
                if len(ins) > 2 and ins[2] and mode is None:   # may be true at run time: random, not an inference
                    raise ConverterError(f"{where}: training_mode is a run-time input '{ins[2]}'; lite runs "
                                         "inference only (make it the constant false, or drop it)")
            # A copy; the identity-removal pass usually deletes it.
            dtype = self.value_dtypes.get(ins[0]) or self.g.tensors.get(ins[0], Tensor("", np.dtype(np.float32))).dtype
            self._add(node, "Cast", ins[:1], {"to": np.dtype(dtype), "_identity": True}, [node.output[0]])
        elif op == "Conv":
            self._add(node, op, ins, {
                "kernel_shape": a.get("kernel_shape", []), "strides": a.get("strides", []),
                "pads": a.get("pads", []), "dilations": a.get("dilations", []), "group": a.get("group", 1),
                "auto_pad": self._auto_pad(a, where)})
        elif op in ("MaxPool", "AveragePool"):
            if op == "MaxPool":
                self._require_unused(node, 1, "Indices")
            self._add(node, op, ins[:1], {
                "kernel_shape": a.get("kernel_shape", []), "strides": a.get("strides", []),
                "pads": a.get("pads", []), "dilations": a.get("dilations", []),
                "auto_pad": self._auto_pad(a, where), "ceil_mode": bool(a.get("ceil_mode", 0)),
                "count_include_pad": bool(a.get("count_include_pad", 0))}, [node.output[0]])
        elif op == "Gemm":
            self._add(node, op, ins, {"alpha": a.get("alpha", 1.0), "beta": a.get("beta", 1.0),
                                      "trans_a": bool(a.get("transA", 0)), "trans_b": bool(a.get("transB", 0))})
        elif op in ("Concat", "Gather"):
            if op == "Concat" and "axis" not in a:
                raise ConverterError(f"{where}: attribute 'axis' is required")
            self._add(node, op, ins, {"axis": a.get("axis", 0)})
        elif op == "Flatten":
            self._add(node, op, ins, {"axis": a.get("axis", 1)})
        elif op == "Softmax":
            legacy = self.opset < 13
            self._add(node, op, ins, {"axis": a.get("axis", 1 if legacy else -1), "coerce_2d": legacy})
        elif op == "Attention":   # opset 23
            self._onnx_attention(node, a, ins, where)
        elif op == "RotaryEmbedding":   # opset 23
            self._add(node, op, ins, {"interleaved": bool(a.get("interleaved", 0)), "num_heads": a.get("num_heads", 0),
                                      "rotary_embedding_dim": a.get("rotary_embedding_dim", 0)})
        elif op == "RMSNormalization":   # opset 23; computed in float32 whatever stash_type says
            self._add(node, op, ins, {"axis": a.get("axis", -1), "epsilon": a.get("epsilon", 1e-5)})
        elif op == "LayerNormalization":
            self._require_unused(node, 1, "Mean/InvStdDev")
            self._add(node, op, ins, {"axis": a.get("axis", -1), "epsilon": a.get("epsilon", 1e-5)},
                      [node.output[0]])
        elif op == "BatchNormalization":
            if a.get("training_mode", 0):
                raise ConverterError(f"{where}: training mode is not supported")
            self._require_unused(node, 1, "running mean/var")
            self._add(node, op, ins, {"epsilon": a.get("epsilon", 1e-5)}, [node.output[0]])
        elif op.startswith("Reduce"):
            if "axes" in a:   # attribute form (opset < 18; ReduceSum < 13)
                ins = [ins[0], self._const_input(f"{node.name}_axes", a["axes"])]
            self._add(node, op, ins, {"keepdims": bool(a.get("keepdims", 1)),
                                      "noop_with_empty_axes": bool(a.get("noop_with_empty_axes", 0))})
        elif op in _ACTIVATION_DEFAULTS:
            params = {k: float(a.get(k, v)) for k, v in _ACTIVATION_DEFAULTS[op].items()}
            self._add(node, op, ins, params)
        elif op == "Gelu":
            approx = a.get("approximate", b"none")
            approx = approx.decode() if isinstance(approx, bytes) else approx
            if approx not in ("none", "tanh"):
                raise ConverterError(f"{where}: approximate '{approx}' is not 'none' or 'tanh'")
            self._add(node, op, ins, {"tanh_approximation": approx == "tanh"})
        elif op == "Mod":
            fmod = bool(a.get("fmod", 0))
            dtype = self.value_dtypes.get(ins[0])
            if dtype is not None and np.issubdtype(dtype, np.floating) and not fmod:
                raise ConverterError(f"{where}: fmod must be 1 for floating-point inputs")
            self._add(node, op, ins, {"fmod": fmod})
        elif op == "BitShift":
            direction = a.get("direction", b"")
            direction = direction.decode() if isinstance(direction, bytes) else direction
            if direction not in ("LEFT", "RIGHT"):
                raise ConverterError(f"{where}: direction '{direction}' is not LEFT or RIGHT")
            self._add(node, op, ins, {"left": direction == "LEFT"})
        elif op == "IsInf":
            self._add(node, op, ins, {"detect_positive": bool(a.get("detect_positive", 1)),
                                      "detect_negative": bool(a.get("detect_negative", 1))})
        elif op == "ConstantOfShape":
            if "value" in a:
                ins = [ins[0], self.g.add_constant(f"{node.name}_value", self._to_numpy(a["value"], where).reshape(-1))]
            self._add(node, op, ins, {})
        elif op == "ConvTranspose":
            self._add(node, op, ins, {
                "kernel_shape": a.get("kernel_shape", []), "strides": a.get("strides", []),
                "pads": a.get("pads", []), "dilations": a.get("dilations", []), "group": a.get("group", 1),
                "auto_pad": self._auto_pad(a, where), "output_padding": a.get("output_padding", []),
                "output_shape": a.get("output_shape", [])})
        elif op == "Resize":
            self._add(node, op, ins, self._resize_attrs(a, where))
        elif op == "Einsum":
            eq = a["equation"]
            self._add(node, op, ins, {"equation": eq.decode() if isinstance(eq, bytes) else eq})
        elif op == "Compress":
            self._add(node, op, ins, {"axis": a["axis"]} if "axis" in a else {})
        elif op == "ReverseSequence":
            self._add(node, op, ins, {"batch_axis": a.get("batch_axis", 1), "time_axis": a.get("time_axis", 0)})
        elif op == "LRN":
            self._add(node, op, ins, {"alpha": a.get("alpha", 1e-4), "beta": a.get("beta", 0.75),
                                      "bias": a.get("bias", 1.0), "size": a["size"]})
        elif op in ("LpPool", "MaxUnpool"):
            self._add(node, op, ins, {
                "kernel_shape": a.get("kernel_shape", []), "strides": a.get("strides", []),
                "pads": a.get("pads", []), "dilations": a.get("dilations", []),
                "auto_pad": self._auto_pad(a, where), "ceil_mode": bool(a.get("ceil_mode", 0)), "p": a.get("p", 2)})
        elif op in ("LSTM", "GRU", "RNN"):
            outputs = [o or self.g.unique_name(f"{node.name or op}_unused{i}") for i, o in enumerate(node.output)]
            self._add(node, op, ins, self._recurrent_attrs(op, a, where), outputs)
        elif op == "DFT":
            axis = a.get("axis", 1)
            if self.opset >= 20:   # axis became an input (default -2); a constant one becomes the attribute
                axis = -2
                value = self.g.constant(ins[2]) if len(ins) > 2 and ins[2] else None
                if value is not None:
                    if value.size != 1:
                        raise ConverterError(f"{where}: the axis input must hold one value, got {value.size}")
                    axis = int(value.reshape(-1)[0])
                    ins = ins[:2]
                elif len(ins) > 2 and not ins[2]:
                    ins = ins[:2]
            if a.get("inverse", 0) and a.get("onesided", 0):
                raise ConverterError(f"{where}: an inverse one-sided DFT (irfft: a half spectrum to a real signal) "
                                     "is not supported")
            self._add(node, op, ins, {"axis": axis, "inverse": bool(a.get("inverse", 0)),
                                      "onesided": bool(a.get("onesided", 0))})
        elif op == "STFT":
            self._add(node, op, ins, {"onesided": bool(a.get("onesided", 1))})
        elif op in ("Loop", "Scan"):
            self._control_flow(node, a, where)
        elif op == "Trilu":
            self._add(node, op, ins, {"upper": bool(a.get("upper", 1))})
        elif op == "CumSum":
            self._add(node, op, ins, {"exclusive": bool(a.get("exclusive", 0)), "reverse": bool(a.get("reverse", 0))})
        elif op == "Pad":
            mode = a.get("mode", b"constant")
            mode = mode.decode() if isinstance(mode, bytes) else mode
            if mode not in _PAD_MODES:
                raise ConverterError(f"{where}: mode '{mode}' is not one of {sorted(_PAD_MODES)}")
            if "pads" in a:   # opset < 11 attribute form
                dtype = self.value_dtypes.get(ins[0], np.dtype(np.float32))
                ins = [ins[0], self._const_input(f"{node.name}_pads", a["pads"]),
                       self.g.add_constant(f"{node.name}_value", np.array(a.get("value", 0.0), dtype=dtype))]
            self._add(node, op, ins, {"mode": _PAD_MODES[mode]})
        elif op in ("LogSoftmax", "Hardmax"):
            legacy = self.opset < 13
            self._add(node, op, ins, {"axis": a.get("axis", 1 if legacy else -1), "coerce_2d": legacy})
        elif op in ("DepthToSpace", "SpaceToDepth"):
            mode = a.get("mode", b"DCR")
            mode = mode.decode() if isinstance(mode, bytes) else mode
            if mode not in ("DCR", "CRD"):
                raise ConverterError(f"{where}: mode '{mode}' is not DCR or CRD")
            self._add(node, op, ins, {"blocksize": a["blocksize"], "crd": mode == "CRD"})
        elif op in ("GatherElements", "OneHot"):
            self._add(node, op, ins, {"axis": a.get("axis", 0 if op == "GatherElements" else -1)})
        elif op == "GatherND":
            self._add(node, op, ins, {"batch_dims": a.get("batch_dims", 0)})
        elif op in ("ScatterElements", "ScatterND"):
            red = a.get("reduction", b"none")
            red = red.decode() if isinstance(red, bytes) else red
            if red not in _SCATTER_REDUCTIONS:
                raise ConverterError(f"{where}: reduction '{red}' is not one of {sorted(_SCATTER_REDUCTIONS)}")
            self._add(node, op, ins, {"axis": a.get("axis", 0), "reduction": _SCATTER_REDUCTIONS[red]})
        elif op == "TopK":
            self._add(node, op, ins, {"axis": a.get("axis", -1), "largest": bool(a.get("largest", 1)),
                                      "sorted": bool(a.get("sorted", 1))})
        elif op == "NonMaxSuppression":
            centre = int(a.get("center_point_box", 0))
            if centre not in (0, 1):
                raise ConverterError(f"{where}: center_point_box must be 0 or 1, got {centre}")
            self._add(node, op, ins, {"center_point_box": bool(centre)})
        elif op == "InstanceNormalization":
            self._add(node, op, ins, {"epsilon": a.get("epsilon", 1e-5)})
        elif op == "GroupNormalization":
            groups = int(a["num_groups"])
            if self.opset < 21:   # opset 18: scale/bias per group -> per channel (the canonical form)
                per_channel = []
                for name in ins[1:3]:
                    value = self.g.constant(name)
                    shape = self.value_shapes.get(ins[0])
                    if value is None or not shape or len(shape) < 2 or shape[1] < 0:
                        raise ConverterError(f"{where}: opset-18 GroupNormalization needs constant scale/bias and a "
                                             "static channel count")
                    per_channel.append(self.g.add_constant(f"{name}_per_channel",
                                                           np.repeat(value, shape[1] // groups).astype(value.dtype)))
                ins = [ins[0]] + per_channel
            self._add(node, op, ins, {"num_groups": groups, "epsilon": a.get("epsilon", 1e-5)})
        elif op == "LpNormalization":
            self._add(node, op, ins, {"axis": a.get("axis", -1), "p": a.get("p", 2)})
        elif op in ("ArgMax", "ArgMin"):
            self._add(node, op, ins, {"axis": a.get("axis", 0), "keepdims": bool(a.get("keepdims", 1)),
                                      "select_last_index": bool(a.get("select_last_index", 0))})
        elif op == "Transpose":
            self._add(node, op, ins, {"perm": a.get("perm", [])})
        elif op == "Split":
            if "split" in a:   # opset < 13 attribute form
                ins = [ins[0], self._const_input(f"{node.name}_split", a["split"])]
            self._add(node, op, ins, {"axis": a.get("axis", 0), "num_outputs": a.get("num_outputs", 0)})
        elif op == "Cast":
            self._add(node, op, ins, {"to": self._dtype(a["to"], where)})
        elif op == "CastLike":   # a Cast to the second input's dtype, known at convert time
            like = self.value_dtypes.get(ins[1]) or (self.g.tensors[ins[1]].dtype if ins[1] in self.g.tensors else None)
            if like is None:
                raise ConverterError(f"{where}: the dtype of target_type '{ins[1]}' is unknown")
            self._add(node, "Cast", ins[:1], {"to": np.dtype(like)})
        elif op == "Clip":
            attrs = {}
            if "min" in a or "max" in a:   # opset < 11 (kept for completeness)
                attrs = {"min": float(a.get("min", -3.4e38)), "max": float(a.get("max", 3.4e38))}
            self._add(node, op, ins, attrs)
        elif op == "LeakyRelu":
            self._add(node, op, ins, {"alpha": a.get("alpha", 0.01)})
        elif op == "Shape":
            attrs = {"start": a.get("start", 0)}
            if "end" in a:
                attrs["end"] = a["end"]
            self._add(node, op, ins, attrs)
        elif op == "Reshape":
            self._add(node, op, ins, {"allowzero": bool(a.get("allowzero", 0))})
        elif op in ("Squeeze", "Unsqueeze"):
            if "axes" in a:   # opset < 13 attribute form
                ins = [ins[0], self._const_input(f"{node.name}_axes", a["axes"])]
            self._add(node, op, ins, {})
        elif op == "Pow":
            base_t = self.value_dtypes.get(ins[0])
            exp_t = self.value_dtypes.get(ins[1]) or (self.g.tensors[ins[1]].dtype if ins[1] in self.g.tensors else None)
            if base_t is not None and exp_t is not None and exp_t != base_t:
                c = self.g.constant(ins[1])
                if c is not None:
                    ins = [ins[0], self.g.add_constant(f"{ins[1]}_as_{base_t}", c.astype(base_t))]
                else:
                    cast_out = self.g.unique_name(f"{ins[1]}_cast")
                    self.g.tensors[cast_out] = Tensor(cast_out, base_t, self.value_shapes.get(ins[1]))
                    self.g.nodes.append(Node(f"{node.name}_exp_cast", "Cast", [ins[1]], [cast_out], {"to": base_t}))
                    ins = [ins[0], cast_out]
            self._add(node, op, ins, {})
        elif op == "GlobalAveragePool" or op in SUPPORTED:
            if a:
                raise ConverterError(f"{where}: unexpected attributes {sorted(a)}")
            self._add(node, op, ins, {})
        else:  # guarded by _check_supported
            raise ConverterError(f"{where}: unsupported operator")

    def _recurrent_attrs(self, op: str, a: dict[str, Any], where: str) -> dict[str, Any]:
        direction = a.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in _RNN_DIRECTIONS:
            raise ConverterError(f"{where}: direction '{direction}' is not forward, reverse or bidirectional")
        names = [n.decode() if isinstance(n, bytes) else n for n in a.get("activations", [])]
        alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
        kinds, alpha_out, beta_out = [], [], []
        for name in names:   # alpha/beta lists are consumed in order by the functions that take them
            if name not in _RNN_ACTIVATIONS:
                raise ConverterError(f"{where}: activation '{name}' is not supported")
            kind, (da, db) = _RNN_ACTIVATIONS[name]
            kinds.append(kind)
            alpha_out.append(alphas.pop(0) if da is not None and alphas else (da or 0.0))
            beta_out.append(betas.pop(0) if db is not None and betas else (db or 0.0))
        if "hidden_size" not in a:
            raise ConverterError(f"{where}: hidden_size is required")
        return {"hidden_size": a["hidden_size"], "direction": _RNN_DIRECTIONS[direction], "activations": kinds,
                "activation_alpha": alpha_out, "activation_beta": beta_out, "clip": a.get("clip", 0.0),
                "input_forget": bool(a.get("input_forget", 0)), "layout": a.get("layout", 0),
                "linear_before_reset": bool(a.get("linear_before_reset", 0))}

    def _resize_attrs(self, a: dict[str, Any], where: str) -> dict[str, Any]:
        def text(key: str, default: str) -> str:
            v = a.get(key, default)
            return v.decode() if isinstance(v, bytes) else v

        mode, ctm, nearest = text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel"), \
            text("nearest_mode", "round_prefer_floor")
        problems = []
        if mode not in _RESIZE_MODES:
            problems.append(f"mode '{mode}'")
        if ctm not in _COORD_MODES:
            problems.append(f"coordinate_transformation_mode '{ctm}'")
        if nearest not in _NEAREST_MODES:
            problems.append(f"nearest_mode '{nearest}'")
        if a.get("antialias", 0):
            problems.append("antialias=1")
        if text("keep_aspect_ratio_policy", "stretch") != "stretch":
            problems.append(f"keep_aspect_ratio_policy '{text('keep_aspect_ratio_policy', '')}'")
        if problems:
            raise ConverterError(f"{where}: unsupported {', '.join(problems)}")
        return {"mode": _RESIZE_MODES[mode], "coordinate_transform": _COORD_MODES[ctm],
                "nearest_mode": _NEAREST_MODES[nearest], "cubic_coeff_a": a.get("cubic_coeff_a", -0.75),
                "exclude_outside": bool(a.get("exclude_outside", 0)),
                "extrapolation_value": a.get("extrapolation_value", 0.0), "axes": a.get("axes", [])}

    def _import_body(self, body: onnx.GraphProto, captures: list[str], where: str) -> Graph:
        """Imports a control-flow body; `captures` (outer names it reads) become its trailing inputs."""
        sub_model = onnx.ModelProto()
        sub_model.graph.CopyFrom(body)
        sub_model.opset_import.extend(self.model.opset_import)
        sub = _Importer(sub_model, self.g.metadata.get("source_model", ""))
        sub.value_shapes.update(self.value_shapes)
        sub.value_dtypes.update(self.value_dtypes)
        outer = []
        for name in captures:
            t = self.g.tensors.get(name)
            if t is None:
                raise ConverterError(f"{where}: the body reads '{name}', which is not defined outside it")
            outer.append(Tensor(name, t.dtype, t.shape))
        graph = sub.run(outer)
        graph.name = body.name or "body"
        return graph

    def _control_flow(self, node: onnx.NodeProto, a: dict[str, Any], where: str) -> None:
        """If (data-dependent condition), Loop and Scan: bodies become sub-graphs; the outer values they
        read are appended to the node's inputs so every graph is self-contained."""
        op = node.op_type
        bodies = [a[k] for k in ("then_branch", "else_branch", "body") if k in a]
        captures = sorted(set().union(*(_free_names(b) for b in bodies)))
        attrs: dict[str, Any] = {}
        if op == "If":
            attrs["then_branch"] = self._import_body(a["then_branch"], captures, where)
            attrs["else_branch"] = self._import_body(a["else_branch"], captures, where)
        else:
            attrs["body"] = self._import_body(a["body"], captures, where)
            if op == "Loop":
                attrs["num_carried"] = len(node.input) - 2
            else:
                attrs["num_scan_inputs"] = a["num_scan_inputs"]
                attrs["num_states"] = len(node.input) - a["num_scan_inputs"]
                for k in ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"):
                    attrs[k] = list(a.get(k, []))
        ins = list(node.input)
        if op == "Loop":   # M and cond are optional but positional
            ins = [i or "" for i in ins]
        self._add(node, op, ins + captures, attrs)
        # keep the empty-string placeholders of optional inputs (M, cond) in place
        self.g.nodes[-1].inputs = ins + captures

    def _inline_constant_if(self, node: onnx.NodeProto, a: dict[str, Any], where: str) -> None:
        """If with a condition known at convert time: the taken branch is inlined, the other dropped."""
        from ..passes.constant_folding import fold_constants
        cond = self.g.constant(node.input[0])
        if cond is None:
            fold_constants(self.g)   # the condition often comes from shape arithmetic on static shapes
            cond = self.g.constant(node.input[0])
        if cond is None or cond.size != 1:
            self._control_flow(node, a, where)   # decided at run time
            return
        branch = a["then_branch"] if bool(cond.reshape(-1)[0]) else a["else_branch"]
        prefix = (node.name or "if") + "/"
        rename = {}
        for init in branch.initializer:
            rename[init.name] = self.g.add_constant(prefix + init.name, self._to_numpy(init, where))
        for inner in branch.node:
            for o in inner.output:
                if o:
                    rename[o] = self.g.unique_name(prefix + o)
        for out, branch_out in zip(node.output, branch.output):
            if branch_out.name in rename and branch_out.name not in {i.name for i in branch.initializer}:
                rename[branch_out.name] = out
        for vi in list(branch.value_info) + list(branch.output):
            if vi.name in rename and vi.type.tensor_type.elem_type:
                self.value_dtypes[rename[vi.name]] = self._dtype(vi.type.tensor_type.elem_type, where)
        for inner in branch.node:
            clone = onnx.NodeProto()
            clone.CopyFrom(inner)
            clone.name = prefix + (inner.name or inner.op_type)
            clone.input[:] = [rename.get(i, i) for i in inner.input]
            clone.output[:] = [rename.get(o, o) for o in inner.output]
            self._import_node(clone)
        for out, branch_out in zip(node.output, branch.output):   # outputs the branch passes through
            src = rename.get(branch_out.name, branch_out.name)
            if src != out:
                dtype = self.g.tensors[src].dtype if src in self.g.tensors else np.dtype(np.float32)
                self.g.tensors[out] = Tensor(out, dtype, None)
                self.g.nodes.append(Node(f"{prefix}{out}_copy", "Cast", [src], [out], {"to": dtype, "_identity": True}))

    def _auto_pad(self, a: dict[str, Any], where: str) -> int:
        v = a.get("auto_pad", b"NOTSET")
        v = v.decode() if isinstance(v, bytes) else v
        if v not in _AUTO_PAD:
            raise ConverterError(f"{where}: auto_pad '{v}' is not one of {sorted(_AUTO_PAD)}")
        return _AUTO_PAD[v]

    def _constant(self, node: onnx.NodeProto, a: dict[str, Any]) -> None:
        where = f"node '{node.name}' (Constant)"
        if "value" in a:
            arr = self._to_numpy(a["value"], where)
        elif "value_float" in a:
            arr = np.array(a["value_float"], dtype=np.float32)
        elif "value_floats" in a:
            arr = np.array(a["value_floats"], dtype=np.float32)
        elif "value_int" in a:
            arr = np.array(a["value_int"], dtype=np.int64)
        elif "value_ints" in a:
            arr = np.array(a["value_ints"], dtype=np.int64)
        else:
            raise ConverterError(f"{where}: only tensor, float(s) and int(s) values are supported, got {sorted(a)}")
        out = node.output[0]
        self.g.tensors[out] = Tensor(out, arr.dtype, list(arr.shape), np.asarray(arr, order="C"))


def _compare_declared_shapes(declared: dict[str, list[int] | None], model: onnx.ModelProto) -> None:
    """Declared shapes are hints: where inference computes something else, say so (computed wins)."""
    computed = {vi.name: _shape_of(vi) for vi in list(model.graph.value_info) + list(model.graph.output)}
    for name, want in declared.items():
        got = computed.get(name)
        if want is None or got is None or len(want) != len(got):
            if want is not None and got is not None:
                warnings.warn(f"tensor '{name}': declared rank {len(want)} disagrees with computed shape {got}; "
                              "using the computed shape")
            continue
        for w, g in zip(want, got):
            if w >= 0 and g >= 0 and w != g:
                warnings.warn(f"tensor '{name}': declared shape {want} disagrees with computed shape {got}; "
                              "using the computed shape")
                break


_INFERENCE_MAX_INITIALIZER = 4096   # elements: larger initializers reach shape inference as typed inputs


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference on the graph without its large initializers' data (each one becomes a graph input of
    the same type and shape): the inference serialises the whole model, which for BERT-base's 435 MB of weights
    was half of the conversion time. Shape inputs (Reshape's target, Slice's bounds) are small and keep their
    values. The inferred value infos and node attributes (sub-graphs) are copied back into `model`."""
    g = model.graph
    large = [t for t in g.initializer if int(np.prod(t.dims, dtype=np.int64)) > _INFERENCE_MAX_INITIALIZER]
    if not large:
        return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    large_names = {t.name for t in large}
    light = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(light, field, getattr(model, field))
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    lg = light.graph
    lg.name = g.name
    lg.node.extend(g.node)
    declared_inputs = {vi.name for vi in g.input}
    lg.input.extend(g.input)
    lg.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in large
                    if t.name not in declared_inputs)
    lg.initializer.extend(t for t in g.initializer if t.name not in large_names)
    lg.sparse_initializer.extend(g.sparse_initializer)
    lg.output.extend(g.output)
    lg.value_info.extend(g.value_info)
    inferred = shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    del g.value_info[:]
    g.value_info.extend(inferred.graph.value_info)
    for out, done in zip(g.output, inferred.graph.output):
        out.type.CopyFrom(done.type)
    del g.node[:]
    g.node.extend(inferred.graph.node)   # sub-graphs carry their own inferred value infos
    return model


def upgrade_old_opset(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int | None]:
    """A model below opset MIN_OPSET, rewritten by onnx.version_converter to MIN_OPSET (old attribute forms
    become inputs, Upsample becomes Resize, ...); returns (model, the opset it had) or (model, None) when it
    needed nothing. A model the version converter cannot upgrade is refused with its reason."""
    old = _opset(model)
    if old >= MIN_OPSET:
        return model, None
    from onnx import version_converter
    try:
        upgraded = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:   # the adapters raise RuntimeError/ValueError with the node they failed on
        raise ConverterError(f"ONNX opset {old} is older than the oldest supported ({MIN_OPSET}) and "
                             f"onnx.version_converter cannot upgrade it: {' '.join(str(e).split())}") from None
    # The upgrade must keep the model's interface: some adapters (opset 8's batched Scan) rewrite the graph inputs,
    # and the caller's arrays would no longer fit.
    changed = []
    for kind, before, after in (("input", model.graph.input, upgraded.graph.input),
                                ("output", model.graph.output, upgraded.graph.output)):
        after_by_name = {v.name: v for v in after}
        for v in before:
            w = after_by_name.get(v.name)
            if w is None or _symbolic_shape_of(v) != _symbolic_shape_of(w) or \
                    v.type.tensor_type.elem_type != w.type.tensor_type.elem_type:
                changed.append(f"{kind} '{v.name}' {_symbolic_shape_of(v)} -> "
                               f"{_symbolic_shape_of(w) if w is not None else 'removed'}")
    if changed:
        raise ConverterError(f"ONNX opset {old} is older than the oldest supported ({MIN_OPSET}); upgrading it with "
                             f"onnx.version_converter changes the model's interface ({'; '.join(changed)}); "
                             "export the model at opset 11 or newer")
    return upgraded, old


def import_onnx(path: str, input_shapes: dict[str, list[int]] | None = None, weight_file: str | None = None) -> Graph:
    model = load_onnx(path, weight_file)
    model, upgraded_from = upgrade_old_opset(model)
    if upgraded_from is not None:
        warnings.warn(f"'{os.path.basename(path)}' is ONNX opset {upgraded_from}; upgraded to opset {MIN_OPSET} "
                      "with onnx.version_converter before converting")
    _apply_input_shapes(model, input_shapes or {})
    # Intermediate shapes a model declares are hints; inference recomputes them from the inputs.
    declared = {vi.name: _shape_of(vi) for vi in model.graph.value_info}
    declared.update({o.name: _shape_of(o) for o in model.graph.output})
    declared_symbols = {vi.name: _symbolic_shape_of(vi) for vi in model.graph.value_info}
    del model.graph.value_info[:]
    for o in model.graph.output:
        o.type.tensor_type.ClearField("shape")
    try:
        model = _infer_shapes(model)
    except Exception as e:  # shapes are hints only: the converter's own passes derive dtypes
        warnings.warn(f"ONNX shape inference failed, continuing without shape hints: {e}")
    _compare_declared_shapes(declared, model)
    for vi in model.graph.input:
        if vi.name not in {i.name for i in model.graph.initializer} and not vi.type.tensor_type.HasField("shape"):
            raise ConverterError(f"graph input '{vi.name}' has no shape (unknown rank); give it with "
                                 f"--inputShape={vi.name}:d0,d1,...")
    graph = _Importer(model, path).run()
    if upgraded_from is not None:
        graph.metadata["onnx_opset_upgraded_from"] = str(upgraded_from)
    _merge_declared_symbols(graph, declared_symbols)
    return graph


def _merge_declared_symbols(graph: Graph, declared: dict[str, list[int | str | None] | None]) -> None:
    """Where the exporter named a dim that inference left anonymous (torch.export's "s", "b" against ONNX's
    "unk__7"), keeps the exporter's name: equal names are what let passes prove equal sizes. Declarations that
    contradict the inferred shape (rank, or a static size) are ignored."""
    for name, want in declared.items():
        got = graph.symbolic_shapes.get(name)
        if want is None or got is None or len(want) != len(got):
            continue
        if any(isinstance(w, int) and isinstance(g, int) and w != g for w, g in zip(want, got)):
            continue
        graph.symbolic_shapes[name] = [g if isinstance(g, int) else (w if w is not None else g)
                                       for w, g in zip(want, got)]
