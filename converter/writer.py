"""IR -> .ms file: 64-byte header, FlatBuffers graph (generated `ms_schema` code), aligned weights.
Writes atomically: a temp file in the target directory, fsync, rename."""
from __future__ import annotations

import contextlib
import os
import queue
import struct
import tempfile
import threading
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable

import flatbuffers
import numpy as np

from ms_schema import Activation, Attribute, DataType, OpType
from ms_schema.ActivationAttr import ActivationAttrT
from ms_schema.AlphaAttr import AlphaAttrT
from ms_schema.ArgAttr import ArgAttrT
from ms_schema.BitShiftAttr import BitShiftAttrT
from ms_schema.GeluAttr import GeluAttrT
from ms_schema.MatMulAttr import MatMulAttrT
from ms_schema.AttentionAttr import AttentionAttrT
from ms_schema.RotaryAttr import RotaryAttrT
from ms_schema.MoEAttr import MoEAttrT
from ms_schema.CausalConvAttr import CausalConvAttrT
from ms_schema.GatedDeltaAttr import GatedDeltaAttrT
from ms_schema.IsInfAttr import IsInfAttrT
from ms_schema.BatchDimsAttr import BatchDimsAttrT
from ms_schema.ConvTransposeAttr import ConvTransposeAttrT
from ms_schema.CompressAttr import CompressAttrT
from ms_schema.CumSumAttr import CumSumAttrT
from ms_schema.DftAttr import DftAttrT
from ms_schema.EinsumAttr import EinsumAttrT
from ms_schema.LRNAttr import LRNAttrT
from ms_schema.ReverseSequenceAttr import ReverseSequenceAttrT
from ms_schema.RecurrentAttr import RecurrentAttrT
from ms_schema.ResizeAttr import ResizeAttrT
from ms_schema.DepthSpaceAttr import DepthSpaceAttrT
from ms_schema.GroupNormAttr import GroupNormAttrT
from ms_schema.LpNormAttr import LpNormAttrT
from ms_schema.IfAttr import IfAttrT
from ms_schema.LoopAttr import LoopAttrT
from ms_schema.ModAttr import ModAttrT
from ms_schema.ScanAttr import ScanAttrT
from ms_schema.PadAttr import PadAttrT
from ms_schema.ScatterAttr import ScatterAttrT
from ms_schema.TopKAttr import TopKAttrT
from ms_schema.NmsAttr import NmsAttrT
from ms_schema.TriluAttr import TriluAttrT
from ms_schema.AxisAttr import AxisAttrT
from ms_schema.CastAttr import CastAttrT
from ms_schema.ClipAttr import ClipAttrT
from ms_schema.ConvAttr import ConvAttrT
from ms_schema.GemmAttr import GemmAttrT
from ms_schema.Graph import GraphT
from ms_schema.KeyValue import KeyValueT
from ms_schema.Model import ModelT
from ms_schema.Node import NodeT
from ms_schema.NormAttr import NormAttrT
from ms_schema.PoolAttr import PoolAttrT
from ms_schema.ReduceAttr import ReduceAttrT
from ms_schema.ReshapeAttr import ReshapeAttrT
from ms_schema.ShapeAttr import ShapeAttrT
from ms_schema.SoftmaxAttr import SoftmaxAttrT
from ms_schema.SplitAttr import SplitAttrT
from ms_schema.Tensor import TensorT
from ms_schema.IntegerCompute import IntegerComputeT
from ms_schema.QuantParam import QuantParamT
from ms_schema.TransposeAttr import TransposeAttrT

from . import __version__
from .deferred import DeferredArray, ScatteredTranspose, StoragePlan, describe, encode
from .dtypes import ms_from_numpy
from lite._memfile import anonymous_fd

from .progress import Progress
from .ir import ConverterError, Graph, Node
from .quantization.encoding import decode as decode_stored

# Attention operand layouts (schema enum AttentionLayout).
ATTENTION_LAYOUTS = {"BNSD": 0, "BSND": 1, "BNDS": 2}
MAGIC = b"MSLITE\x1a\n"
FORMAT_MAJOR, FORMAT_MINOR = 1, 16
INT8_COMPUTE = "int8_compute"   # node attribute: how a quantised node runs in integer arithmetic
HEADER = struct.Struct("<8sHHIQQQQIIQ")
ALIGN = 64
FILE_IDENTIFIER = b"LMS1"

_ACTIVATIONS = {None: Activation.Activation.NONE, "relu": Activation.Activation.RELU,
                "relu6": Activation.Activation.RELU6, "sigmoid": Activation.Activation.SIGMOID,
                "tanh": Activation.Activation.TANH, "hard_swish": Activation.Activation.HARD_SWISH,
                "gelu": Activation.Activation.GELU, "silu": Activation.Activation.SILU,
                "gelu_tanh": Activation.Activation.GELU_TANH, "quick_gelu": Activation.Activation.QUICK_GELU}


@dataclass
class WriteSummary:
    path: str
    nodes: int
    tensors: int
    weight_bytes: int
    file_bytes: int


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _ints(v) -> list[int]:
    return [int(x) for x in (v or [])]


def _attribute(node: Node, packer=None):
    """Returns (Attribute union type, attribute object) in schema form. `packer` lays out sub-graphs."""
    a, op = node.attrs, node.op_type
    A = Attribute.Attribute
    if op == "If":
        t = IfAttrT()
        t.thenGraph = packer.add(a["then_branch"]) if packer else 0
        t.elseGraph = packer.add(a["else_branch"]) if packer else 0
        return A.IfAttr, t
    if op == "Loop":
        t = LoopAttrT()
        t.body = packer.add(a["body"]) if packer else 0
        t.numCarried = int(a.get("num_carried", 0))
        return A.LoopAttr, t
    if op == "Scan":
        t = ScanAttrT()
        t.body = packer.add(a["body"]) if packer else 0
        t.numStates, t.numScanInputs = int(a.get("num_states", 0)), int(a.get("num_scan_inputs", 1))
        t.scanInputAxes, t.scanInputDirections = _ints(a.get("scan_input_axes")), _ints(a.get("scan_input_directions"))
        t.scanOutputAxes, t.scanOutputDirections = _ints(a.get("scan_output_axes")), _ints(a.get("scan_output_directions"))
        return A.ScanAttr, t
    if op == "Conv":
        t = ConvAttrT()
        t.kernelShape, t.strides, t.pads, t.dilations = (_ints(a.get(k)) for k in
                                                         ("kernel_shape", "strides", "pads", "dilations"))
        t.group, t.autoPad = int(a.get("group", 1)), int(a.get("auto_pad", 0))
        t.activation = _ACTIVATIONS[a.get("activation")]
        return A.ConvAttr, t
    if op in ("MaxPool", "AveragePool", "LpPool", "MaxUnpool"):
        t = PoolAttrT()
        t.kernelShape, t.strides, t.pads, t.dilations = (_ints(a.get(k)) for k in
                                                         ("kernel_shape", "strides", "pads", "dilations"))
        t.autoPad, t.ceilMode = int(a.get("auto_pad", 0)), bool(a.get("ceil_mode"))
        t.countIncludePad = bool(a.get("count_include_pad"))
        t.p = int(a.get("p", 2))
        return A.PoolAttr, t
    if op == "MatMul" and (a.get("activation") or a.get("b_transposed")):
        t = MatMulAttrT()
        t.activation = _ACTIVATIONS[a.get("activation")]
        t.bTransposed = bool(a.get("b_transposed"))
        return A.MatMulAttr, t
    if op == "Attention":
        t = AttentionAttrT()
        t.scale, t.isCausal = float(a.get("scale", 0.0)), bool(a.get("is_causal"))
        t.qNumHeads, t.kvNumHeads = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
        t.qLayout, t.kLayout, t.vLayout, t.outLayout = (
            ATTENTION_LAYOUTS[a.get(k, "BNSD")] for k in ("q_layout", "k_layout", "v_layout", "out_layout"))
        t.zeroMaskedRows = bool(a.get("zero_masked_rows"))
        t.leftWindowSize, t.rightWindowSize = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
        t.softcap = float(a.get("softcap", 0.0))
        t.paged = bool(a.get("paged"))
        t.blockSize = int(a.get("block_size", 0))
        return A.AttentionAttr, t
    if op == "MoE":
        t = MoEAttrT()
        t.topK, t.normalizeTopK = int(a.get("top_k", 2)), bool(a.get("normalize_top_k"))
        t.activation = _ACTIVATIONS[a.get("activation", "silu")]
        return A.MoEAttr, t
    if op == "CausalConv1D":
        t = CausalConvAttrT()
        t.activation = _ACTIVATIONS[a.get("activation")]
        return A.CausalConvAttr, t
    if op == "GatedDeltaRule":
        t = GatedDeltaAttrT()
        t.scale, t.qkL2norm = float(a.get("scale", 0.0)), bool(a.get("qk_l2norm", True))
        return A.GatedDeltaAttr, t
    if op == "RotaryEmbedding":
        t = RotaryAttrT()
        t.interleaved, t.numHeads = bool(a.get("interleaved")), int(a.get("num_heads", 0))
        t.rotaryEmbeddingDim = int(a.get("rotary_embedding_dim", 0))
        return A.RotaryAttr, t
    if op == "Gemm":
        t = GemmAttrT()
        t.alpha, t.beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        t.transA, t.transB = bool(a.get("trans_a")), bool(a.get("trans_b"))
        t.activation = _ACTIVATIONS[a.get("activation")]
        return A.GemmAttr, t
    if op in ("Concat", "Flatten", "Gather", "GatherElements", "OneHot"):
        t = AxisAttrT()
        t.axis = int(a.get("axis", {"Flatten": 1, "OneHot": -1}.get(op, 0)))
        return A.AxisAttr, t
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        t = SoftmaxAttrT()
        t.axis, t.coerce2d = int(a.get("axis", -1)), bool(a.get("coerce_2d"))
        return A.SoftmaxAttr, t
    if op in ("LayerNormalization", "RMSNormalization", "BatchNormalization", "InstanceNormalization"):
        t = NormAttrT()
        t.axis, t.epsilon = int(a.get("axis", -1)), float(a.get("epsilon", 1e-5))
        return A.NormAttr, t
    if op.startswith("Reduce"):
        t = ReduceAttrT()
        t.keepdims, t.noopWithEmptyAxes = bool(a.get("keepdims", True)), bool(a.get("noop_with_empty_axes"))
        return A.ReduceAttr, t
    if op == "Transpose":
        t = TransposeAttrT()
        t.perm = _ints(a.get("perm"))
        return A.TransposeAttr, t
    if op == "Split":
        t = SplitAttrT()
        t.axis, t.numOutputs = int(a.get("axis", 0)), int(a.get("num_outputs", 0))
        return A.SplitAttr, t
    if op == "Cast":
        t = CastAttrT()
        t.to = ms_from_numpy(a["to"])
        return A.CastAttr, t
    if op == "Clip":
        t = ClipAttrT()
        t.min, t.max = float(a.get("min", -3.4e38)), float(a.get("max", 3.4e38))
        return A.ClipAttr, t
    if op == "LeakyRelu":
        t = AlphaAttrT()
        t.alpha = float(a.get("alpha", 0.01))
        return A.AlphaAttr, t
    if op == "Shape":
        t = ShapeAttrT()
        t.start = int(a.get("start", 0))
        if "end" in a:
            t.end = int(a["end"])
        return A.ShapeAttr, t
    if op == "Reshape":
        t = ReshapeAttrT()
        t.allowzero = bool(a.get("allowzero"))
        return A.ReshapeAttr, t
    if op in ("Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu"):
        t = ActivationAttrT()
        t.alpha, t.beta, t.gamma = (float(a.get(k, 0.0)) for k in ("alpha", "beta", "gamma"))
        return A.ActivationAttr, t
    if op == "Gelu":
        t = GeluAttrT()
        t.tanhApproximation = bool(a.get("tanh_approximation"))
        return A.GeluAttr, t
    if op == "Mod":
        t = ModAttrT()
        t.fmod = bool(a.get("fmod"))
        return A.ModAttr, t
    if op == "BitShift":
        t = BitShiftAttrT()
        t.left = bool(a.get("left", True))
        return A.BitShiftAttr, t
    if op == "IsInf":
        t = IsInfAttrT()
        t.detectPositive, t.detectNegative = bool(a.get("detect_positive", True)), bool(a.get("detect_negative", True))
        return A.IsInfAttr, t
    if op in ("ArgMax", "ArgMin"):
        t = ArgAttrT()
        t.axis, t.keepdims = int(a.get("axis", 0)), bool(a.get("keepdims", True))
        t.selectLastIndex = bool(a.get("select_last_index"))
        return A.ArgAttr, t
    if op == "ConvTranspose":
        t = ConvTransposeAttrT()
        t.kernelShape, t.strides, t.pads, t.dilations, t.outputPadding, t.outputShape = (
            _ints(a.get(k)) for k in ("kernel_shape", "strides", "pads", "dilations", "output_padding", "output_shape"))
        t.group, t.autoPad = int(a.get("group", 1)), int(a.get("auto_pad", 0))
        return A.ConvTransposeAttr, t
    if op == "Resize":
        t = ResizeAttrT()
        t.mode, t.coordinateTransform, t.nearestMode = (int(a.get(k, 0)) for k in
                                                        ("mode", "coordinate_transform", "nearest_mode"))
        t.cubicCoeffA, t.excludeOutside = float(a.get("cubic_coeff_a", -0.75)), bool(a.get("exclude_outside"))
        t.extrapolationValue, t.axes = float(a.get("extrapolation_value", 0.0)), _ints(a.get("axes"))
        return A.ResizeAttr, t
    if op in ("LSTM", "GRU", "RNN"):
        t = RecurrentAttrT()
        t.hiddenSize, t.direction = int(a.get("hidden_size", 0)), int(a.get("direction", 0))
        t.activations = [int(k) for k in a.get("activations", [])]
        t.activationAlpha = [float(v) for v in a.get("activation_alpha", [])]
        t.activationBeta = [float(v) for v in a.get("activation_beta", [])]
        t.clip, t.inputForget, t.layout = float(a.get("clip", 0.0)), bool(a.get("input_forget")), int(a.get("layout", 0))
        t.linearBeforeReset = bool(a.get("linear_before_reset"))
        return A.RecurrentAttr, t
    if op in ("DFT", "STFT"):
        t = DftAttrT()
        t.axis, t.inverse, t.onesided = int(a.get("axis", 1)), bool(a.get("inverse")), bool(a.get("onesided"))
        return A.DftAttr, t
    if op == "Einsum":
        t = EinsumAttrT()
        t.equation = a["equation"]
        return A.EinsumAttr, t
    if op == "Compress":
        t = CompressAttrT()
        t.hasAxis = "axis" in a
        t.axis = int(a.get("axis", 0))
        return A.CompressAttr, t
    if op == "ReverseSequence":
        t = ReverseSequenceAttrT()
        t.batchAxis, t.timeAxis = int(a.get("batch_axis", 1)), int(a.get("time_axis", 0))
        return A.ReverseSequenceAttr, t
    if op == "LRN":
        t = LRNAttrT()
        t.alpha, t.beta, t.bias, t.size = (float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)),
                                           float(a.get("bias", 1.0)), int(a.get("size", 1)))
        return A.LRNAttr, t
    if op == "Trilu":
        t = TriluAttrT()
        t.upper = bool(a.get("upper", True))
        return A.TriluAttr, t
    if op == "CumSum":
        t = CumSumAttrT()
        t.exclusive, t.reverse = bool(a.get("exclusive")), bool(a.get("reverse"))
        return A.CumSumAttr, t
    if op == "Pad":
        t = PadAttrT()
        t.mode = int(a.get("mode", 0))
        return A.PadAttr, t
    if op in ("DepthToSpace", "SpaceToDepth"):
        t = DepthSpaceAttrT()
        t.blocksize, t.crd = int(a.get("blocksize", 1)), bool(a.get("crd"))
        return A.DepthSpaceAttr, t
    if op == "GatherND":
        t = BatchDimsAttrT()
        t.batchDims = int(a.get("batch_dims", 0))
        return A.BatchDimsAttr, t
    if op in ("ScatterElements", "ScatterND"):
        t = ScatterAttrT()
        t.axis, t.reduction = int(a.get("axis", 0)), int(a.get("reduction", 0))
        return A.ScatterAttr, t
    if op == "NonMaxSuppression":
        t = NmsAttrT()
        t.centerPointBox = bool(a.get("center_point_box"))
        return A.NmsAttr, t
    if op == "TopK":
        t = TopKAttrT()
        t.axis, t.largest, t.sorted = int(a.get("axis", -1)), bool(a.get("largest", True)), bool(a.get("sorted", True))
        return A.TopKAttr, t
    if op == "GroupNormalization":
        t = GroupNormAttrT()
        t.numGroups, t.epsilon = int(a.get("num_groups", 1)), float(a.get("epsilon", 1e-5))
        return A.GroupNormAttr, t
    if op == "LpNormalization":
        t = LpNormAttrT()
        t.axis, t.p = int(a.get("axis", -1)), int(a.get("p", 2))
        return A.LpNormAttr, t
    return A.NONE, None


SUBGRAPH_ATTRS = ("then_branch", "else_branch", "body")


def subgraphs(node: Node) -> list[Graph]:
    return [node.attrs[k] for k in SUBGRAPH_ATTRS if isinstance(node.attrs.get(k), Graph)]


class _Packer:
    """Lays out every graph (main first, then control-flow bodies, each after its user) and all constants
    in one weight section."""

    def __init__(self) -> None:
        self.graphs: list[GraphT] = []
        # (offset, length, producer of the bytes): constants are laid out first and written after the graph section
        self.blobs: list[tuple[int, int, Callable[[], Iterable]]] = []
        self.offset = 0

    def _place(self, length: int, produce: Callable[[], Iterable]) -> int:
        offset = self.offset
        self.blobs.append((offset, length, produce))
        self.offset = _align(offset + length)
        return offset

    def _deferred(self, name: str, t, ft: TensorT) -> None:
        """A constant read and encoded when written, a block of rows at a time (a checkpoint's weights: deferred.py),
        or by bands of source rows for a large transpose; its length and scales are known now (integer plans read
        the values once for their scales)."""
        ft.shape = list(t.data.shape)
        plan = t.stored if isinstance(t.stored, StoragePlan) else None
        scattered = ScatteredTranspose(t.data, plan) if ScatteredTranspose.applies(t.data, plan) else None
        try:
            length, stored = scattered.describe() if scattered else describe(t.data, plan)
        except (OSError, ValueError) as e:
            raise ConverterError(f"constant '{name}' ({t.data.source}): {e}") from e
        if stored is not None:
            ft.storage, ft.quant = _fields_of(name, stored)

        def produce(values=t.data):
            try:
                yield from encode(values, plan, stored, release_after_write=True)
            except (OSError, ValueError) as e:
                raise ConverterError(f"constant '{name}' ({values.source}): {e}") from e
            values.release()
        ft.hasData, ft.dataLength = True, length
        ft.dataOffset = self._place(length, scattered or produce)

    def add(self, graph: Graph) -> int:
        index = len(self.graphs)
        self.graphs.append(GraphT())   # reserve the slot: bodies get larger indices than their user
        names = list(graph.inputs)
        names += [n for n, t in graph.tensors.items() if t.is_constant and n not in names]
        seen = set(names)
        for node in graph.nodes:
            for o in node.outputs:
                if o and o not in seen:
                    names.append(o)
                    seen.add(o)
        for o in graph.outputs:   # an output that is a constant or input is already listed
            if o not in seen:
                raise ConverterError(f"graph output '{o}' is not produced")
        pos = {n: i for i, n in enumerate(names)}
        tensors = []
        for name in names:
            t = graph.tensors[name]
            ft = TensorT()
            ft.name = name
            ft.dtype = ms_from_numpy(t.dtype)
            if t.shape is not None:
                ft.shape = [int(d) for d in t.shape]
            if t.act_quant is not None:   # format 1.11: a uint8 activation with its scale and zero point
                ft.quant = QuantParamT()
                ft.quant.scale = np.array([t.act_quant[0]], np.float32)
                ft.quant.zeroPoint = np.array([t.act_quant[1]], np.int64)
            if t.is_constant and isinstance(t.data, DeferredArray):
                self._deferred(name, t, ft)
            elif t.is_constant:
                arr = np.asarray(t.data, order="C")
                ft.shape = list(arr.shape)
                if t.stored is not None and _stored_matches(t):   # compressed: the bytes as encoded
                    ft.storage, ft.quant = _storage_fields(name, t)
                    arr = np.ascontiguousarray(t.stored.data)
                ft.hasData, ft.dataLength = True, arr.nbytes
                # little-endian hosts only (all supported targets)
                ft.dataOffset = self._place(arr.nbytes, lambda arr=arr: [_byte_view(arr)])
            tensors.append(ft)
        nodes = []
        for node in graph.nodes:
            if node.op_type not in OpType.OpType.__dict__:
                raise ConverterError(f"node '{node.name}': operator {node.op_type} has no schema code")
            fn = NodeT()
            fn.name = node.name
            fn.op = getattr(OpType.OpType, node.op_type)
            fn.inputs = [pos[i] if i else -1 for i in node.inputs]
            fn.outputs = [pos[o] for o in node.outputs if o]
            fn.attrType, fn.attr = _attribute(node, self)
            fn.int8 = _integer_compute(node)
            nodes.append(fn)
        g = self.graphs[index]
        g.name, g.tensors, g.nodes = graph.name, tensors, nodes
        g.inputs = [pos[i] for i in graph.inputs]
        g.outputs = [pos[o] for o in graph.outputs]
        return index


def _integer_compute(node: Node) -> IntegerComputeT | None:
    """Node.int8 (format 1.8) from the attribute the quantisation step sets: {"scale", "zero_point"} or
    {"dynamic": True}."""
    spec = node.attrs.get(INT8_COMPUTE)
    if spec is None:
        return None
    t = IntegerComputeT()
    t.dynamic = bool(spec.get("dynamic", False))
    if not t.dynamic:
        t.inputScale, t.inputZeroPoint = float(spec["scale"]), int(spec["zero_point"])
    return t


_STORAGE_CODES = {"float16": DataType.DataType.FLOAT16, "bfloat16": DataType.DataType.BFLOAT16,
                  "int8": DataType.DataType.INT8, "uint8": DataType.DataType.UINT8}


def _stored_matches(t) -> bool:
    """A pass may have rewritten a constant after its storage was chosen (a folded transpose of an imported
    QDQ weight): then the float32 values are written instead."""
    try:
        return t.data.dtype == np.float32 and np.array_equal(decode_stored(t.stored, t.data.shape), t.data)
    except (ValueError, IndexError):
        return False


def _storage_fields(name: str, t) -> tuple[int, QuantParamT | None]:
    if t.data.dtype != np.float32 or t.stored.storage not in _STORAGE_CODES:
        raise ConverterError(f"constant '{name}' ({t.data.dtype}) cannot be stored as {t.stored.storage}")
    return _fields_of(name, t.stored)


def _fields_of(name: str, stored) -> tuple[int, QuantParamT | None]:
    if stored.storage not in _STORAGE_CODES:
        raise ConverterError(f"constant '{name}' cannot be stored as {stored.storage}")
    if stored.scale is None:
        return _STORAGE_CODES[stored.storage], None
    q = QuantParamT()
    q.scale = np.ascontiguousarray(stored.scale, np.float32)
    q.zeroPoint = None if stored.zero_point is None else np.ascontiguousarray(stored.zero_point, np.int64)
    q.axis, q.bits, q.groupSize = int(stored.axis), int(stored.bits), int(stored.group_size)
    return _STORAGE_CODES[stored.storage], q


def serialize(graph: Graph) -> tuple[memoryview, list[tuple[int, int, Callable[[], Iterable]]], int]:
    """Lays the graph out: (flatbuffer bytes, [(offset, length, producer of the bytes)] of the weight section,
    weight section size). Nothing deferred is read yet but integer plans' scales."""
    packer = _Packer()
    packer.add(graph)
    m = ModelT()
    m.graphs = packer.graphs
    m.producer, m.producerVersion = "mslite converter_lite", __version__
    m.sourceModel = graph.metadata.get("source_model", "")
    m.sourceFormat = graph.metadata.get("source_format", "")
    m.metadata = []
    for k, v in sorted(graph.metadata.items()):
        kv = KeyValueT()
        kv.key, kv.value = k, str(v)
        m.metadata.append(kv)
    # Sized up front: a builder grown by doubling copies itself each time (an int4 model's scales are tens of MB), and
    # the finished buffer is returned as a view of it, not copied again.
    vectors = sum(t.quant.scale.nbytes + (t.quant.zeroPoint.nbytes if t.quant.zeroPoint is not None else 0)
                  for g in packer.graphs for t in (g.tensors or []) if t.quant is not None and t.quant.scale is not None)
    builder = flatbuffers.Builder(vectors + (1 << 20))
    builder.Finish(m.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return memoryview(builder.Bytes)[builder.Head():], packer.blobs, packer.offset


def _byte_view(arr: np.ndarray):
    """The bytes of a C-contiguous array without a copy."""
    flat = arr.reshape(-1)
    try:
        return memoryview(flat).cast("B")
    except (TypeError, ValueError):   # a dtype the buffer protocol does not describe (e.g. bfloat16 stand-ins)
        return flat.tobytes()


class _BackgroundWriter:
    """Writes buffers to a file on a second thread, so encoding the next block (NumPy, which releases the GIL)
    overlaps writing this one; a few blocks in flight at most."""

    def __init__(self, f, depth: int = 2):
        self.f, self.queue, self.error = f, queue.Queue(depth), None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                if self.error is None:
                    try:
                        if callable(item):   # run in order, after the buffers before it are written
                            item()
                        else:
                            self.f.write(item)
                    except BaseException as e:   # reported by the producer's next put, drain or close
                        self.error = e
            finally:
                self.queue.task_done()

    def write(self, buf) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put(buf)

    def drain(self) -> None:
        """Waits until every queued buffer is written."""
        self.queue.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _create_unnamed(directory: str) -> tuple[int, str | None]:
    """A new file in `directory` for writing: unnamed (O_TMPFILE) where the system allows, so a conversion killed
    midway (SIGKILL included) leaves no temporary file; else a hidden named one (mkstemp). (fd, its name or None)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(directory, flag | os.O_RDWR, 0o644), None
        except OSError:   # a filesystem without O_TMPFILE (EOPNOTSUPP), ...
            pass
    return tempfile.mkstemp(prefix=".tmp_", suffix=".ms", dir=directory)


def _encrypt_into(directory: str, plain_fd: int, key: bytes) -> tuple[int, str | None]:
    """The model in `plain_fd`, encrypted (lite/encryption.py) into a new unnamed file of `directory`."""
    from lite.encryption import encrypt_stream
    fd, tmp = _create_unnamed(directory)
    try:
        size = os.fstat(plain_fd).st_size
        with open(f"/proc/self/fd/{plain_fd}", "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
            encrypt_stream(src, size, dst, key)
            dst.flush()
            os.fsync(dst.fileno())
    except BaseException:
        os.close(fd)
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return fd, tmp


def _write_into(graph: Graph, fd: int) -> int:
    """Writes the model into the empty file `fd` (flushed and synced); returns its weight bytes. Constants are written
    after the graph section as they are produced (deferred ones read and encoded a block of rows at a time,
    overlapping the writes)."""
    fb, blobs, weights_size = serialize(graph)
    graph_offset = HEADER.size
    graph_size = len(fb)
    weights_offset = _align(graph_offset + graph_size)
    header = HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER.size, graph_offset, graph_size, weights_offset,
                         weights_size, zlib.crc32(fb) & 0xFFFFFFFF, 0, 0)
    with os.fdopen(os.dup(fd), "wb") as f:
        f.write(header)
        f.write(fb)
        f.write(b"\0" * (weights_offset - graph_offset - graph_size))
        del fb   # (its integer scales can be tens of MB: not held while the weights are written)
        writer = _BackgroundWriter(f)
        progress = Progress("writing weights", len(blobs))
        try:
            pos = 0
            for off, length, produce in blobs:
                progress.step()
                if isinstance(produce, ScatteredTranspose):   # written in place, then the stream goes on after it
                    writer.drain()
                    f.flush()
                    try:
                        produce.write(f.fileno(), weights_offset + off)
                    except (OSError, ValueError) as e:
                        raise ConverterError(f"constant at weight offset {off} "
                                             f"({produce.values.source}): {e}") from e
                    f.seek(weights_offset + off + length)
                    pos = off + length
                    continue
                writer.write(b"\0" * (off - pos))
                n = 0
                for buf in produce():
                    writer.write(buf)
                    if not callable(buf):   # (a callable: run once what was queued before it is written)
                        n += memoryview(buf).nbytes
                if n != length:
                    raise ConverterError(f"a constant at weight offset {off} produced {n} bytes, {length} expected")
                pos = off + length
            writer.write(b"\0" * (weights_size - pos))
        finally:
            writer.close()
            progress.close()
        f.flush()
        os.fsync(f.fileno())
    return sum(length for _, length, _ in blobs)


def write_ms(graph: Graph, path: str, verify: Callable[[str], None] | None = None,
             encrypt_key: bytes | None = None) -> WriteSummary:
    """Writes `path` atomically; `verify`, if given, is called with the finished temporary file before it is
    renamed into place, and may raise to leave no file. With `encrypt_key` (16/24/32 bytes) the file is AES-GCM
    encrypted (lite/encryption.py): the plaintext is written and verified in an anonymous in-memory file (memory for
    the whole model), never on disk."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = (anonymous_fd("converter_model"), None) if encrypt_key else _create_unnamed(directory)
    try:
        weight_bytes = _write_into(graph, fd)
        if verify is not None:
            verify(tmp or f"/proc/self/fd/{fd}")
        if encrypt_key:
            plain_fd = fd
            fd, tmp = _encrypt_into(directory, plain_fd, encrypt_key)
            os.close(plain_fd)
        if tmp is None:   # named only now: a conversion killed before this point leaves nothing behind
            tmp = os.path.join(directory, f".tmp_{os.getpid()}_{os.urandom(4).hex()}.ms")
            dir_fd = os.open(directory, os.O_RDONLY)
            try:   # (a dir fd makes os.link call linkat with AT_SYMLINK_FOLLOW, which resolves /proc's fd link)
                os.link(f"/proc/self/fd/{fd}", os.path.basename(tmp), src_dir_fd=dir_fd, dst_dir_fd=dir_fd,
                        follow_symlinks=True)
            finally:
                os.close(dir_fd)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return WriteSummary(path, len(graph.nodes), len(graph.tensors), weight_bytes, os.path.getsize(path))


@contextlib.contextmanager
def ms_in_memory(graph: Graph):
    """The model written into an anonymous in-memory file (never on disk, gone when the block ends or the process
    dies): yields (a path the runtime can map, its size in bytes)."""
    fd = anonymous_fd("converter_model")
    try:
        _write_into(graph, fd)
        yield f"/proc/self/fd/{fd}", os.fstat(fd).st_size
    finally:
        os.close(fd)
