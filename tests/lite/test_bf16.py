"""precision_mode preferred_bf16 on a CPU with AVX512_BF16 (issue 8): MatMul/Gemm/Conv with constant weights multiply
bf16-rounded operands with float32 sums. The reference is the same arithmetic done exactly: ONNX Runtime (float32)
on inputs and weights rounded to bf16 first, so only float32 summation order separates the two. Skipped on CPUs
without bf16 dot products (test_precision_mode covers the float32 fallback there)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite import _lite
from model_zoo.hf_tiny import TINY_ARCHS, export_onnx
from parity import convert, random_depthwise_shapes, run_ort

pytestmark = pytest.mark.skipif(not _lite.cpu_features()["avx512_bf16"],
                                reason="no AVX512_BF16 here (or LITE_CPU_ISA caps it)")
# Where AMX takes bf16 products, 3x3 Convs run direct on AMX tiles (pixel-major), not by the bf16 Winograd kernel
# (vdpbf16ps tiles): its tests run there under LITE_CPU_ISA=avx512 (tests/lite/test_amx.py runs this file so).
vector_winograd = pytest.mark.skipif(_lite.cpu_features()["amx_bf16"],
                                     reason="AMX CPU: no bf16 Winograd (test_amx reruns these under avx512)")
F32 = np.float32


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bf16 (nearest even), as float32."""
    u = np.ascontiguousarray(x, F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(F32)


def build(path: str, mode: str, threads: int = 1) -> lite.Model:
    ctx = lite.Context()
    ctx.cpu.precision_mode = mode
    ctx.cpu.thread_num = threads
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    return m


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def model(nodes, inputs, weights: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def rounded(m: onnx.ModelProto, weights: dict[str, np.ndarray], keep=()) -> onnx.ModelProto:
    """The model with its weights rounded to bf16 (the biases in `keep` stay float32, as the kernels add them)."""
    r = onnx.ModelProto()
    r.CopyFrom(m)
    del r.graph.initializer[:]
    r.graph.initializer.extend(numpy_helper.from_array(v if k in keep else bf16(v), k) for k, v in weights.items())
    return r


def check_bf16(tmp_path, m: onnx.ModelProto, weights, feeds, keep=("b",), threads=(1, 2), rel=2e-5):
    ms = convert(m, str(tmp_path))
    want = run_ort(rounded(m, weights, keep), {k: bf16(v) for k, v in feeds.items()})[0]
    exact = run_ort(m, feeds)[0]
    for t in threads:
        lm = build(ms, "preferred_bf16", t)
        assert lm.compute_precision == "bfloat16"
        got = lm.predict(feeds)[0].get_data_to_numpy()
        assert got.shape == want.shape
        scale = float(np.abs(want).max())
        assert np.abs(got - want).max() <= rel * scale, (t, np.abs(got - want).max(), scale)
        # and it really is bf16 arithmetic: further from the float32 result than float32 summation would be
        assert np.abs(got - exact).max() > 1e-4 * scale
        assert cosine(got, exact) > 0.999


@pytest.mark.parametrize("M,K,N,act", [(37, 75, 45, "Relu"), (8, 32, 32, None), (5, 3, 7, "Sigmoid"),
                                       (70, 1030, 100, "Gelu"), (200, 64, 33, None)])
def test_matmul_bias_activation(tmp_path, M, K, N, act):
    rng = np.random.default_rng(M)
    w = {"w": rng.standard_normal((K, N)).astype(F32), "b": rng.standard_normal(N).astype(F32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["q" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["q"], ["y"]))
    m = model(nodes, [("x", [M, K])], w)
    m.opset_import[0].version = 20 if act == "Gelu" else 17
    check_bf16(tmp_path, m, w, {"x": rng.standard_normal((M, K)).astype(F32)})


def test_batched_matmul_with_residual(tmp_path):
    rng = np.random.default_rng(1)
    w = {"w": rng.standard_normal((48, 40)).astype(F32)}
    m = model([helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "r"], ["y"])],
              [("x", [3, 17, 48]), ("r", [3, 17, 40])], w)
    feeds = {"x": rng.standard_normal((3, 17, 48)).astype(F32), "r": rng.standard_normal((3, 17, 40)).astype(F32)}
    ms = convert(m, str(tmp_path))
    got = build(ms, "preferred_bf16", 2).predict(feeds)[0].get_data_to_numpy()
    want = (bf16(feeds["x"]).astype(np.float64) @ bf16(w["w"])) + feeds["r"]   # the residual is added in float32
    assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 1.0), (0, 1, 2.0, 0.0),
                                                        (1, 1, 1.0, 1.0)])
def test_gemm_attributes(tmp_path, trans_a, trans_b, alpha, beta):
    rng = np.random.default_rng(2)
    M, K, N = 19, 45, 50
    a_shape = [K, M] if trans_a else [M, K]
    w = {"w": rng.standard_normal((N, K) if trans_b else (K, N)).astype(F32), "b": rng.standard_normal(N).astype(F32)}
    m = model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transA=trans_a, transB=trans_b, alpha=alpha,
                                beta=beta)], [("x", a_shape)], w)
    x = rng.standard_normal(a_shape).astype(F32)
    if alpha != 1.0:   # lite rounds alpha * A: the reference rounds the same product
        ms = convert(m, str(tmp_path))
        got = build(ms, "preferred_bf16").predict({"x": x})[0].get_data_to_numpy()
        a = bf16(alpha * x).astype(np.float64)
        wb = bf16(w["w"]).astype(np.float64)
        want = (a.T if trans_a else a) @ (wb.T if trans_b else wb) + beta * w["b"]
        assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()
        return
    check_bf16(tmp_path, m, w, {"x": x})


CONVS = {   # name: (input shape, weight shape, attributes)
    "pointwise": ((1, 48, 9, 11), (40, 48, 1, 1), {}),
    "3x3 small plane": ((2, 32, 7, 7), (24, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3 stride 2": ((1, 16, 15, 13), (33, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "grouped": ((1, 32, 10, 10), (48, 16, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
    "1-D": ((2, 12, 30), (20, 12, 5), {"pads": [2, 2]}),
    "pointwise stride 2": ((1, 64, 14, 14), (128, 64, 1, 1), {"strides": [2, 2]}),
    # pixel-major at bf16 (KxK, up to 196 output pixels, output channels a multiple of 32): stride 1 on 14x14,
    # stride 2 into 7x7 with batch 2, a 5x5 with one-sided pads
    "pixel-major 3x3": ((1, 48, 14, 14), (64, 48, 3, 3), {"pads": [1, 1, 1, 1]}),
    "pixel-major stride 2": ((2, 40, 13, 13), (32, 40, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "pixel-major 5x5": ((1, 24, 11, 12), (96, 24, 5, 5), {"pads": [2, 0, 2, 1]}),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv_forms(tmp_path, name):
    xs, ws, attrs = CONVS[name]
    rng = np.random.default_rng(len(name))
    w = {"w": (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(F32),
         "b": rng.standard_normal(ws[0]).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), helper.make_node("Relu", ["c"], ["y"])],
              [("x", list(xs))], w)
    check_bf16(tmp_path, m, w, {"x": rng.standard_normal(xs).astype(F32)})


def test_conv_with_residual(tmp_path):
    rng = np.random.default_rng(3)
    w = {"w": (rng.standard_normal((32, 32, 1, 1)) / 6).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "r"], ["s"]),
               helper.make_node("Relu", ["s"], ["y"])], [("x", [1, 32, 12, 12]), ("r", [1, 32, 12, 12])], w)
    feeds = {"x": rng.standard_normal((1, 32, 12, 12)).astype(F32), "r": rng.standard_normal((1, 32, 12, 12)).astype(F32)}
    ms = convert(m, str(tmp_path))
    got = build(ms, "preferred_bf16", 2).predict(feeds)[0].get_data_to_numpy()
    prod = np.einsum("mc,nchw->nmhw", bf16(w["w"][:, :, 0, 0]).astype(np.float64), bf16(feeds["x"]))
    want = np.maximum(prod + feeds["r"], 0)
    assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()


@pytest.mark.parametrize("name,xs,ws,attrs,in_bf16", [
    ("stem (3 channels, padded copy)", (1, 3, 224, 224), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]},
     True),
    ("depthwise (float32 kernel)", (1, 32, 14, 14), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 32}, False),
    ("3x3 at 56x56", (1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ("3x3 at 14x14", (1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ("16 channels at 56x56", (1, 16, 56, 56), (64, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True),
])
def test_which_convs_take_bf16(tmp_path, name, xs, ws, attrs, in_bf16):
    """Depthwise Convs have no bf16 kernel (memory-bound: bf16 products gain nothing) and compute exactly as in
    enforce_fp32; the others round to bf16."""
    rng = np.random.default_rng(4)
    w = {"w": (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], [("x", list(xs))], w)
    x = {"x": rng.standard_normal(xs).astype(F32)}
    ms = convert(m, str(tmp_path))
    f32 = build(ms, "enforce_fp32").predict(x)[0].get_data_to_numpy()
    got = build(ms, "preferred_bf16").predict(x)[0].get_data_to_numpy()
    assert np.array_equal(got, f32) != in_bf16
    assert cosine(got, f32) > 0.9999


def conv_node(x, w, b, y, ws, attrs):
    return helper.make_node("Conv", [x, w, b], [y], kernel_shape=list(ws[2:]), **attrs)


def conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs) -> np.ndarray:
    """Conv + bias on bf16-rounded input and weights, summed in float32 by ONNX Runtime."""
    m = model([conv_node("x", "w", "b", "y", w.shape, attrs)], [("x", list(x.shape))], {"w": bf16(w), "b": b})
    return run_ort(m, {"x": bf16(x)})[0]


ACTS = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0), "Clip": lambda v: np.clip(v, 0, 6),
        "Sigmoid": lambda v: 1 / (1 + np.exp(-v))}

PIXEL_CONVS = {   # name: (input shape, weight shape, attributes, activation)
    "3x3 on 7x7 (7-row tiles, padding taps skipped)": ((1, 64, 7, 7), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu"),
    "3x3 on 14x14, batch 2": ((2, 32, 14, 14), (96, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "Clip"),
    "3x3 on 9x11 (8-row tiles, tails)": ((1, 24, 9, 11), (40, 24, 3, 3), {"pads": [1, 1, 1, 1]}, "Sigmoid"),
    "3x3 stride 2": ((1, 16, 15, 13), (48, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "Relu"),
    "1x1 stride 2": ((1, 64, 14, 14), (32, 64, 1, 1), {"strides": [2, 2]}, None),
    "5x5, one-sided pads": ((1, 24, 11, 12), (96, 24, 5, 5), {"pads": [2, 0, 2, 1]}, "Relu"),
    "3x3 dilation 2": ((1, 16, 12, 12), (32, 16, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, None),
    "1x1 from 1024 channels (four depth parts, padded rows)": ((1, 1024, 5, 5), (64, 1024, 1, 1), {}, "Relu"),
    "3x3 from 512 channels (two depth parts per tap)": ((1, 512, 4, 6), (32, 512, 3, 3), {"pads": [1, 1, 1, 1]}, None),
    "2x2 stride 2, no padding": ((1, 96, 8, 8), (192, 96, 2, 2), {"strides": [2, 2]}, None),
    # 1-4 input channels: a padded copy, one segment per filter row
    "stem: 3 channels 7x7 stride 2": ((1, 3, 65, 63), (64, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]},
                                      "Relu"),   # 3 channels: 1024+ output pixels (else the bf16 GEMM)
    "stem: 2 channels 3x3, batch 2": ((2, 2, 12, 13), (16, 2, 3, 3), {"pads": [1, 1, 1, 1]}, None),
    "stem: 4 channels 5x3, asymmetric pads": ((1, 4, 10, 19), (32, 4, 5, 3), {"pads": [2, 0, 1, 2]}, "Clip"),
    "stem: 3 channels 3x3, dilated rows": ((1, 3, 34, 31), (16, 3, 3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1]},
                                           None),
    # 3 channels at an even column stride: stored tight, each filter row one run of KW x 3 values (odd: its last pair
    # half masked off)
    "stem: 3 channels 3x3 stride 2 (odd runs)": ((1, 3, 66, 70), (24, 3, 3, 3),
                                                 {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "Relu"),
    "stem: 3 channels 4x4 stride 4 (even runs)": ((1, 3, 128, 131), (32, 3, 4, 4), {"strides": [4, 4]}, None),
}


def residual_chain(xs, ws, attrs, act, tail: bool, seed: int):
    """A (geometry ws / attrs, activation act; it reads the NCHW input) then B (1x1) whose residual is A's output ->
    ReLU, then with `tail` a 3x3 C (else B's output is the graph output, NCHW). The reference runs each Conv on
    bf16-rounded operands and adds the residual rounded to bf16 where it is stored as bf16 rows (A's output unless its
    activation is Sigmoid). Returns the model, an input, the reference output, whether A's output is bf16 rows, and A's
    reference output."""
    rng = np.random.default_rng(seed)
    M = ws[0]
    w = {"wa": (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(F32), "ba": rng.standard_normal(M).astype(F32),
         "wb": (rng.standard_normal((M, M, 1, 1)) / np.sqrt(M)).astype(F32), "bb": rng.standard_normal(M).astype(F32),
         "wc": (rng.standard_normal((16, M, 3, 3)) / np.sqrt(9 * M)).astype(F32), "bc": rng.standard_normal(16).astype(F32)}
    nodes = [conv_node("x", "wa", "ba", "ca" if act else "a", ws, attrs)]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["ca", "lo", "hi"], ["a"]))
        w.update(lo=np.array(0, F32), hi=np.array(6, F32))
    elif act:
        nodes.append(helper.make_node(act, ["ca"], ["a"]))
    nodes += [conv_node("a", "wb", "bb", "b", (M, M, 1, 1), {}), helper.make_node("Add", ["b", "a"], ["r"]),
              helper.make_node("Relu", ["r"], ["s" if tail else "y"])]
    if tail:
        nodes.append(conv_node("s", "wc", "bc", "y", (16, M, 3, 3), {"pads": [1, 1, 1, 1]}))
    m = model(nodes, [("x", list(xs))], w)
    x = rng.standard_normal(xs).astype(F32)
    a_rows = act != "Sigmoid"
    a = ACTS[act](conv_ref(x, w["wa"], w["ba"], attrs)).astype(F32)
    want = np.maximum(conv_ref(a, w["wb"], w["bb"], {}) + (bf16(a) if a_rows else a), 0).astype(F32)
    if tail:
        want = conv_ref(want, w["wc"], w["bc"], {"pads": [1, 1, 1, 1]})
    return m, x, want, a_rows, a


@pytest.mark.parametrize("name", sorted(PIXEL_CONVS))
@pytest.mark.parametrize("tail", [True, False], ids=["tail", "no-tail"])
def test_pixel_major_convs(tmp_path, name, tail):
    """bf16 pixel-major Convs (cpu/conv/bf16_pixel_conv.h) in residual_chain's chain, A the geometry under test.
    Between them the tensors are stored as bf16 rows (core/bf16_pixel_layout.h) where both ends take them: A's output
    when its activation can be applied before rounding (not Sigmoid: then it is channel-blocked float32), B's output
    when C reads it."""
    xs, ws, attrs, act = PIXEL_CONVS[name]
    m, x, want, a_rows, a = residual_chain(xs, ws, attrs, act, tail, len(name))
    exact = run_ort(m, {"x": x})[0]
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, "preferred_bf16", threads)
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert got.shape == want.shape
        scale = float(np.abs(want).max())
        # Where A's output is stored as bf16 rows, an element whose float32 value lies within summation-order noise
        # of a bf16 rounding tie may round the other way than the reference's: one bf16 unit of it (2^-8 relative)
        # reaches the output through the residual (through C's 3x3 sums too, averaged down, with a tail).
        flip = 0 if tail or not a_rows else np.abs(bf16(a)) * 2.0 ** -8
        assert (np.abs(got - want) <= 2e-4 * scale + flip).all(), (threads, np.abs(got - want).max(), scale)
        assert np.abs(got - exact).max() > 1e-4 * scale   # bf16 arithmetic, not float32
        rows, blocked = set(lm.bf16_pixel_tensors()), set(lm.channel_blocked_tensors())
        assert ("a" in rows) == a_rows and ("a" in blocked) == (not a_rows), (rows, blocked)
        assert ("s" in rows) == tail, rows


DEPTHWISE_ROWS = {   # name: (channels, plane, depthwise attributes, its activation)
    "3x3 stride 1, ReLU6": (48, 14, {"pads": [1, 1, 1, 1]}, "Clip"),
    "3x3 stride 2, odd plane": (40, 15, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "Relu"),
    "5x5 one-sided pads": (32, 11, {"pads": [2, 1, 2, 1], "kernel_shape": [5, 5]}, None),
    "3x3 dilation 2, 72 channels": (72, 12, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, "Relu"),
    "3x3 on a 4x4 plane (every tap near the padding)": (16, 4, {"pads": [1, 1, 1, 1]}, None),
    # groups of 8 pixels with every tap inside (the kernel's regular path): wide planes
    "3x3 stride 1 on 28x28": (64, 28, {"pads": [1, 1, 1, 1]}, "Clip"),
    "3x3 stride 2 on 41x41, 24 channels": (24, 41, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "Relu"),
    "3x3 dilation 2 on 30x30": (32, 30, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, None),
    # stride 1 with 3- or 5-wide filters (the FMA form's sliding rows): groups cut short, filters wider than the plane
    "3x3 on 9x17 (one-pixel groups)": (40, (9, 17), {"pads": [1, 1, 1, 1]}, "Relu"),
    "5x5 on 6x13, 24 channels": (24, (6, 13), {"pads": [2, 2, 2, 2], "kernel_shape": [5, 5]}, "Clip"),
    "5x3 one-sided pads on 10x20": (32, (10, 20), {"pads": [2, 0, 2, 2], "kernel_shape": [5, 3]}, None),
    "3x5 on 7x3 (filter wider than the plane)": (16, (7, 3), {"pads": [1, 2, 1, 2], "kernel_shape": [3, 5]}, "Relu"),
    "1x3 on 5x12": (16, (5, 12), {"pads": [0, 1, 0, 1], "kernel_shape": [1, 3]}, None),
}


# seeded ones the named geometries do not pin down: filters of up to 5 x 5 taps (what takes bf16 rows), dilation 1-2
DEPTHWISE_ROWS.update({
    f"random {i}: {kh}x{kw} stride {s} dilation {d} on {h}x{w}, pads {list(pads)}": (
        C, (h, w), {"pads": list(pads), "kernel_shape": [kh, kw], "strides": [s, s], "dilations": [d, d]},
        [None, "Relu", "Clip"][i % 3])
    for i, (C, h, w, kh, kw, s, d, pads) in enumerate(random_depthwise_shapes(5, 12, (1, 3, 5), (1, 2)))})


@pytest.mark.parametrize("form", ["pairs", "fma"])
@pytest.mark.parametrize("name", sorted(DEPTHWISE_ROWS))
def test_depthwise_between_bf16_rows(tmp_path, monkeypatch, name, form):
    """A MobileNet block: 1x1 expansion (ReLU6), depthwise, 1x1 projection. At bfloat16 the depthwise Conv reads and
    writes bf16 rows (cpu/depthwise/depthwise_bf16_rows.h: tap pairs on vdpbf16ps or float32 FMAs, weights rounded to
    bf16; LITE_BF16_DEPTHWISE picks the form, each CPU's default being one of them), so all three keep them. Against
    an emulation: each Conv on bf16-rounded operands, its output rounded to bf16 where it is stored as rows."""
    monkeypatch.setenv("LITE_BF16_DEPTHWISE", form)   # read when the Conv's kernel is made
    C, hw, attrs, act = DEPTHWISE_ROWS[name]
    h, w_ = (hw, hw) if isinstance(hw, int) else hw
    rng = np.random.default_rng(C + h + w_)
    k = attrs.get("kernel_shape", [3, 3])
    w = {"we": (rng.standard_normal((C, 16, 1, 1)) / 4).astype(F32), "be": rng.standard_normal(C).astype(F32),
         "wd": (rng.standard_normal((C, 1, *k)) / 3).astype(F32), "bd": rng.standard_normal(C).astype(F32),
         "wp": (rng.standard_normal((32, C, 1, 1)) / np.sqrt(C)).astype(F32), "bp": rng.standard_normal(32).astype(F32),
         "lo": np.array(0, F32), "hi": np.array(6, F32)}
    dw_attrs = {kk: v for kk, v in attrs.items() if kk != "kernel_shape"}
    nodes = [conv_node("x", "we", "be", "e", (C, 16, 1, 1), {}), helper.make_node("Clip", ["e", "lo", "hi"], ["a"]),
             conv_node("a", "wd", "bd", "d" if act else "b", (C, 1, *k), {**dw_attrs, "group": C})]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["d", "lo", "hi"], ["b"]))
    elif act:
        nodes.append(helper.make_node(act, ["d"], ["b"]))
    nodes.append(conv_node("b", "wp", "bp", "y", (32, C, 1, 1), {}))
    m = model(nodes, [("x", [1, 16, h, w_])], w)
    x = rng.standard_normal((1, 16, h, w_)).astype(F32)
    a = bf16(np.clip(conv_ref(x, w["we"], w["be"], {}), 0, 6))
    dw = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=C, kernel_shape=k, **dw_attrs)],
               [("x", list(a.shape))], {"w": bf16(w["wd"]), "b": w["bd"]})
    b = bf16(ACTS[act](run_ort(dw, {"x": a})[0]).astype(F32))
    want = conv_ref(b, w["wp"], w["bp"], {})
    exact = run_ort(m, {"x": x})[0]
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, "preferred_bf16", threads)
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert {"a", "b"} <= set(lm.bf16_pixel_tensors()), lm.bf16_pixel_tensors()
        scale = float(np.abs(want).max())
        # a stored row value within summation-order noise of a bf16 rounding tie may round the other way: one bf16
        # unit (2^-8 relative) of it, carried through the projection
        assert np.abs(got - want).max() <= 2e-2 * scale, (threads, np.abs(got - want).max(), scale)
        assert np.abs(got - want).mean() <= 1e-3 * scale
        assert cosine(got, exact) > 0.999


@pytest.mark.parametrize("M,hw", [(32, 9), (40, 6)])
def test_graph_input_as_residual(tmp_path, M, hw):
    """A residual read from the graph input (NCHW float32) beside a bf16-rows output: the tile gathers it from the
    input's planes, so the Conv after keeps reading bf16 rows (one NCHW residual used to pull the whole chain back
    to NCHW)."""
    rng = np.random.default_rng(M)
    w = {"wa": (rng.standard_normal((M, M, 1, 1)) / np.sqrt(M)).astype(F32), "ba": rng.standard_normal(M).astype(F32),
         "wc": (rng.standard_normal((16, M, 3, 3)) / np.sqrt(9 * M)).astype(F32), "bc": rng.standard_normal(16).astype(F32)}
    nodes = [conv_node("x", "wa", "ba", "c", (M, M, 1, 1), {}), helper.make_node("Add", ["c", "x"], ["r"]),
             helper.make_node("Relu", ["r"], ["s"]), conv_node("s", "wc", "bc", "y", (16, M, 3, 3), {"pads": [1, 1, 1, 1]})]
    xs = (2, M, hw, hw)
    m = model(nodes, [("x", list(xs))], w)
    x = rng.standard_normal(xs).astype(F32)
    s = np.maximum(conv_ref(x, w["wa"], w["ba"], {}) + x, 0).astype(F32)
    want = conv_ref(s, w["wc"], w["bc"], {"pads": [1, 1, 1, 1]})
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, "preferred_bf16", threads)
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert np.abs(got - want).max() <= 2e-4 * np.abs(want).max(), (threads, np.abs(got - want).max())
        assert lm.bf16_pixel_tensors() == ["s"]


@pytest.mark.parametrize("C,attrs", [(64, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
                                     (40, {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 1, 0]})])
def test_max_pool_on_bf16_rows(tmp_path, C, attrs):
    """A max pool between two pixel-major Convs reads and writes their bf16 rows (the max of bf16-rounded values is
    the rounded max: the reference pools the first Conv's rounded output)."""
    rng = np.random.default_rng(C)
    w = {"wa": (rng.standard_normal((C, 16, 3, 3)) / 12).astype(F32), "ba": rng.standard_normal(C).astype(F32),
         "wb": (rng.standard_normal((24, C, 3, 3)) / np.sqrt(9 * C)).astype(F32), "bb": rng.standard_normal(24).astype(F32)}
    nodes = [conv_node("x", "wa", "ba", "a", (C, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
             helper.make_node("MaxPool", ["a"], ["p"], **attrs),
             conv_node("p", "wb", "bb", "y", (24, C, 3, 3), {"pads": [1, 1, 1, 1]})]
    xs = (2, 16, 13, 15)
    m = model(nodes, [("x", list(xs))], w)
    x = rng.standard_normal(xs).astype(F32)
    a = bf16(conv_ref(x, w["wa"], w["ba"], {"pads": [1, 1, 1, 1]}))
    pool = helper.make_model(helper.make_graph([helper.make_node("MaxPool", ["a"], ["p"], **attrs)], "g",
                                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))],
                                               [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)]),
                             opset_imports=[helper.make_opsetid("", 17)])
    want = conv_ref(run_ort(pool, {"a": a})[0], w["wb"], w["bb"], {"pads": [1, 1, 1, 1]})
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, "preferred_bf16", threads)
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert np.abs(got - want).max() <= 2e-4 * np.abs(want).max(), (threads, np.abs(got - want).max())
        assert set(lm.bf16_pixel_tensors()) == {"a", "p"}


WINOGRAD_CONVS = {   # name: (batch, C, M, H, W, pads [top, left, bottom, right], activation, residual)
    "64 -> 64 on 14x14, ReLU": (1, 64, 64, 14, 14, [1, 1, 1, 1], "Relu", False),
    "odd plane (partial tiles), residual, ReLU6": (1, 32, 96, 15, 17, [1, 1, 1, 1], "Clip", True),
    "no padding, no activation, batch 2": (2, 32, 32, 20, 16, [0, 0, 0, 0], None, False),
    "asymmetric padding, 256 channels in, residual": (1, 256, 64, 16, 14, [1, 0, 1, 2], "Relu", True),
    "56x56 (tile rows per thread), residual": (1, 32, 32, 56, 56, [1, 1, 1, 1], "Relu", True),
    "7x7 plane, 512 channels in (4x4 tiles, half of them partial)": (1, 512, 64, 7, 7, [1, 1, 1, 1], "Relu", False),
}


@vector_winograd
@pytest.mark.parametrize("name", sorted(WINOGRAD_CONVS))
def test_winograd_3x3_between_bf16_rows(tmp_path, name):
    """A 3x3 stride-1 Conv reading and writing bf16 rows runs Winograd F(2x2, 3x3) in bf16 (cpu/conv/winograd/bf16_winograd_conv.h):
    x -> A (1x1, to bf16 rows) -> W (the 3x3 under test; its residual A's output when the shapes match) -> B (1x1,
    NCHW out). The reference computes W directly on bf16-rounded operands; Winograd rounds the transformed input and
    filter to bf16 too, so it lies further from the reference than the direct kernel's summation noise (2e-5 of
    the scale), within a few bf16 units."""
    n, C, M, H, W, pads, act, residual = WINOGRAD_CONVS[name]
    rng = np.random.default_rng(len(name))
    ca = M if residual else C
    w = {"wa": (rng.standard_normal((ca, 8, 1, 1)) / 3).astype(F32), "ba": rng.standard_normal(ca).astype(F32),
         "ww": (rng.standard_normal((M, ca, 3, 3)) / np.sqrt(9 * ca)).astype(F32), "bw": rng.standard_normal(M).astype(F32),
         "wb": (rng.standard_normal((8, M, 1, 1)) / np.sqrt(M)).astype(F32), "bb": rng.standard_normal(8).astype(F32)}
    nodes = [conv_node("x", "wa", "ba", "ca", (ca, 8, 1, 1), {}), helper.make_node("Relu", ["ca"], ["a"]),
             conv_node("a", "ww", "bw", "cw", (M, ca, 3, 3), {"pads": pads})]
    tail = "cw"
    if residual:
        nodes.append(helper.make_node("Add", ["cw", "a"], ["sw"]))
        tail = "sw"
    if act == "Clip":
        nodes.append(helper.make_node("Clip", [tail, "lo", "hi"], ["r"]))
        w.update(lo=np.array(0, F32), hi=np.array(6, F32))
    elif act:
        nodes.append(helper.make_node(act, [tail], ["r"]))
    else:
        nodes.append(helper.make_node("Identity", [tail], ["r"]))
    nodes.append(conv_node("r", "wb", "bb", "y", (8, M, 1, 1), {}))
    m = model(nodes, [("x", [n, 8, H, W])], w)
    x = rng.standard_normal((n, 8, H, W)).astype(F32)
    a = np.maximum(conv_ref(x, w["wa"], w["ba"], {}), 0).astype(F32)
    r = conv_ref(a, w["ww"], w["bw"], {"pads": pads}) + (bf16(a) if residual else 0)
    r = ACTS[act](r).astype(F32)
    want = conv_ref(r, w["wb"], w["bb"], {})
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, "preferred_bf16", threads)
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert got.shape == want.shape
        rows = lm.bf16_pixel_tensors()   # a and W's output (named r, or cw where the Identity was dropped)
        assert "a" in rows and len(rows) == 2, rows
        scale = float(np.abs(want).max())
        err = float(np.abs(got - want).max())
        assert 5e-5 * scale < err <= 1.5e-2 * scale, (threads, err, scale)   # 3.4e-3 to 5.6e-3 measured
        assert cosine(got, want) > 0.9999, (threads, cosine(got, want))       # >= 0.99999 measured


@vector_winograd
@pytest.mark.parametrize("at", [(5, 5), (0, 7), (11, 0), (6, 11)])
def test_winograd_keeps_an_infinity_in_its_windows(tmp_path, at):
    """An infinite input pixel of a bf16 Winograd layer: exactly the outputs whose 3x3 windows hold it are non-finite,
    as ONNX Runtime's direct convolution makes them (a pixel at any place in a tile's 4x4 window: interior, edges)."""
    rng = np.random.default_rng(at[0] * 16 + at[1])
    C, hw = 32, 12
    w = {"wa": np.abs(rng.standard_normal((C, 8, 1, 1)) / 3).astype(F32),
         "ww": (rng.standard_normal((C, C, 3, 3)) / 17).astype(F32), "wb": (rng.standard_normal((8, C, 1, 1)) / 6).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ca"]), helper.make_node("Relu", ["ca"], ["a"]),
             helper.make_node("Conv", ["a", "ww"], ["r"], pads=[1, 1, 1, 1]), helper.make_node("Conv", ["r", "wb"], ["y"])]
    m = model(nodes, [("x", [1, 8, hw, hw])], w)
    x = np.abs(rng.standard_normal((1, 8, hw, hw))).astype(F32)
    x[0, :, at[0], at[1]] = np.inf
    want = run_ort(m, {"x": x})[0]
    lm = build(convert(m, str(tmp_path)), "preferred_bf16")
    got = lm.predict({"x": x})[0].get_data_to_numpy()
    assert "r" in lm.bf16_pixel_tensors()   # the 3x3 reads and writes bf16 rows: the Winograd kernel
    assert (~np.isfinite(want)).any() and np.array_equal(np.isfinite(got), np.isfinite(want))


@pytest.mark.parametrize("storage", ["rows", "blocked", "read later"])
def test_residual_block_writes_over_its_residual(tmp_path, storage):
    """A ResNet block: a = conv0(x), b = relu(conv1(a)), s = act(conv2(b) + a), y = conv3(s). a's last reader is
    conv2, whose kernel loads each tile's residual before it stores the tile's result over the same elements, so s
    takes a's buffer (Kernel::InPlaceInput): the arena holds one of the two. With ReLU a and s are bf16 rows; with
    Sigmoid float32 channel-blocked. 'read later': conv3 adds a too, so a outlives conv2 and keeps its own buffer
    (a wrong plan would hand conv3 s in place of a)."""
    rng = np.random.default_rng(len(storage))
    C, M, mid, hw = 16, 128, 16, 20
    w = {"wa": (rng.standard_normal((M, C, 1, 1)) / 4).astype(F32), "ba": rng.standard_normal(M).astype(F32),
         "wb": (rng.standard_normal((mid, M, 1, 1)) / np.sqrt(M)).astype(F32), "bb": rng.standard_normal(mid).astype(F32),
         "wc": (rng.standard_normal((M, mid, 1, 1)) / 4).astype(F32), "bc": rng.standard_normal(M).astype(F32)}
    later = storage == "read later"
    w["wd"] = (rng.standard_normal((M if later else 8, M, 3, 3)) / np.sqrt(9 * M)).astype(F32)
    w["bd"] = rng.standard_normal(w["wd"].shape[0]).astype(F32)
    act = "Sigmoid" if storage == "blocked" else "Relu"
    nodes = [conv_node("x", "wa", "ba", "ca", (M, C, 1, 1), {}), helper.make_node(act, ["ca"], ["a"]),
             conv_node("a", "wb", "bb", "cb", (mid, M, 1, 1), {}), helper.make_node("Relu", ["cb"], ["b"]),
             conv_node("b", "wc", "bc", "cc", (M, mid, 1, 1), {}), helper.make_node("Add", ["cc", "a"], ["r"]),
             helper.make_node(act, ["r"], ["s"]), conv_node("s", "wd", "bd", "cd" if later else "y", w["wd"].shape, {"pads": [1, 1, 1, 1]})]
    if later:
        nodes.append(helper.make_node("Add", ["cd", "a"], ["y"]))
    m = model(nodes, [("x", [1, C, hw, hw])], w)
    x = rng.standard_normal((1, C, hw, hw)).astype(F32)
    f = ACTS[act]
    a = f(conv_ref(x, w["wa"], w["ba"], {})).astype(F32)
    stored_a = bf16(a) if act == "Relu" else a   # as conv2 reads it back
    b = np.maximum(conv_ref(a, w["wb"], w["bb"], {}), 0)
    s_ = f(conv_ref(b, w["wc"], w["bc"], {}) + stored_a).astype(F32)
    want = conv_ref(s_, w["wd"], w["bd"], {"pads": [1, 1, 1, 1]})
    if later:
        want = want + stored_a
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, "preferred_bf16", threads)
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        scale = float(np.abs(want).max())
        assert np.abs(got - want).max() <= 2e-4 * scale, (threads, np.abs(got - want).max(), scale)
        rows, blocked = set(lm.bf16_pixel_tensors()), set(lm.channel_blocked_tensors())
        assert {"a", "s"} <= (blocked - rows if act == "Sigmoid" else rows), (rows, blocked)
        one = (hw * hw + 1) * M * 2 if act == "Relu" else hw * hw * M * 4   # a's (and s's) bytes
        arena = lm._core.arena_bytes()
        assert (arena < 2 * one) != later, (arena, one)


# Not MobileNetV2: with random weights its 17 ReLU6 blocks amplify any rounding (cosine 0.992-0.993 for lite's bf16 on
# the He-initialised full model, 0.989 for OpenVINO's bf16 on the same inputs; benchmarks/results/bf16.md).
@pytest.mark.parametrize("name", ["resnet", "bert", "vit", "convnext"])
def test_architectures_stay_close_to_float32(name, cache_dir, tmp_path):
    arch = TINY_ARCHS[name]
    path = export_onnx(name, cache_dir)
    ms = convert(path, str(tmp_path), name)
    lm = build(ms, "preferred_bf16", 2)
    for i, dims in enumerate(arch.shapes):
        feeds = arch.make_feeds(dims, np.random.default_rng(20 + i))
        got = lm.predict(feeds)[0].get_data_to_numpy()
        want = run_ort(path, feeds)[0]
        assert got.shape == want.shape
        assert cosine(got, want) > 0.999, (name, dims, cosine(got, want))


def test_isa_cap_falls_back_to_float32(tmp_path):
    """LITE_CPU_ISA=avx2 turns the AVX-512 kernels off: preferred_bf16 then computes in float32."""
    code = ("import lite; from lite import _lite; c = lite.Context(); c.cpu.precision_mode = 'preferred_bf16'; "
            f"m = lite.Model(); m.build_from_file({str(tmp_path / 'm.ms')!r}, lite.ModelType.MINDIR_LITE, c); "
            "print(m.compute_precision, _lite.cpu_features()['isa'])")
    w = {"w": np.ones((4, 4), F32)}
    convert(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [2, 4])], w), str(tmp_path), "m")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_CPU_ISA": "avx2"}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["float32", "avx2+fma"]


@pytest.mark.parametrize("M,hw", [(48, 7), (24, 9), (64, 3), (40, 12)])
def test_blocked_pointwise_in_bf16(tmp_path, M, hw):
    """Depthwise -> pointwise keeps the channel-blocked layout at bfloat16: on planes of over 64 pixels the pointwise
    Conv converts its blocked input to bf16 once and runs 12-pixel x 16/32-channel vdpbf16ps tiles, on smaller ones
    the pixel-major kernel takes it (NCHW output here: the graph output)."""
    rng = np.random.default_rng(M)
    C = 32
    w = {"dw": (rng.standard_normal((C, 1, 3, 3)) / 3).astype(F32),
         "pw": (rng.standard_normal((M, C, 1, 1)) / np.sqrt(C)).astype(F32), "b": rng.standard_normal(M).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "dw"], ["d"], group=C, pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["d"], ["r"]),
               helper.make_node("Conv", ["r", "pw", "b"], ["y"])], [("x", [2, C, hw, hw])], w)
    x = rng.standard_normal((2, C, hw, hw)).astype(F32)
    ms = convert(m, str(tmp_path))
    lm = build(ms, "preferred_bf16", 2)
    got = lm.predict([x])[0].get_data_to_numpy()
    assert "r" in lm.channel_blocked_tensors()
    dw_out = np.maximum(run_ort(helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "dw"], ["d"], group=C, pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, hw, hw])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, None)], [numpy_helper.from_array(w["dw"], "dw")]),
        opset_imports=[helper.make_opsetid("", 17)]), {"x": x})[0], 0)
    # the depthwise part in float32 (its kernel does not round), the pointwise one on bf16-rounded operands
    want = np.einsum("mc,nchw->nmhw", bf16(w["pw"][:, :, 0, 0]).astype(np.float64), bf16(dw_out)) + w["b"][:, None, None]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
    assert cosine(got, run_ort(m, {"x": x})[0]) > 0.9999


def attention_emulation(q, k, v, mask):
    """The bf16 attention kernel's arithmetic in float64: scale x K, Q, the probabilities and V rounded to bf16, the
    softmax (max, exp, sums) in float."""
    scale = 1 / np.sqrt(q.shape[-1])
    s = bf16(q) @ bf16(F32(scale) * k).transpose(0, 1, 3, 2) + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (bf16(p.astype(F32)) @ bf16(v)) / p.sum(-1, keepdims=True)


@pytest.mark.parametrize("s,l,d,dv", [(37, 201, 17, 40), (130, 300, 64, 64), (29, 70, 24, 20), (9, 40, 8, 6)])
# odd sizes; two key tiles; features not in 8s (the transposes' edges); heads of 8 (AMX pads them to a 32-value step,
# the scratch sized for it before the run's precision is known)
def test_attention_products_in_bf16(tmp_path, s, l, d, dv):
    rng = np.random.default_rng(5)
    feeds = {"q": rng.standard_normal((2, 2, s, d), F32), "k": rng.standard_normal((2, 2, l, d), F32),
             "v": rng.standard_normal((2, 2, l, dv), F32), "mask": rng.standard_normal((2, 1, s, l), F32)}
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])
    g = helper.make_graph([node], "a", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape))
                                        for n, x in feeds.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    ms = convert(m, str(tmp_path))
    want = attention_emulation(*(feeds[n].astype(np.float64) for n in ("q", "k", "v", "mask")))
    exact = build(ms, "enforce_fp32").predict(feeds)[0].get_data_to_numpy()
    for t in (1, 2):
        got = build(ms, "preferred_bf16", t).predict(feeds)[0].get_data_to_numpy()
        scale = float(np.abs(want).max())
        # bf16 probabilities are rounded against each key tile's running maximum: a few ulp of bf16 apart
        assert np.abs(got - want).max() <= 2e-3 * scale, (t, np.abs(got - want).max(), scale)
        assert np.abs(got - exact).max() > 1e-4 * scale   # bf16 arithmetic, not float32
        assert cosine(got, exact) > 0.9999


@pytest.mark.parametrize("kernel,stride", [(7, 2), (3, 2)])
def test_tight_stem_keeps_an_infinity_in_its_windows(tmp_path, kernel, stride):
    """A 3-channel stem at an even stride reads each filter row as one run of 3 x KW values; with KW odd the run's last
    pair holds the next pixel's first channel, whose weight is zero. An infinity there must not turn the outputs whose
    windows end just before it into NaN: exactly the outputs ONNX Runtime makes non-finite are."""
    rng = np.random.default_rng(kernel)
    xs, ws = (1, 3, 64, 72), (16, 3, kernel, kernel)
    attrs = {"pads": [kernel // 2] * 4, "strides": [stride, stride]}
    w = {"w": (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(F32), "b": rng.standard_normal(16).astype(F32)}
    m = model([conv_node("x", "w", "b", "y", ws, attrs)], [("x", list(xs))], w)
    x = rng.standard_normal(xs).astype(F32)
    for col in (8, 9, 40, 71):   # even and odd columns, and the row's last pixel
        x[0, 0, 20, col] = np.inf
    want = run_ort(m, {"x": x})[0]
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        got = build(ms, "preferred_bf16", threads).predict({"x": x})[0].get_data_to_numpy()
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
        finite = np.isfinite(want)
        assert np.abs(got[finite] - want[finite]).max() < 0.05 * np.abs(want[finite]).max()
