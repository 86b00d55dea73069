"""SiLU fused into Convs (the converter folds Sigmoid + Mul into the Conv; YOLO's every layer) and applied in the
kernels' registers: the pixel tiles (one-vector tiles for layers of at most 16 output channels, two-vector and wide
tiles), the blocked pointwise tiles, the blocked Winograd output transform and the blocked depthwise kernel, and in
the GEMM epilogue's vector loop (NCHW layers), with channel-blocked and NCHW outputs, one and two threads, NaN and
infinities in the input. Against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite import _lite
from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(31)


def silu_chain(shape, layers, nchw_output=True):
    """Convs (c_out, k, stride) each followed by x * sigmoid(x); with nchw_output the last one is a graph output (its
    kernel writes NCHW), else a 1x1 Conv follows it (channel-blocked between them)."""
    nodes, inits = [], []
    x, c = "x", shape[1]
    for i, (c_out, k, stride, *group) in enumerate(layers):
        group = group[0] if group else 1
        cg = c // group
        w = numpy_helper.from_array((rng.uniform(-1, 1, (c_out, cg, k, k)) / np.sqrt(cg * k * k)).astype(np.float32),
                                    f"w{i}")
        b = numpy_helper.from_array(rng.uniform(-1, 1, c_out).astype(np.float32), f"b{i}")
        inits += [w, b]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k],
                                      strides=[stride] * 2, pads=[k // 2] * 4, group=group))
        nodes.append(helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"]))
        nodes.append(helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"a{i}"]))
        x, c = f"a{i}", c_out
    if not nchw_output:
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, (8, c, 1, 1)).astype(np.float32), "wo"))
        nodes.append(helper.make_node("Conv", [x, "wo"], ["out"], kernel_shape=[1, 1]))
        x = "out"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = {
    "narrow 8 out": ((1, 3, 19, 23), [(8, 3, 2), (8, 3, 1)]),
    "narrow 16 out": ((2, 16, 17, 13), [(16, 3, 1), (16, 3, 2), (16, 1, 1)]),
    "two vectors 32 out": ((1, 16, 15, 15), [(32, 3, 2), (48, 3, 1)]),
    "wide 64 out": ((1, 64, 14, 14), [(64, 3, 2), (128, 3, 2)]),
    "winograd f4": ((1, 64, 26, 22), [(64, 3, 1), (64, 3, 1)]),
    "winograd f2": ((1, 64, 16, 16), [(128, 3, 1)]),
    "pointwise": ((2, 32, 12, 11), [(32, 1, 1), (64, 1, 1), (40, 1, 1)]),
    "depthwise": ((1, 64, 21, 19), [(64, 3, 1, 64), (64, 3, 2, 64), (64, 7, 1, 64)]),
    "nchw gemm 12 out": ((1, 12, 10, 9), [(12, 1, 1), (20, 3, 1)]),   # not whole blocks: NCHW kernels
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("nchw_output", [True, False], ids=["nchw out", "blocked between"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_silu_in_conv_kernels(case, nchw_output, threads, tmp_path):
    shape, layers = CASES[case]
    model = silu_chain(shape, layers, nchw_output)
    x = rng.normal(0, 2, shape).astype(np.float32)
    assert_parity(model, {"x": x}, threads=threads, rtol=1e-4, atol=1e-4)
    m = load(convert(model, str(tmp_path)), threads)   # the activation was fused: no Sigmoid / Mul left
    m.enable_profiling()
    m.predict({"x": x})
    assert {p["op"] for p in m.last_profile()} == {"Conv"}


# (not Winograd: its transforms mix a tile's inputs, so one infinite input is NaN across the output tile, where
# direct summation keeps it to the pixels that read it: a property of the algorithm, not of the activation)
@pytest.mark.parametrize("case", ["narrow 16 out", "two vectors 32 out", "wide 64 out", "pointwise", "depthwise",
                                  "nchw gemm 12 out"])
def test_silu_in_conv_kernels_nan_and_inf(case):
    shape, layers = CASES[case]
    model = silu_chain(shape, layers[:1])
    x = rng.normal(0, 2, shape).astype(np.float32)
    x[0, 0, 1, 1], x[0, -1, 2, 3], x[-1, 1, -1, -1] = np.nan, np.inf, -np.inf
    assert_parity(model, {"x": x}, rtol=1e-4, atol=1e-4)


FEATURES = _lite.cpu_features()


def run_at_precision(model, shape, precision: str, threads: int, tmp_path, max_err: float):
    """The model at `precision` on a normal input, checked against ONNX Runtime's float32 (cosine > 0.999, max error
    under max_err of the output's scale); returns the profiled lite.Model."""
    x = rng.normal(0, 2, shape).astype(np.float32)
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    ctx.cpu.precision_mode = precision
    m = lite.Model()
    m.build_from_file(convert(model, str(tmp_path)), lite.ModelType.MINDIR_LITE, ctx)
    m.enable_profiling()
    got = m.predict({"x": x})[0].get_data_to_numpy()
    want = run_ort(model, {"x": x})[0]
    cos = float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.999 and np.abs(got - want).max() < max_err * np.abs(want).max(), cos
    return m


@pytest.mark.skipif(not FEATURES["avx512_bf16"], reason="needs AVX512_BF16")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["two vectors 32 out", "wide 64 out", "pointwise", "narrow 16 out"])
def test_silu_chains_at_bf16(case, threads, tmp_path):
    """At preferred_bf16 the bf16 pixel-major Convs apply SiLU in their tiles, so a SiLU Conv writes bf16 rows for the
    next one (it had written float32 and run SiLU in a pass after: YOLOv8n at bf16 76 -> 28 ms)."""
    shape, layers = CASES[case]
    m = run_at_precision(silu_chain(shape, layers, nchw_output=False), shape, "preferred_bf16", threads, tmp_path, 0.05)
    if len(layers) > 1:
        assert m.bf16_pixel_tensors(), "the SiLU Convs between them should pass bf16 rows"


@pytest.mark.skipif(not FEATURES["fp16_kernels"] or FEATURES["isa"] == "neon",
                    reason="the x86 float16 tiles need AVX512-FP16")
@pytest.mark.parametrize("threads", [1, 2])
def test_silu_chains_at_fp16(threads, tmp_path):
    """At preferred_fp16 the blocked pointwise float16 tiles apply SiLU in registers (YOLOv8n at float16 69 -> 47 ms):
    a 3x3 Conv writes channel blocks, 1x1 SiLU Convs read them on the float16 tiles."""
    shape = (1, 32, 24, 24)
    model = silu_chain(shape, [(32, 3, 1), (32, 1, 1), (64, 1, 1), (32, 1, 1)], nchw_output=False)
    m = run_at_precision(model, shape, "preferred_fp16", threads, tmp_path, 0.02)
    assert [p["kernel"] for p in m.last_profile()].count("blocked_pointwise_fp16") >= 2, m.last_profile()
