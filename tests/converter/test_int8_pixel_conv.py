"""The pixel-major integer Conv (lite/src/cpu/quantized/u8_pixel_conv.h, AVX-512 VNNI) and its uint8 rows storage
(core/u8_pixel_layout.h), against the channel-major integer kernels (LITE_INT8_PIXEL=0), which the integer tests in
test_integer_quant.py check against a NumPy emulation of the integer arithmetic. Both compute the same exact int32
sums; only the float epilogue's rounding order differs, so the outputs agree to float rounding but where an
intermediate code lands on the other side of a rounding tie.

Each case is a FULL_QUANT chain whose quantised tensors have zero points far from 0 (no ReLU before them), so the
zero point's share of the sums (and of the padding taps the kernel skips) is exercised:
  x -> A (1x1, float in) = a ;  a -> B (the geometry under test) + R(a) (same geometry: the residual) -> act = b ;
  b -> D (1x1) = y (float).
A quantises its float input per run and runs pixel-major too, so a is uint8 rows, and so are R's and B's outputs
when D runs pixel-major; LITE_U8_ROWS=0 runs the same kernels on NCHW tensors (their transposing copies)."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from lite import _lite
from parity import random_depthwise_shapes
from converter.api import Converter

sys.path.insert(0, os.path.dirname(__file__))
from isolated_run import run_isolated  # noqa: E402
from test_integer_quant import F32, rel_err, run, save_model, uint8_activations_in, write_cfg  # noqa: E402

VNNI = bool(_lite.cpu_features().get("avx512_vnni"))
AMX_INT8 = bool(_lite.cpu_features().get("amx_int8"))


def full_quant(tmp_path, name, nodes, x_shape, weights, samples, extra_cfg=""):
    """The ONNX model of `nodes` (input x, output y) and its FULL_QUANT conversion, calibrated on `samples`."""
    src = save_model(tmp_path / f"{name}.onnx", nodes, [("x", list(x_shape))], ["y"],
                     {k: np.asarray(v, F32) for k, v in weights.items()})
    cal = tmp_path / "cal"
    os.makedirs(cal, exist_ok=True)
    for i, sample in enumerate(samples):
        np.save(cal / f"{i}.npy", sample)
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT",
                    f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n{extra_cfg}")
    Converter().convert("ONNX", src, str(tmp_path / name), config_file=cfg)
    return src, str(tmp_path / f"{name}.ms")


def chain(tmp_path, rng, C, M, kernel, strides, pads, dilation, hw, act, residual, tail):
    """The chain above; tail = D's output channels (a multiple of 8: pixel-major, 12: the channel-major kernel reads b
    as NCHW)."""
    cin = 32   # A's depth: at least MIN_INTEGER_DEPTH, or A stays float
    kh, kw = kernel
    w = {"wa": rng.standard_normal((C, cin, 1, 1)) * 0.5, "ba": rng.standard_normal(C) * 0.3 + 0.5,
         "wb": rng.standard_normal((M, C, kh, kw)) * (1.0 / np.sqrt(C * kh * kw)), "bb": rng.standard_normal(M) * 0.2,
         "wr": rng.standard_normal((M, C, kh, kw)) * (1.0 / np.sqrt(C * kh * kw)),
         "wd": rng.standard_normal((tail, M, 1, 1)) * (1.0 / np.sqrt(M))}
    geo = dict(kernel_shape=list(kernel), strides=list(strides), pads=list(pads), dilations=[dilation] * 2)
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["cb"], **geo)]
    last = "cb"
    if residual:
        nodes += [helper.make_node("Conv", ["a", "wr"], ["r"], **geo), helper.make_node("Add", ["cb", "r"], ["s"])]
        last = "s"
    if act == "Relu6":   # ONNX's Clip(0, 6), which the converter fuses as ReLU6
        w["lo"], w["hi"] = np.array(0.0), np.array(6.0)
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["b"]))
        last = "b"
    elif act != "none":
        nodes.append(helper.make_node(act, [last], ["b"]))
        last = "b"
    nodes.append(helper.make_node("Conv", [last, "wd"], ["y"]))
    samples = [rng.standard_normal((2, cin, *hw)).astype(F32) for _ in range(4)]
    return full_quant(tmp_path, "chain", nodes, (2, cin, *hw), w, samples)


def assert_equal_but_near_ties(got, ref):
    """got from the pixel-major kernels, ref from kernels that sum the same exact int32 products but requantise in
    other steps: the pixel-major epilogue folds the scales into one FMA before its one rounding, the channel-major
    and direct kernels dequantise, activate and scale (two roundings). They agree to float rounding except where an
    intermediate code lies within float error of a rounding tie and lands on the tie's other side; each such code
    moves the outputs it feeds by about one code's worth (a few percent of the output's RMS). A wrong tap, channel or
    zero-point share moves far more outputs by far more."""
    cos = float(got.ravel() @ ref.ravel() / np.linalg.norm(got) / np.linalg.norm(ref))
    far = float(np.mean(np.abs(got - ref) > 2e-3 * np.sqrt(np.mean(ref.astype(np.float64) ** 2))))
    assert cos > 0.99999 and rel_err(got, ref) < 0.1 and far < 0.1, (cos, rel_err(got, ref), far)


def run_with(env, path, x, threads):
    """run() in a fresh process with `env` (the switches are read once per process), on lite's own kernels: where
    oneDNN's AMX convolutions would take the Convs between uint8 rows (tests/lite/test_onednn.py tests those) they
    round at other points than lite's, so LITE_ONEDNN=0."""
    return run_isolated(path, {"x": x}, threads, {"LITE_ONEDNN": "0", **env})


CASES = [   # C, M, kernel, strides, pads (top, left, bottom, right), dilation, hw
    (64, 48, (3, 3), (1, 1), (1, 1, 1, 1), 1, (13, 11)),   # two depth blocks (144 quads); a 16-channel last panel
    (32, 32, (3, 3), (2, 2), (1, 1, 1, 1), 1, (15, 14)),   # stride 2
    (32, 64, (1, 1), (2, 2), (0, 0, 0, 0), 1, (14, 14)),   # a strided 1x1
    (576, 16, (1, 1), (1, 1), (0, 0, 0, 0), 1, (7, 7)),    # a tap split over two depth blocks; a 7-wide plane
    (32, 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, (7, 7)),     # 7-wide: tiles are plane rows, top and bottom taps skipped
    (8, 32, (3, 3), (1, 1), (2, 2, 2, 2), 2, (9, 10)),     # dilation
    (12, 16, (5, 5), (2, 1), (2, 1, 0, 2), 1, (11, 9)),    # unequal strides, asymmetric pads
    # output channels a multiple of 8, not 16: a last panel of 24 or 8 channels, stored masked
    (32, 24, (3, 3), (1, 1), (1, 1, 1, 1), 1, (13, 11)),   # one 24-channel panel (MobileNetV2's projections)
    (48, 40, (1, 1), (1, 1), (0, 0, 0, 0), 1, (9, 10)),    # 32 + 8
    (32, 56, (3, 3), (2, 2), (1, 1, 1, 1), 1, (15, 13)),   # 32 + 24, stride 2
    (32, 8, (3, 3), (1, 1), (1, 1, 1, 1), 1, (10, 9)),     # 8 channels into floats (D's depth of 8 stays float)
    (32, 16, (1, 1), (1, 1), (0, 0, 0, 0), 1, (12, 10)),   # one AMX step deep, 16 outputs (oneDNN's where loaded)
]


# Per case: B's activation, whether R adds its residual, D's output channels.
CASE_ENDS = [("Relu", True, 16), ("none", True, 16), ("Relu6", False, 16), ("Relu", True, 12), ("none", False, 16),
             ("Relu", True, 16), ("Relu", False, 12), ("Relu", True, 24), ("Relu6", True, 40), ("none", True, 8),
             ("Relu", True, 16), ("Relu", True, 16)]


def case_chain(tmp_path, case: int):
    """CASES[case]'s chain (the FULL_QUANT model and its ONNX source) and an input for it."""
    C, M, kernel, strides, pads, dilation, hw = CASES[case]
    rng = np.random.default_rng(case)
    src, ms = chain(tmp_path, rng, C, M, kernel, strides, pads, dilation, hw, *CASE_ENDS[case])
    return src, ms, rng.standard_normal((2, 32, *hw)).astype(F32)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_pixel_major_integer_conv(tmp_path, case, threads):
    src, ms, x = case_chain(tmp_path, case)
    codes = uint8_activations_in(ms)
    assert codes["a"][1] > 20   # the input's zero point: a signed range
    got = run_with({}, ms, x, threads)
    channel_major = run_with({"LITE_INT8_PIXEL": "0"}, ms, x, threads)
    nchw = run_with({"LITE_U8_ROWS": "0"}, ms, x, threads)
    np.testing.assert_array_equal(got, nchw)   # the same kernel on NCHW copies: the same codes, bit for bit
    assert_equal_but_near_ties(got, channel_major)
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99


@pytest.mark.skipif(not AMX_INT8, reason="no AMX-INT8 here (or LITE_CPU_ISA caps it)")
@pytest.mark.parametrize("case", range(len(CASES)))
def test_amx_tiles_equal_the_vnni_tiles(tmp_path, case):
    """On AMX CPUs the pixel-major integer Convs run TDPBUSD tiles of up to 32 pixels (gathered input rows, partial
    steps for 8- and 12-channel inputs); LITE_CPU_ISA=avx512 runs the VNNI tiles. Both sum the same exact int32
    products and share the epilogue: the outputs are equal bit for bit."""
    _, ms, x = case_chain(tmp_path, case)
    for threads in (1, 2):
        np.testing.assert_array_equal(run_with({}, ms, x, threads), run_with({"LITE_CPU_ISA": "avx512"}, ms, x, threads))


# Quantisations calibration never makes, so that every clamp of the uint8 epilogue clamps: B's output with its zero
# point at 60 (ReLU's floor above 0), ReLU6's output quantised over [-0.94, 11.06] (its ceiling the code 148, its
# floor 20), and B's bias at +1e30, -1e30 and NaN in three channels (the codes capped before their conversion:
# 255, 0 and the floor).
EPILOGUE_OVERRIDES = [("Relu", (0.05, 60), False), ("Relu6", (12 / 255, 20), False), ("none", None, True),
                      ("Relu", (0.05, 60), True)]


@pytest.mark.skipif(not VNNI, reason="the pixel-major integer Conv needs AVX-512 VNNI")
@pytest.mark.parametrize("act,quant,extreme_bias", EPILOGUE_OVERRIDES, ids=["floor", "relu6", "cap", "floor-cap"])
def test_code_epilogue_clamps_and_caps(tmp_path, act, quant, extreme_bias):
    """The uint8 epilogue (two rows at a time: packs, byte clamps, a cap before the conversion where Bind finds
    codes may be NaN or past int32) against the channel-major kernels' separate steps, on a 9x9 plane (tiles of odd
    row counts) with a residual; the AMX and VNNI tiles bit for bit."""
    from converter.passes import run_pipeline
    from converter.quantization import apply_integer_quant, parse_config
    from converter.writer import write_ms
    rng = np.random.default_rng(21)
    src, _ = chain(tmp_path, rng, 64, 48, (1, 1), (1, 1), (0, 0, 0, 0), 1, (9, 9), act, True, 16)
    graph = Converter().load("ONNX", src)
    run_pipeline(graph, Converter().optimize)
    apply_integer_quant(graph, parse_config(str(tmp_path / "q.cfg")))
    conv_b = next(n for n in graph.nodes if len(n.inputs) == 4)   # B with R's residual fused in
    out = graph.tensors[conv_b.outputs[0]]
    assert out.act_quant is not None
    if quant is not None:
        out.act_quant = quant
    if extreme_bias:
        bias = graph.tensors[conv_b.inputs[2]]
        bias.data = np.array(bias.data, F32)
        bias.data[[3, 5, 7]] = [1e30, -1e30, np.nan]
    ms = str(tmp_path / "override.ms")
    write_ms(graph, ms)
    x = rng.standard_normal((2, 32, 9, 9)).astype(F32)
    got = run_with({}, ms, x, 1)
    assert np.isfinite(got).all()
    assert_equal_but_near_ties(got, run_with({"LITE_INT8_PIXEL": "0"}, ms, x, 1))
    np.testing.assert_array_equal(got, run_with({}, ms, x, 2))
    if AMX_INT8:
        np.testing.assert_array_equal(got, run_with({"LITE_CPU_ISA": "avx512"}, ms, x, 1))


def test_rows_between_pixel_major_convs(tmp_path):
    """Which tensors are stored as uint8 rows: those only pixel-major Convs write and read."""
    if not VNNI:
        pytest.skip("the pixel-major integer Conv needs AVX-512 VNNI")
    import lite
    rng = np.random.default_rng(7)
    for tail, want in ((16, {"a", "r", "b"}), (8, {"a", "r", "b"}), (12, {"a", "r"})):
        d = tmp_path / str(tail)
        os.makedirs(d)
        _, ms = chain(d, rng, 32, 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, (9, 9), "Relu", True, tail)
        m = lite.Model()
        m.build_from_file(ms)
        m.predict({"x": rng.standard_normal((2, 32, 9, 9)).astype(F32)})
        assert set(m.u8_pixel_tensors()) == want




@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("M,kernel,hw", [(64, 1, (7, 7)), (48, 3, (6, 5)), (2048, 1, (7, 7))],
                         ids=["64x1x1", "48x3x3-half-panel", "2048x1x1"])
def test_float_output_into_blocked_pool(tmp_path, M, kernel, hw, threads):
    """ResNet's end: a pixel-major integer Conv adding a uint8 residual, ReLU, float32 out into a global pool. Its
    output is channel-blocked (the tiles store each pixel's 8-channel runs in place, a 16-channel last panel two of
    them); LITE_CHANNEL_BLOCKED=0 stores float rows transposed into NCHW. The Conv's values are the same either way,
    the pools sum them in other orders: equal to float rounding."""
    if not VNNI:
        pytest.skip("the pixel-major integer Conv needs AVX-512 VNNI")
    rng = np.random.default_rng(M + kernel)
    cin, mid = 32, 32
    w = {"wa": rng.standard_normal((M, cin, 1, 1)) * 0.3, "ba": rng.standard_normal(M) * 0.2 + 0.3,
         "wb": rng.standard_normal((mid, M, 1, 1)) / np.sqrt(M), "bb": rng.standard_normal(mid) * 0.2 + 0.3,
         "wd": rng.standard_normal((M, mid, kernel, kernel)) / np.sqrt(mid * kernel * kernel),
         "bd": rng.standard_normal(M) * 0.2}
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["ca"]), helper.make_node("Relu", ["ca"], ["a"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["cb"]), helper.make_node("Relu", ["cb"], ["b"]),
             helper.make_node("Conv", ["b", "wd", "bd"], ["d"], kernel_shape=[kernel] * 2, pads=[kernel // 2] * 4),
             helper.make_node("Add", ["d", "a"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    samples = [rng.standard_normal((1, cin, *hw)).astype(F32) for _ in range(4)]
    src, ms = full_quant(tmp_path, "end", nodes, (1, cin, *hw), w, samples)
    x = rng.standard_normal((1, cin, *hw)).astype(F32)
    import lite
    m = lite.Model()
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    m.build_from_file(ms, lite.ModelType.MINDIR_LITE, ctx)
    got = m.predict({"x": x})[0].get_data_to_numpy()
    assert "r" in set(m.channel_blocked_tensors()) and "r" not in set(m.u8_pixel_tensors())
    nchw = run_isolated(ms, {"x": x}, threads, {"LITE_CHANNEL_BLOCKED": "0"})
    np.testing.assert_allclose(got, nchw, rtol=1e-5, atol=1e-6)
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99

def mobilenet_block(tmp_path, rng, C, E, stride, hw, first_float=False):
    """x -> A (1x1, C -> E, ReLU6) = a -> D (3x3 depthwise, stride, ReLU6) = d -> B (1x1, E -> C) = y; with
    first_float the depthwise Conv reads the graph input directly (no integer Conv before it)."""
    w = {"wa": rng.standard_normal((E, C, 1, 1)) / np.sqrt(C), "ba": rng.standard_normal(E) * 0.2 + 0.5,
         "wd": rng.standard_normal((E, 1, 3, 3)) / 3.0, "bd": rng.standard_normal(E) * 0.2,
         "wb": rng.standard_normal((C, E, 1, 1)) / np.sqrt(E), "lo": np.array(0.0), "hi": np.array(6.0)}
    d_in = "x" if first_float else "a"
    nodes = [] if first_float else [helper.make_node("Conv", ["x", "wa", "ba"], ["ca"]),
                                    helper.make_node("Clip", ["ca", "lo", "hi"], ["a"])]
    nodes += [helper.make_node("Conv", [d_in, "wd", "bd"], ["cd"], group=E, kernel_shape=[3, 3], pads=[1] * 4,
                               strides=[stride] * 2),
              helper.make_node("Clip", ["cd", "lo", "hi"], ["d"]),
              helper.make_node("Conv", ["d", "wb"], ["y"])]
    cin = E if first_float else C
    samples = [rng.standard_normal((2, cin, *hw)).astype(F32) for _ in range(4)]
    return (*full_quant(tmp_path, "mb", nodes, (2, cin, *hw), w, samples), cin)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("C,E,stride,hw", [(32, 96, 1, (13, 11)), (32, 40, 2, (15, 14)), (48, 144, 2, (8, 9))])
def test_integer_depthwise_conv(tmp_path, threads, C, E, stride, hw):
    """FULL_QUANT runs a MobileNet block's depthwise Conv on uint8 codes (cpu/quantized/u8_depthwise.h) between its integer 1x1
    Convs: the codes stay uint8 (rows on VNNI CPUs) from the expansion through the projection. Its 16-channel vector
    path (40 channels: a masked tail) against its plain C++ path (LITE_CPU_ISA=avx2, with the other kernels' AVX2
    tiles: the same integers), against itself on NCHW copies (bit for bit), and close to ONNX Runtime's float32."""
    rng = np.random.default_rng(C + E + stride)
    src, ms, cin = mobilenet_block(tmp_path, rng, C, E, stride, hw)
    assert {"a", "d"} <= set(uint8_activations_in(ms))   # the depthwise Conv reads and writes codes
    x = rng.standard_normal((2, cin, *hw)).astype(F32)
    got = run_with({}, ms, x, threads)
    np.testing.assert_array_equal(got, run_with({"LITE_U8_ROWS": "0"}, ms, x, threads))
    plain = run_with({"LITE_CPU_ISA": "avx2"}, ms, x, threads)
    assert_equal_but_near_ties(got, plain)
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.999
    if VNNI:
        import lite
        m = lite.Model()
        m.build_from_file(ms)
        m.predict({"x": x})
        # (a stays NCHW when the expansion's 40 outputs keep it off the pixel-major Conv: 16-channel multiples)
        assert ({"a", "d"} if E % 16 == 0 else {"d"}) <= set(m.u8_pixel_tensors())


def test_depthwise_on_a_float_input_stays_float(tmp_path):
    """A depthwise Conv with no integer Conv before it keeps float arithmetic (quantising and transposing its float
    input first cost more than its float kernel)."""
    _, ms, _ = mobilenet_block(tmp_path, np.random.default_rng(3), 32, 48, 1, (9, 9), first_float=True)
    assert "d" not in uint8_activations_in(ms)


@pytest.mark.parametrize("cin,integer", [(16, True), (24, True), (12, False)])
def test_full_quant_convs_from_16_terms(tmp_path, cin, integer):
    """FULL_QUANT makes Convs of 16 or more terms per output integer (MobileNetV2's 16- and 24-channel 1x1 layers:
    between integer Convs nothing is quantised), fewer stay float; DYNAMIC_QUANT, which quantises every input per
    run, keeps float below 32 terms."""
    rng = np.random.default_rng(cin)
    w = {"wa": rng.standard_normal((32, cin, 1, 1)) / np.sqrt(cin), "ba": rng.standard_normal(32) * 0.2 + 0.3,
         "wb": rng.standard_normal((16, 32, 1, 1)) / np.sqrt(32)}
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["ca"]), helper.make_node("Relu", ["ca"], ["a"]),
             helper.make_node("Conv", ["a", "wb"], ["y"])]
    samples = [rng.standard_normal((1, cin, 9, 9)).astype(F32) for _ in range(4)]
    src, ms = full_quant(tmp_path, "f", nodes, (1, cin, 9, 9), w, samples)
    assert ("a" in uint8_activations_in(ms)) == integer   # A's codes handed to B: A integer
    x = rng.standard_normal((1, cin, 9, 9)).astype(F32)
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    got = run(ms, {"x": x}, 1)[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.999
    res = Converter().convert("ONNX", src, str(tmp_path / "dyn"), config_file=write_cfg(tmp_path / "d.cfg",
                                                                                       "DYNAMIC_QUANT"))
    assert res.quant_report["compressed_tensors"] == 1   # B only (32 terms)


DEPTHWISE_GEOMETRIES = {   # name: (E, stride, hw, kernel, pads (top, left, bottom, right), ReLU6 before it)
    "3x3 stride 1": (48, 1, (13, 21), (3, 3), (1, 1, 1, 1), True),
    "3x3 stride 2": (40, 2, (20, 37), (3, 3), (1, 1, 1, 1), True),
    # the slide form's other shapes (3- and 5-wide filters at stride 1 or 2) and the per-tap form's (7-wide)
    "5x5 stride 1": (32, 1, (11, 19), (5, 5), (2, 2, 2, 2), True),
    "5x5 stride 2, one-sided pads": (48, 2, (13, 22), (5, 5), (2, 1, 2, 1), True),
    "3x5 on a plane narrower than the filter": (16, 1, (6, 3), (3, 5), (1, 2, 1, 2), True),
    "1x3, 24 channels (NCHW codes in)": (24, 1, (9, 17), (1, 3), (0, 1, 0, 1), True),
    "7x7": (32, 1, (10, 12), (7, 7), (3, 3, 3, 3), True),
    # no ReLU6 before: codes with a zero point inside their range (the slide form starts its sums at its share)
    "3x3 stride 1, input zero point": (48, 1, (12, 19), (3, 3), (1, 1, 1, 1), False),
    "5x5 stride 2, input zero point": (32, 2, (15, 18), (5, 5), (2, 2, 2, 2), False),
    "7x7, input zero point": (16, 1, (9, 11), (7, 7), (3, 3, 3, 3), False),
}


# seeded ones the named geometries do not pin down: filters of 1-7 rows and columns, every one-sided pad
DEPTHWISE_GEOMETRIES.update({
    f"random {i}: {kh}x{kw} stride {s} on {h}x{w}, pads {pads}": (E, s, (h, w), (kh, kw), pads, i % 2 == 0)
    for i, (E, h, w, kh, kw, s, _, pads) in enumerate(random_depthwise_shapes(5, 12, (1, 3, 5, 7)))})


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(DEPTHWISE_GEOMETRIES))
def test_integer_depthwise_is_integer_arithmetic(tmp_path, threads, name):
    """x -> A (1x1, ReLU6 or none) -> uint8 codes -> depthwise (ReLU6) -> float output, against a NumPy emulation of the
    integer arithmetic (A's input quantised with its calibrated scale, int32 sums, float epilogues, A's output
    requantised with the file's scale and zero point): planes wide enough for the 8-pixel groups at both strides,
    filters of 1-7 rows and 3-7 columns, taps in the padding on every side (the zero point's code there)."""
    E, stride, hw, (kh, kw), (pt, pl, pb, pr), a_clip = DEPTHWISE_GEOMETRIES[name]
    from converter.quantization import quantize
    from converter.quantization.integer_quant import activation_range, uint8_params
    rng = np.random.default_rng(E + stride)
    C = 32
    wa = (rng.standard_normal((E, C, 1, 1)) / np.sqrt(C)).astype(F32)
    ba = (rng.standard_normal(E) * 0.2 + 0.5).astype(F32)
    wd = (rng.standard_normal((E, 1, kh, kw)) / np.sqrt(kh * kw)).astype(F32)
    bd = (rng.standard_normal(E) * 0.2).astype(F32)
    samples = [rng.standard_normal((1, C, *hw)).astype(F32) for _ in range(4)]
    a_nodes = ([helper.make_node("Conv", ["x", "wa", "ba"], ["ca"]), helper.make_node("Clip", ["ca", "lo", "hi"], ["a"])]
               if a_clip else [helper.make_node("Conv", ["x", "wa", "ba"], ["a"])])
    src, ms = full_quant(tmp_path, "d", [
        *a_nodes,
        helper.make_node("Conv", ["a", "wd", "bd"], ["cd"], group=E, kernel_shape=[kh, kw], pads=[pt, pl, pb, pr],
                         strides=[stride] * 2),
        helper.make_node("Clip", ["cd", "lo", "hi"], ["y"])], (1, C, *hw),
        {"wa": wa, "ba": ba, "wd": wd, "bd": bd, "lo": np.array(0, F32), "hi": np.array(6, F32)}, samples,
        "[full_quant_param]\nbias_correction=false\n")
    sa, za = uint8_activations_in(ms)["a"]
    x = rng.standard_normal((1, C, *hw)).astype(F32)
    got = run(ms, {"x": x}, threads)[0]
    # A: x quantised with the calibrated input scale, 7-bit weight codes, int32 sums, ReLU6 (or none), requantised.
    sx, zx = uint8_params(*activation_range(np.concatenate([s.ravel() for s in samples]), "MAX_MIN"))
    qx = np.clip(np.rint(x[0] * (F32(1) / F32(sx))) + zx, 0, 255).astype(np.int64) - zx
    qa = quantize(wa, 8, 0, 0, True, 63)
    acc_a = qa.data.astype(np.int64).reshape(E, C) @ qx.reshape(C, -1)
    fa = acc_a.astype(np.float64) * (F32(sx) * qa.scale)[:, None] + ba[:, None]
    fa = (np.clip(fa, 0, 6) if a_clip else fa).astype(F32)
    assert a_clip or 32 < za < 224, za   # the zero point inside the codes' range
    scaled = fa * (F32(1) / F32(sa))
    codes = np.clip(np.rint(scaled) + za, 0, 255).astype(np.int64).reshape(E, *hw) - za
    # A's pixel-major kernel rounds once in code units, this emulation twice: a value within float error of a rounding
    # tie may take the other code, so the outputs whose window reads one are left out of the comparison.
    tie = (np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) < 1e-4).reshape(E, *hw)
    # The depthwise Conv on those codes: zero padding is code za, 0 after the shift.
    qd = quantize(wd, 8, 0, 0, True, 63)
    wcodes = qd.data.astype(np.int64).reshape(E, kh, kw)
    padded = np.pad(codes, ((0, 0), (pt, pb), (pl, pr)))
    oh, ow = (hw[0] + pt + pb - kh) // stride + 1, (hw[1] + pl + pr - kw) // stride + 1
    acc = sum(padded[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] * wcodes[:, i, j, None, None]
              for i in range(kh) for j in range(kw))
    want = np.clip(acc * (F32(sa) * qd.scale)[:, None, None] + bd[:, None, None], 0, 6)
    assert got.shape == (1, E, oh, ow)
    tie = np.pad(tie, ((0, 0), (pt, pb), (pl, pr)))
    near_tie = sum(tie[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
                   for i in range(kh) for j in range(kw)) > 0
    assert near_tie.mean() < 0.05, near_tie.mean()
    assert rel_err(np.where(near_tie, want, got[0]), want) < 1e-4, rel_err(np.where(near_tie, want, got[0]), want)


STEMS = [   # C, M, kernel, strides, pads (top, left, bottom, right), hw
    (3, 32, (7, 7), (2, 2), (3, 3, 3, 3), (30, 29)),   # ResNet's stem (odd width: tiles across output rows)
    (1, 32, (7, 5), (1, 1), (3, 2, 3, 2), (9, 40)),    # one channel, stride 1: rows 4 bytes apart
    (2, 48, (5, 7), (2, 1), (0, 1, 2, 0), (17, 23)),   # unequal strides, asymmetric pads; a 16-channel last panel
]   # depths of 35-147 values and 32+ outputs (the 1x1 after it): the converter's MIN_INTEGER_DEPTH (32), or a Conv
#   stays float, and a stem with a float output stays on the channel-major kernels


@pytest.mark.skipif(not AMX_INT8, reason="no AMX-INT8 here (or LITE_CPU_ISA caps it)")
@pytest.mark.parametrize("extreme", [False, True], ids=["finite", "nan-inf-huge"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(STEMS)))
def test_stem_on_amx_tiles(tmp_path, case, threads, extreme):
    """A stem's 1-3 input channels are not channel quads: on AMX they run pixel-major all the same, one segment per
    pair of filter rows over a padded copy (U8PixelConv::BuildFewChannels); with LITE_CPU_ISA=avx512 the VNNI direct
    kernel runs them. The same exact int32 sums (the padding holds the zero point), different float epilogues: equal
    to float rounding but where a code lands on the other side of a rounding tie. The MaxPool after the stem reads
    and writes uint8 rows (MaxPoolU8Rows): bit for bit what it gives on NCHW codes (LITE_U8_ROWS=0). The stem
    quantises its float input straight into its padded copy; with NaN, +-inf and +-1e30 among the inputs (in 16-pixel
    steps and in a row's last, partial one) it saturates them as QuantizeRowsU8 (the VNNI kernel's input) and the plain
    C++ path (LITE_CPU_ISA=portable) do: inf and 1e30 to 255, their negatives to 0, NaN to 0."""
    C, M, kernel, strides, pads, hw = STEMS[case]
    rng = np.random.default_rng(40 + case)
    w = {"ws": rng.standard_normal((M, C, *kernel)) * (1.0 / np.sqrt(C * kernel[0] * kernel[1])),
         "bs": rng.standard_normal(M) * 0.2, "wd": rng.standard_normal((16, M, 1, 1)) * (1.0 / np.sqrt(M))}
    nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["s"], kernel_shape=list(kernel), strides=list(strides),
                              pads=list(pads)),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "wd"], ["y"])]
    samples = [(rng.standard_normal((1, C, *hw)) + 0.7).astype(F32) for _ in range(4)]   # a zero point far from 0
    src, ms = full_quant(tmp_path, "stem", nodes, (1, C, *hw), w, samples)
    x = (rng.standard_normal((1, C, *hw)) + 0.7).astype(F32)
    if extreme:
        for (c, i, j), v in zip([(0, 1, 2), (C - 1, 3, hw[1] - 1), (0, hw[0] - 2, 17), (C - 1, 5, 0), (0, 7, hw[1] - 2)],
                                [np.nan, np.inf, -np.inf, 1e30, -1e30]):
            x[0, c, i, j] = v
    got = run_with({}, ms, x, threads)
    np.testing.assert_array_equal(got, run_with({"LITE_U8_ROWS": "0"}, ms, x, threads))
    vnni = run_with({"LITE_CPU_ISA": "avx512"}, ms, x, threads)
    assert_equal_but_near_ties(got, vnni)
    if extreme:
        assert_equal_but_near_ties(got, run_with({"LITE_CPU_ISA": "portable"}, ms, x, threads))
        return
    import lite
    m = lite.Model()
    m.build_from_file(ms)
    m.predict({"x": x})
    assert set(m.u8_pixel_tensors()) == {"r", "p"}   # the stem's output and the pool's, as rows
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99
