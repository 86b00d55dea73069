"""The ARM64 job's corpus: models converted on this (x86) machine, seeded inputs as raw .bin files, and the outputs the
x86 runtime computes from the same .ms files with the same precision mode, as benchmark_lite's --benchmarkDataFile.

The emulated runs (tests/arm64/run.py) then compare the cross-compiled runtime's outputs with these: any difference
beyond rounding is a kernel that computes something else on ARM.

Default corpus (about 10 s under emulation for cortex-a53, max and max capped at NEON together; docs/arm64.md): a
small CNN (Conv/BatchNorm/Relu/MaxPool/Gemm/Softmax), larger GEMM layers (MatMul 67x300x260, GELU, LayerNorm,
Softmax) and convolution layers (a stem, pixel-tile, stride-2 and Winograd 3x3s, depthwise, 1x1, squeeze-excite),
tiny seeded exports of real architectures (model_zoo.hf_tiny: ResNet, MobileNetV2, BERT with a padding mask, ViT, a
Qwen2 decoder without cache, Whisper's encoder) at one fixed shape each, a FULL_QUANT int8 CNN (integer Convs, a
uint8-code depthwise Conv, an integer Gemm), DYNAMIC_QUANT GEMM layers, a WEIGHT_QUANT int8 BERT (int8 weights,
float32 arithmetic), the GEMM layers at 5 rows (a decode step's few-row products) on WEIGHT_QUANT int8, int4 (blocks
of 32 rows, zero points) and float16 weights, preferred_bf16 runs of the layers, BERT, ViT, ResNet and MobileNetV2, preferred_fp16 runs of
the CNN, the layers, BERT and ResNet, and 2-thread runs of the layers. --long adds every architecture converted with dynamic shapes and run at a
second shape through --inputShape (resize) on 2 threads, more architectures, a DYNAMIC_QUANT BERT, float16 weights
and Qwen2 in bf16.

The corpus is cached in the work directory (default build/arm64-corpus) under a key of its inputs: this file,
model_zoo's builders, the converter's and the Python runtime's sources, the built extension (lite._lite) and the
versions of torch / transformers / onnx / numpy. ONNX exports are shared with the architecture tests (tests/.cache).

    python -m tests.arm64.corpus [--work build/arm64-corpus] [--long] [--force]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

DEFAULT_WORK = os.path.join(ROOT, "build", "arm64-corpus")
ONNX_CACHE = os.path.join(ROOT, "tests", ".cache")   # the architecture tests' exports (conftest.CACHE_DIR)
MANIFEST = "manifest.json"
FORMAT = 2   # of the manifest


@dataclass
class Case:
    """One emulated run: benchmark_lite --modelFile=model --inDataFile=inputs --benchmarkDataFile=references[p], p the
    arithmetic the emulated runtime computes in (the x86 one's, or float32 where the ARM CPU lacks bf16)."""
    name: str
    model: str                 # .ms file, relative to the corpus directory
    inputs: list[str]          # raw little-endian .bin files, one per input in the model's input order
    references: dict[str, str]  # compute precision -> benchmark data file (per output 'name rank dims...', values)
    kind: str                  # fp32, int8 (integer nodes), bf16 / fp16 (precision mode preferred_bf16 / _fp16)
    precision: str = "enforce_fp32"
    input_shape: str = ""      # --inputShape, for models converted with dynamic shapes
    threads: int = 1
    scales: dict[str, float] = field(default_factory=dict)   # output -> max |x86 output|
    x86_precision: str = ""    # what the x86 reference computed in (Model.compute_precision)


@dataclass
class ModelSpec:
    """A .ms file to convert: `source()` gives the ONNX path; `config(dir)` writes a quantisation config (or None)."""
    name: str
    source: Callable[[str], str]
    input_shape: dict[str, list[int]] | None = None
    config: Callable[[str], str] | None = None
    fp16: bool = False


@dataclass
class RunSpec:
    name: str
    model: str
    feeds: Callable[[], dict[str, np.ndarray]]
    kind: str = "fp32"
    precision: str = "enforce_fp32"
    threads: int = 1
    input_shape: str = ""


# One fixed shape per architecture for the default corpus; --long adds the dynamic-shape models at Arch.shapes[-1].
ARCH_DIMS = {
    "resnet": {"b": 1, "hw": 32},
    "mobilenet_v2": {"b": 1, "hw": 32},
    "bert": {"b": 2, "s": 12},          # the last sample padded (hf_tiny._ids_mask): the attention mask matters
    "vit": {"b": 1},
    "qwen2": {"b": 1, "s": 8},          # a decoder step graph without cache: causal attention, RoPE, GQA
    "whisper_encoder": {"b": 1},
}
LONG_ARCHS = ["convnext", "gpt2", "llama", "clip_text", "clip_vision", "t5_encoder", "whisper_decoder"]


def _arch_shape(arch, dims: dict[str, int]) -> dict[str, list[int]]:
    return {k: [d if isinstance(d, int) else dims[d] for d in shape] for k, (_, shape) in arch.inputs.items()}


def _onnx_arch(name: str) -> Callable[[str], str]:
    def source(work: str) -> str:
        from model_zoo.hf_tiny import export_onnx
        return export_onnx(name, ONNX_CACHE)
    return source


def _small_cnn(work: str) -> str:
    import onnx

    from model_zoo.tiny import small_cnn
    path = os.path.join(work, "cnn.onnx")
    onnx.save(small_cnn(seed=0), path)
    return path


def _int8_cnn(work: str) -> str:
    """Conv 3x3 (8 -> 32) + Relu, depthwise 3x3 + Relu, Conv 1x1 + residual Add + Relu, MaxPool, Gemm: with
    FULL_QUANT the Convs and the Gemm run in integer arithmetic, the depthwise Conv on the first Conv's uint8 codes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)
    f = np.float32
    w = {"w1": rng.standard_normal((32, 8, 3, 3)).astype(f) * 0.2, "b1": rng.standard_normal(32).astype(f) * 0.1,
         "wd": rng.standard_normal((32, 1, 3, 3)).astype(f) * 0.4, "bd": rng.standard_normal(32).astype(f) * 0.1,
         "w2": rng.standard_normal((32, 32, 1, 1)).astype(f) * 0.2,
         "fc_w": rng.standard_normal((10, 32 * 8 * 8)).astype(f) * 0.03, "fc_b": rng.standard_normal(10).astype(f)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd", "bd"], ["cd"], pads=[1] * 4, group=32),
             helper.make_node("Relu", ["cd"], ["rd"]),
             helper.make_node("Conv", ["rd", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["flat"], axis=1),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "int8_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    path = os.path.join(work, "int8_cnn.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _save(work: str, name: str, nodes, inputs: dict[str, list[int]], outputs: list[str], weights: dict,
          opset: int = 18) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    path = os.path.join(work, f"{name}.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _gemm_layers(work: str) -> str:
    """Products larger than the tiny architectures' (full GEMM tiles and edge tiles in every dimension: M 67, K 300,
    N 260 then 130), GELU (erf), LayerNormalization, Softmax."""
    from onnx import helper
    rng = np.random.default_rng(13)
    f = np.float32
    w = {"w1": (rng.standard_normal((300, 260)) / np.sqrt(300)).astype(f),
         "b1": (rng.standard_normal(260) * 0.1).astype(f),
         "g": (1 + 0.1 * rng.standard_normal(260)).astype(f), "be": (0.1 * rng.standard_normal(260)).astype(f),
         "w2": (rng.standard_normal((260, 130)) / np.sqrt(260)).astype(f)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Gelu", ["a1"], ["g1"]),
             helper.make_node("LayerNormalization", ["g1", "g", "be"], ["n1"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n1", "w2"], ["m2"]), helper.make_node("Softmax", ["m2"], ["y"], axis=-1)]
    return _save(work, "gemm_layers", nodes, {"x": [1, 67, 300]}, ["y"], w, opset=20)


def _conv_layers(work: str) -> str:
    """Convolutions at sizes that reach the kernels the tiny CNNs do not (conv.cc's choices): a 3-channel stem on
    112-wide rows (the direct kernel), 3x3 16 -> 64 at 56x56 (pixel tiles), 3x3 stride 2, 3x3 64 -> 64 at 28x28
    (Winograd F(4x4, 3x3); in bf16 the bf16 Winograd) with a residual, a depthwise 3x3 with ReLU6, a 1x1 64 -> 96
    with HardSwish, squeeze-excite gating (Sigmoid, Mul), max and average pooling."""
    from onnx import helper
    rng = np.random.default_rng(14)
    f = np.float32

    def he(*shape):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(f)

    def bias(n):
        return (rng.standard_normal(n) * 0.1).astype(f)
    w = {"w0": he(16, 3, 3, 3), "b0": bias(16), "w1": he(64, 16, 3, 3), "b1": bias(64), "w2": he(64, 64, 3, 3),
         "w3": he(64, 64, 3, 3), "b3": bias(64), "wd": he(64, 1, 3, 3), "bd": bias(64), "w4": he(96, 64, 1, 1),
         "wse": he(96, 96, 1, 1), "lo": np.array(0, f), "hi": np.array(6, f)}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p0", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1] * 4),
             helper.make_node("Add", ["c3", "r2"], ["s3"]), helper.make_node("Relu", ["s3"], ["r3"]),
             helper.make_node("Conv", ["r3", "wd", "bd"], ["cd"], pads=[1] * 4, group=64),
             helper.make_node("Clip", ["cd", "lo", "hi"], ["rd"]),
             helper.make_node("Conv", ["rd", "w4"], ["c4"]), helper.make_node("HardSwish", ["c4"], ["h4"]),
             helper.make_node("GlobalAveragePool", ["h4"], ["gp"]), helper.make_node("Conv", ["gp", "wse"], ["se"]),
             helper.make_node("Sigmoid", ["se"], ["sg"]), helper.make_node("Mul", ["h4", "sg"], ["m"]),
             helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)]
    return _save(work, "conv_layers", nodes, {"x": [1, 3, 112, 112]}, ["y"], w)


def _depthwise_layers(work: str) -> str:
    """Depthwise 3x3 Convs on 8-channel blocks at stride 1 and 2 over row widths that leave every remainder of the
    NEON row kernel's groups (5 pixels at stride 1, 4 at stride 2: 33, 17 and 9 wide), read in place (rows of 14+
    pixels) and through the zero-padded copy (9 wide), from an NCHW input and between blocked tensors, with ReLU6,
    ReLU and no activation; a 5x5 and a dilated 3x3 (the loop over run-time taps)."""
    from onnx import helper
    rng = np.random.default_rng(15)
    f = np.float32

    def dw(c, k):
        return (rng.standard_normal((c, 1, k, k)) * np.sqrt(2.0 / (k * k))).astype(f)
    w = {"d0": dw(24, 3), "p0": (rng.standard_normal((32, 24, 1, 1)) / np.sqrt(24)).astype(f),
         "pb": (rng.standard_normal(32) * 0.1).astype(f), "dA": dw(32, 3), "bA": (rng.standard_normal(32) * 0.1).astype(f),
         "dB": dw(32, 3), "dC": dw(32, 3), "dD": dw(32, 5), "dE": dw(32, 3), "dF": dw(32, 3), "dG": dw(32, 3),
         "p1": (rng.standard_normal((16, 32, 1, 1)) / np.sqrt(32)).astype(f), "lo": np.array(0, f), "hi": np.array(6, f)}
    conv = lambda i, wt, o, **kw: helper.make_node("Conv", [i, *wt], [o], **kw)  # noqa: E731
    nodes = [conv("x", ["d0"], "c0", pads=[1] * 4, group=24),
             conv("c0", ["p0", "pb"], "c1"), helper.make_node("Relu", ["c1"], ["r1"]),
             conv("r1", ["dA", "bA"], "cA", pads=[1] * 4, group=32), helper.make_node("Clip", ["cA", "lo", "hi"], ["rA"]),
             conv("rA", ["dB"], "cB", pads=[1] * 4, strides=[2, 2], group=32),
             conv("cB", ["dC"], "cC", pads=[1] * 4, group=32),
             conv("cC", ["dD"], "cD", pads=[2] * 4, group=32), helper.make_node("Relu", ["cD"], ["rD"]),
             conv("rD", ["dE"], "cE", pads=[1] * 4, strides=[2, 2], group=32),
             conv("cE", ["dF"], "cF", pads=[1] * 4, group=32), helper.make_node("Clip", ["cF", "lo", "hi"], ["rF"]),
             conv("rF", ["dG"], "cG", pads=[2] * 4, dilations=[2, 2], group=32),
             conv("cG", ["p1"], "y")]
    return _save(work, "depthwise_layers", nodes, {"x": [1, 24, 33, 33]}, ["y"], w)


def _conv_chain(seed: int) -> Callable[[str], str]:
    """model_zoo.tiny.conv_chain's seeded random Conv between channel-blocked tensors (the x86 layout tests' chains):
    kernels 1 / 3 / 5, strides, dilations, one-sided pads, groups up to depthwise, ReLU or a residual Add."""
    def build(work: str) -> str:
        import onnx

        from model_zoo.tiny import conv_chain
        path = os.path.join(work, f"conv_chain_{seed}.onnx")
        onnx.save(conv_chain(seed)[0], path)
        return path
    return build


def _conv_chain_feeds(seed: int) -> Callable[[], dict[str, np.ndarray]]:
    def feeds():
        from model_zoo.tiny import conv_chain
        return {"x": conv_chain(seed)[1]}
    return feeds


CONV_CHAIN_SEEDS = range(8)   # float32 each; float16 the even ones, bf16 the odd ones


def _quant_cfg(quant_type: str, extra: str = "", tag: str = "", bits: int = 8) -> Callable[[str], str]:
    def write(work: str) -> str:
        path = os.path.join(work, f"{quant_type.lower()}{tag}.cfg")
        with open(path, "w") as f:
            f.write(f"[common_quant_param]\nquant_type={quant_type}\nbit_num={bits}\nmin_quant_weight_size=0\n"
                    f"min_quant_weight_channel=1\n{extra}")
        return path
    return write


def _full_quant_cfg(work: str) -> str:
    cal = os.path.join(work, "calibration")
    os.makedirs(cal, exist_ok=True)
    rng = np.random.default_rng(12)
    for i in range(6):
        np.save(os.path.join(cal, f"{i}.npy"), rng.standard_normal((1, 8, 16, 16)).astype(np.float32))
    return _quant_cfg("FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")(work)


def _arch_feeds(name: str, dims: dict[str, int], seed: int) -> Callable[[], dict[str, np.ndarray]]:
    def feeds():
        from model_zoo.hf_tiny import TINY_ARCHS
        return TINY_ARCHS[name].make_feeds(dims, np.random.default_rng(seed))
    return feeds


def _normal(name: str, shape: tuple[int, ...], seed: int) -> Callable[[], dict[str, np.ndarray]]:
    return lambda: {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def plan(long: bool = False) -> tuple[list[ModelSpec], list[RunSpec]]:
    from model_zoo.hf_tiny import TINY_ARCHS
    models = [ModelSpec("cnn", _small_cnn, {"x": [1, 3, 32, 32]}),
              ModelSpec("cnn_int8", _int8_cnn, {"x": [1, 8, 16, 16]}, config=_full_quant_cfg),
              ModelSpec("gemm_layers", _gemm_layers, {"x": [1, 67, 300]}),
              ModelSpec("gemm_layers_dq", _gemm_layers, {"x": [1, 67, 300]}, config=_quant_cfg("DYNAMIC_QUANT")),
              ModelSpec("conv_layers", _conv_layers, {"x": [1, 3, 112, 112]}),
              ModelSpec("depthwise_layers", _depthwise_layers, {"x": [1, 24, 33, 33]}),
              # A decode step's few rows (5: a block of four and one) against compressed weights: the skinny
              # products on int8 (per column), int4 (blocks of 32 rows with zero points) and float16 weight panels.
              ModelSpec("gemm_rows_w8", _gemm_layers, {"x": [1, 5, 300]}, config=_quant_cfg("WEIGHT_QUANT", tag="_w8")),
              ModelSpec("gemm_rows_w4", _gemm_layers, {"x": [1, 5, 300]},
                        config=_quant_cfg("WEIGHT_QUANT", "[weight_quant_param]\ngroup_size=32\nsymmetric=false\n",
                                          tag="_w4", bits=4)),
              ModelSpec("gemm_rows_f16w", _gemm_layers, {"x": [1, 5, 300]}, fp16=True),
              ModelSpec("bert_int8w", _onnx_arch("bert"), _arch_shape(TINY_ARCHS["bert"], ARCH_DIMS["bert"]),
                        config=_quant_cfg("WEIGHT_QUANT"))]
    runs = [RunSpec("cnn", "cnn", _normal("x", (1, 3, 32, 32), 1)),
            RunSpec("cnn-fp16", "cnn", _normal("x", (1, 3, 32, 32), 1), kind="fp16", precision="preferred_fp16"),
            RunSpec("cnn-int8", "cnn_int8", _normal("x", (1, 8, 16, 16), 2), kind="int8"),
            RunSpec("gemm_layers", "gemm_layers", _normal("x", (1, 67, 300), 4)),
            RunSpec("gemm_layers-t2", "gemm_layers", _normal("x", (1, 67, 300), 4), threads=2),
            RunSpec("gemm_layers-int8", "gemm_layers_dq", _normal("x", (1, 67, 300), 4), kind="int8"),
            RunSpec("gemm_layers-bf16", "gemm_layers", _normal("x", (1, 67, 300), 4), kind="bf16",
                    precision="preferred_bf16"),
            RunSpec("conv_layers", "conv_layers", _normal("x", (1, 3, 112, 112), 5)),
            RunSpec("depthwise_layers", "depthwise_layers", _normal("x", (1, 24, 33, 33), 7)),
            RunSpec("depthwise_layers-t2", "depthwise_layers", _normal("x", (1, 24, 33, 33), 7), threads=2),
            RunSpec("gemm_rows-w8", "gemm_rows_w8", _normal("x", (1, 5, 300), 6)),
            RunSpec("gemm_rows-w4", "gemm_rows_w4", _normal("x", (1, 5, 300), 6)),
            RunSpec("gemm_rows-f16w", "gemm_rows_f16w", _normal("x", (1, 5, 300), 6)),
            RunSpec("conv_layers-t2", "conv_layers", _normal("x", (1, 3, 112, 112), 5), threads=2),
            RunSpec("conv_layers-bf16", "conv_layers", _normal("x", (1, 3, 112, 112), 5), kind="bf16",
                    precision="preferred_bf16"),
            RunSpec("gemm_layers-fp16", "gemm_layers", _normal("x", (1, 67, 300), 4), kind="fp16",
                    precision="preferred_fp16"),
            RunSpec("conv_layers-fp16", "conv_layers", _normal("x", (1, 3, 112, 112), 5), kind="fp16",
                    precision="preferred_fp16")]
    from model_zoo.tiny import conv_chain
    for seed in CONV_CHAIN_SEEDS:
        name = f"conv_chain_{seed}"
        models.append(ModelSpec(name, _conv_chain(seed), {"x": list(conv_chain(seed)[1].shape)}))
        runs.append(RunSpec(name, name, _conv_chain_feeds(seed)))
        if seed % 2:
            runs.append(RunSpec(f"{name}-bf16", name, _conv_chain_feeds(seed), kind="bf16", precision="preferred_bf16"))
        else:
            runs.append(RunSpec(f"{name}-fp16", name, _conv_chain_feeds(seed), kind="fp16", precision="preferred_fp16"))
    for i, (name, dims) in enumerate(ARCH_DIMS.items()):
        models.append(ModelSpec(name, _onnx_arch(name), _arch_shape(TINY_ARCHS[name], dims)))
        runs.append(RunSpec(name, name, _arch_feeds(name, dims, 20 + i)))
    runs += [RunSpec("bert-int8w", "bert_int8w", _arch_feeds("bert", ARCH_DIMS["bert"], 22), kind="int8"),
             RunSpec("bert-bf16", "bert", _arch_feeds("bert", ARCH_DIMS["bert"], 22), kind="bf16",
                     precision="preferred_bf16"),
             RunSpec("vit-bf16", "vit", _arch_feeds("vit", ARCH_DIMS["vit"], 23), kind="bf16",
                     precision="preferred_bf16"),
             RunSpec("resnet-bf16", "resnet", _arch_feeds("resnet", ARCH_DIMS["resnet"], 20), kind="bf16",
                     precision="preferred_bf16"),
             RunSpec("mobilenet_v2-bf16", "mobilenet_v2", _arch_feeds("mobilenet_v2", ARCH_DIMS["mobilenet_v2"], 21),
                     kind="bf16", precision="preferred_bf16"),
             RunSpec("bert-fp16", "bert", _arch_feeds("bert", ARCH_DIMS["bert"], 22), kind="fp16",
                     precision="preferred_fp16"),
             RunSpec("resnet-fp16", "resnet", _arch_feeds("resnet", ARCH_DIMS["resnet"], 20), kind="fp16",
                     precision="preferred_fp16"),
             # float16 pointwise tiles on blocked inputs (the projections with their residuals, NCHW outputs)
             RunSpec("mobilenet_v2-fp16", "mobilenet_v2", _arch_feeds("mobilenet_v2", ARCH_DIMS["mobilenet_v2"], 21),
                     kind="fp16", precision="preferred_fp16"),
             RunSpec("depthwise_layers-fp16", "depthwise_layers", _normal("x", (1, 24, 33, 33), 7), kind="fp16",
                     precision="preferred_fp16")]
    if not long:
        return models, runs

    # --long: every architecture with dynamic shapes at its larger test shape (Resize through --inputShape), more
    # architectures, integer and float16 variants, 2-thread runs.
    models += [ModelSpec("bert_dq", _onnx_arch("bert"), _arch_shape(TINY_ARCHS["bert"], ARCH_DIMS["bert"]),
                         config=_quant_cfg("DYNAMIC_QUANT")),
               ModelSpec("cnn_fp16w", _small_cnn, {"x": [1, 3, 32, 32]}, fp16=True),
               ModelSpec("cnn_dyn", _small_cnn)]
    runs += [RunSpec("bert-dq", "bert_dq", _arch_feeds("bert", ARCH_DIMS["bert"], 22), kind="int8"),
             RunSpec("cnn-fp16w", "cnn_fp16w", _normal("x", (1, 3, 32, 32), 1)),
             RunSpec("cnn-b4-t2", "cnn_dyn", _normal("x", (4, 3, 32, 32), 3), threads=2, input_shape="x:4,3,32,32"),
             RunSpec("qwen2-bf16", "qwen2", _arch_feeds("qwen2", ARCH_DIMS["qwen2"], 24), kind="bf16",
                     precision="preferred_bf16"),
             RunSpec("cnn-int8-t2", "cnn_int8", _normal("x", (1, 8, 16, 16), 2), kind="int8", threads=2)]
    for i, name in enumerate(list(ARCH_DIMS) + LONG_ARCHS):
        arch = TINY_ARCHS[name]
        dims = arch.shapes[-1]
        shape = _arch_shape(arch, dims)
        models.append(ModelSpec(f"{name}_dyn", _onnx_arch(name)))
        flag = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in shape.items())
        runs.append(RunSpec(f"{name}-{'x'.join(map(str, dims.values()))}-t2", f"{name}_dyn",
                            _arch_feeds(name, dims, 40 + i), threads=2, input_shape=flag))
    return models, runs


def _np_dtype(dtype) -> np.dtype:
    name = dtype.name.lower()
    return np.dtype({"bool": np.bool_}.get(name, name))


def _write_benchmark_data(path: str, outputs: dict[str, np.ndarray]) -> None:
    with open(path, "w") as f:
        for name, arr in outputs.items():
            f.write(f"{name} {arr.ndim} {' '.join(map(str, arr.shape))}\n")
            f.write(" ".join(repr(float(v)) for v in arr.ravel()) + "\n")


def _predict(ms: str, spec: RunSpec, precision: str, feeds: dict[str, np.ndarray]):
    import lite
    ctx = lite.Context()
    ctx.cpu.thread_num = spec.threads
    ctx.cpu.precision_mode = precision
    model = lite.Model()
    model.build_from_file(ms, lite.ModelType.MINDIR_LITE, ctx)
    return model, {t.name: t.get_data_to_numpy() for t in model.predict(feeds)}


def _reference(ms: str, spec: RunSpec, out_dir: str) -> Case:
    """Inputs and the x86 runtime's outputs for one run: at the run's precision mode, and in float32 too where that
    computed in another precision (the reference for ARM CPUs without that arithmetic)."""
    import lite
    model = lite.Model()
    model.build_from_file(ms, lite.ModelType.MINDIR_LITE, lite.Context())
    feeds = spec.feeds()
    inputs = []
    for t in model.get_inputs():
        arr = np.ascontiguousarray(feeds[t.name], dtype=_np_dtype(t.dtype))
        feeds[t.name] = arr
        path = os.path.join(out_dir, f"{spec.name}.{len(inputs)}.bin")
        arr.astype(arr.dtype.newbyteorder("<")).tofile(path)
        inputs.append(os.path.basename(path))
    model, outputs = _predict(ms, spec, spec.precision, feeds)
    for name, arr in outputs.items():
        if np.issubdtype(arr.dtype, np.floating):
            if not np.all(np.isfinite(arr)) or float(arr.std()) < 1e-3:
                # A vanishing or non-finite reference would pass any comparison.
                raise RuntimeError(f"{spec.name}: degenerate reference output '{name}' (std {arr.std():.1e})")
    x86_precision = model.compute_precision
    references = {x86_precision: f"{spec.name}.out"}
    _write_benchmark_data(os.path.join(out_dir, references[x86_precision]), outputs)
    if x86_precision != "float32":
        references["float32"] = f"{spec.name}.float32.out"
        _write_benchmark_data(os.path.join(out_dir, references["float32"]),
                              _predict(ms, spec, "enforce_fp32", feeds)[1])
    return Case(spec.name, os.path.basename(ms), inputs, references, spec.kind, spec.precision, spec.input_shape,
                spec.threads, {k: float(np.abs(v).max()) if v.size else 0.0 for k, v in outputs.items()}, x86_precision)


def _files_digest(h, paths: list[str]) -> None:
    for top in paths:
        full = os.path.join(ROOT, top)
        if os.path.isfile(full):
            files = [full]
        else:
            files = sorted(os.path.join(d, f) for d, _, fs in os.walk(full) for f in fs if f.endswith(".py"))
        for path in files:
            h.update(os.path.relpath(path, ROOT).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())


def cache_key(long: bool) -> str:
    """A key of everything the corpus depends on; a change to any rebuilds it (ONNX exports stay cached)."""
    from lite import _lite
    h = hashlib.sha256(f"format {FORMAT} long {long}\n".encode())
    _files_digest(h, ["tests/arm64/corpus.py", "model_zoo/tiny.py", "model_zoo/hf_tiny.py", "converter", "lite"])
    with open(_lite.__file__, "rb") as f:
        h.update(f.read())
    for pkg in ("torch", "transformers", "onnx", "numpy"):
        try:
            h.update(f"{pkg} {importlib.metadata.version(pkg)}\n".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{pkg} none\n".encode())
    return h.hexdigest()[:16]


def build(work: str = DEFAULT_WORK, long: bool = False, force: bool = False, log=print) -> tuple[str, list[Case]]:
    """The corpus directory and its cases, built unless the cached one has the same key."""
    key = cache_key(long)
    name = f"{'long' if long else 'default'}-{key}"
    out = os.path.join(work, name)
    manifest = os.path.join(out, MANIFEST)
    if not force and os.path.exists(manifest):
        with open(manifest) as f:
            data = json.load(f)
        return out, [Case(**c) for c in data["cases"]]
    t0 = time.perf_counter()
    log(f"[arm64] building the corpus in {out} (key {key})")
    os.makedirs(work, exist_ok=True)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    import converter
    models, runs = plan(long)
    paths = {}
    for spec in models:
        t = time.perf_counter()
        src = spec.source(tmp)
        cfg = spec.config(tmp) if spec.config else None
        res = converter.Converter().convert("ONNX", src, os.path.join(tmp, spec.name), input_shape=spec.input_shape,
                                            config_file=cfg, fp16=spec.fp16)
        paths[spec.name] = res.output_file
        log(f"[arm64]   {spec.name}: converted in {time.perf_counter() - t:.1f}s")
    cases = [_reference(paths[spec.model], spec, tmp) for spec in runs]
    with open(os.path.join(tmp, MANIFEST), "w") as f:
        json.dump({"format": FORMAT, "key": key, "long": long, "cases": [asdict(c) for c in cases]}, f, indent=1)
    # Keep one corpus of each kind: older keys go.
    for entry in os.listdir(work):
        if entry.startswith(("long-" if long else "default-")) and entry not in (name, name + ".tmp"):
            shutil.rmtree(os.path.join(work, entry), ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"[arm64] corpus: {len(cases)} runs of {len(models)} models in {time.perf_counter() - t0:.1f}s")
    return out, cases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default=DEFAULT_WORK)
    p.add_argument("--long", action="store_true", help="the longer corpus (more models and shapes, 2 threads)")
    p.add_argument("--force", action="store_true", help="rebuild even when the cached corpus is current")
    args = p.parse_args(argv)
    out, cases = build(args.work, args.long, args.force)
    for c in cases:
        print(f"{c.name:24s} {c.model:22s} {c.kind:5s} {c.precision:15s} x86 {c.x86_precision}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
