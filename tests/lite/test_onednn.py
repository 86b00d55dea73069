"""oneDNN's AMX convolutions behind the CPU backend (issue 36; cpu/onednn/onednn_library.h, onednn_conv.h): on CPUs with
AMX-BF16 where oneDNN's library loads, the bf16 Convs between bf16 rows (and stems reading the NCHW float32 input) run
on its AMX kernels, the output rows split between lite's threads. Against the same emulation as lite's own bf16 Convs
(tests/lite/test_bf16.py): each Conv on bf16-rounded operands summed in float32, its output rounded to bf16 where it is
stored as rows. The status report and LITE_ONEDNN=0 are tested everywhere."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from lite import _lite
from parity import convert, run_ort
from test_bf16 import F32, build, conv_node, model, residual_chain

INFO = _lite.onednn_info()
ON_ONEDNN = _lite.cpu_features()["amx_bf16"] and INFO["loaded"]
needs_onednn = pytest.mark.skipif(not ON_ONEDNN, reason=f"no AMX-BF16 or no oneDNN here ({INFO['status']})")


def test_status_is_reported():
    info = _lite.onednn_info()
    assert set(info) == {"loaded", "status", "convolutions"}
    assert info["status"].startswith("oneDNN 3.") == info["loaded"], info
    code = "from lite import _lite; i = _lite.onednn_info(); print(i['loaded'], i['status'], i['convolutions'])"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_ONEDNN": "0"}, capture_output=True,
                       text=True, check=True)
    assert r.stdout.split(None, 1) == ["False", "LITE_ONEDNN=0 0\n"] or r.stdout.startswith("False not built in"), r.stdout


CHAINS = {   # name: (input shape, A's weight shape, A's attributes, activation, threads)
    "3x3 on 14x14": ((1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu", (1, 2)),
    "3x3 stride 2 on an odd plane": ((1, 32, 15, 13), (48, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                     "Clip", (1, 2)),
    "1x1 stride 2 (the last input row unread)": ((1, 64, 16, 16), (32, 64, 1, 1), {"strides": [2, 2]}, None, (1, 2)),
    "5x5, one-sided pads": ((1, 24, 11, 12), (96, 24, 5, 5), {"pads": [2, 0, 2, 1]}, "Relu", (1, 2)),
    "3x3 dilation 2": ((1, 16, 12, 12), (32, 16, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, None, (1, 2)),
    "3x3 on 10x7 in three parts (4, 3, 3 rows)": ((1, 128, 10, 7), (64, 128, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu", (3,)),
    "batch 2": ((2, 32, 9, 10), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu", (1, 2)),
    # the NCHW float32 input rounded into nhwc bf16 rows by lite (split by rows between threads too)
    "stem: 3 channels 7x7 stride 2": ((1, 3, 65, 63), (64, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]},
                                      "Relu", (1, 2)),
    # 2 and 4 channels (lite's own rounding into the nhwc copy, FewChannelsToNhwcBf16: vector steps and row tails)
    "stem: 2 channels 7x7": ((1, 2, 19, 30), (32, 2, 7, 7), {"pads": [3, 3, 3, 3]}, None, (1, 2)),
    "stem: 4 channels 5x5 stride 2": ((1, 4, 21, 19), (48, 4, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]},
                                      "Relu", (1, 2)),
}


def chain(name: str):
    """test_bf16's residual_chain with a tail: A (under test: its input the graph's) -> B (1x1, A's output as its
    residual) -> ReLU -> C (3x3): A's and B's outputs are bf16 rows, B adds A's (the sum post-op's copy: A's rows are
    also B's input)."""
    xs, ws, attrs, act, threads = CHAINS[name]
    m, x, want, _, _ = residual_chain(xs, ws, attrs, act, True, len(name))
    return m, x, want, threads


@needs_onednn
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_convs_between_bf16_rows_on_onednn(tmp_path, name):
    m, x, want, threads = chain(name)
    exact = run_ort(m, {"x": x})[0]
    ms = convert(m, str(tmp_path))
    results = []
    for t in threads:
        before = _lite.onednn_info()["convolutions"]
        lm = build(ms, "preferred_bf16", t)
        # A and B on oneDNN (B's 1x1 with the residual in place over A's rows); C writes the graph's float32 output
        assert _lite.onednn_info()["convolutions"] - before == 2, name
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert got.shape == want.shape
        scale = float(np.abs(want).max())
        assert np.abs(got - want).max() <= 2e-4 * scale, (t, np.abs(got - want).max(), scale)
        assert np.abs(got - exact).max() > 1e-4 * scale   # bf16 arithmetic, not float32
        assert {"a", "s"} <= set(lm.bf16_pixel_tensors())
        results.append(got)
    # the rows split between threads: each output computed whole by one part, as with one thread
    for r in results[1:]:
        assert np.array_equal(r, results[0])


@needs_onednn
@pytest.mark.parametrize("M,attrs,why", [(24, {"pads": [1, 1, 1, 1]}, "outputs not in whole 16-column tiles"),
                                         (32, {"pads": [1, 1, 1, 1], "group": 2}, "grouped"),
                                         (32, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                          "stride 2 into a plane under 8 rows")])
def test_lite_keeps_what_onednn_runs_slower_or_not_at_all(tmp_path, M, attrs, why):
    """Such Convs stay on lite's kernels (MobileNetV2's 96 -> 24 reductions ran 2.2x lite's time on oneDNN, ResNet-50's
    stride-2 3x3 into 7x7 1.1-1.2x), even at one thread."""
    rng = np.random.default_rng(M)
    g = attrs.get("group", 1)
    w = {"w0": (rng.standard_normal((64, 8, 1, 1)) / 3).astype(F32), "b0": rng.standard_normal(64).astype(F32),
         "w1": (rng.standard_normal((M, 64 // g, 3, 3)) / 24).astype(F32), "b1": rng.standard_normal(M).astype(F32)}
    # (the first Conv: a stem of product depth 8 reading the NCHW input, lite's too)
    # (the last Conv, writing the graph's float32 output, is lite's too: the one under test writes bf16 rows)
    w["w2"] = (rng.standard_normal((16, M, 1, 1)) / 5).astype(F32)
    w["b2"] = rng.standard_normal(16).astype(F32)
    nodes = [conv_node("x", "w0", "b0", "c0", (64, 8, 1, 1), {}), helper.make_node("Relu", ["c0"], ["a"]),
             conv_node("a", "w1", "b1", "c1", (M, 64 // g, 3, 3), attrs), helper.make_node("Relu", ["c1"], ["b"]),
             conv_node("b", "w2", "b2", "y", (16, M, 1, 1), {})]
    m = model(nodes, [("x", [1, 8, 12, 12])], w)
    x = rng.standard_normal((1, 8, 12, 12)).astype(F32)
    before = _lite.onednn_info()["convolutions"]
    lm = build(convert(m, str(tmp_path)), "preferred_bf16", 1)
    assert _lite.onednn_info()["convolutions"] == before, why
    got = lm.predict({"x": x})[0].get_data_to_numpy()
    want = run_ort(m, {"x": x})[0]
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


@needs_onednn
def test_small_planes_at_one_thread(tmp_path):
    """On planes under 8 rows, at one thread, oneDNN takes a bf16 3x3 of stride 1 (ResNet-50's 7x7-plane 3x3 layers:
    lite's kernel 1.1-1.18x its time) and lite keeps a 1x1 (its 2048 -> 512 layers: 0.85-0.89x oneDNN's time); with
    two threads lite keeps both (oneDNN's row parts would each stream all the weights)."""
    rng = np.random.default_rng(7)
    w = {"w0": (rng.standard_normal((64, 8, 1, 1)) / 3).astype(F32), "b0": rng.standard_normal(64).astype(F32),
         "w1": (rng.standard_normal((64, 64, 3, 3)) / 24).astype(F32), "b1": rng.standard_normal(64).astype(F32),
         "w2": (rng.standard_normal((32, 64, 1, 1)) / 8).astype(F32), "b2": rng.standard_normal(32).astype(F32),
         "w3": (rng.standard_normal((16, 32, 1, 1)) / 6).astype(F32), "b3": rng.standard_normal(16).astype(F32)}
    nodes = [conv_node("x", "w0", "b0", "c0", (64, 8, 1, 1), {}), helper.make_node("Relu", ["c0"], ["a"]),
             conv_node("a", "w1", "b1", "c1", (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
             helper.make_node("Relu", ["c1"], ["b"]), conv_node("b", "w2", "b2", "c2", (32, 64, 1, 1), {}),
             helper.make_node("Relu", ["c2"], ["c"]), conv_node("c", "w3", "b3", "y", (16, 32, 1, 1), {})]
    m = model(nodes, [("x", [1, 8, 7, 7])], w)
    x = rng.standard_normal((1, 8, 7, 7)).astype(F32)
    ms = convert(m, str(tmp_path))
    want = run_ort(m, {"x": x})[0]
    for threads, taken in ((1, 1), (2, 0)):
        before = _lite.onednn_info()["convolutions"]
        lm = build(ms, "preferred_bf16", threads)
        assert _lite.onednn_info()["convolutions"] - before == taken, threads
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


@needs_onednn
def test_infinity_stays_in_its_windows(tmp_path):
    """24 input channels (each 32-value step of the tile partial): an infinity in one pixel of a bf16-rows input
    reaches only the outputs whose 3x3 window covers it (never multiplied by the zero padding of a step: Inf x 0 =
    NaN). A (1x1, positive weights, lite's: 24 outputs) puts it in every channel of the pixel, B (3x3) runs on oneDNN."""
    rng = np.random.default_rng(3)
    w = {"w0": np.abs(rng.standard_normal((24, 24, 1, 1))).astype(F32), "b0": np.zeros(24, F32),
         "w1": (rng.standard_normal((32, 24, 3, 3)) / 15).astype(F32), "b1": np.zeros(32, F32),
         "w2": np.abs(rng.standard_normal((16, 32, 1, 1))).astype(F32), "b2": np.zeros(16, F32)}
    nodes = [conv_node("x", "w0", "b0", "c0", (24, 24, 1, 1), {}), helper.make_node("Relu", ["c0"], ["a"]),
             conv_node("a", "w1", "b1", "b", (32, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
             conv_node("b", "w2", "b2", "y", (16, 32, 1, 1), {})]
    m = model(nodes, [("x", [1, 24, 10, 10])], w)
    x = np.abs(rng.standard_normal((1, 24, 10, 10))).astype(F32)
    x[0, :, 4, 6] = np.inf
    before = _lite.onednn_info()["convolutions"]
    lm = build(convert(m, str(tmp_path)), "preferred_bf16", 2)
    assert _lite.onednn_info()["convolutions"] - before == 1   # B
    got = lm.predict({"x": x})[0].get_data_to_numpy()
    want = run_ort(m, {"x": x})[0]
    window = np.zeros((10, 10), bool)
    window[3:6, 5:8] = True
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    assert (~np.isfinite(got[0])).all(axis=0).tolist() == window.tolist()


@needs_onednn
def test_lite_kernels_again_without_onednn(tmp_path):
    """test_bf16's Convs between bf16 rows once more with LITE_ONEDNN=0: on a CPU where oneDNN takes them, lite's AMX
    pixel tiles would otherwise go untested there."""
    here = os.path.dirname(__file__)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider",
                        os.path.join(here, "test_bf16.py"), "-k",
                        "pixel_major or residual_block or depthwise_between or graph_input or max_pool or tight_stem"],
                       env={**os.environ, "LITE_ONEDNN": "0"}, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.dirname(here)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout


# int8 (a FULL_QUANT model's uint8 x int8 Convs): tests/converter/test_int8_pixel_conv.py's chains, whose quantised
# tensors have zero points far from 0 (oneDNN's zero-point kernels) and residuals through the sum post-op.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "converter"))
from isolated_run import run_isolated  # noqa: E402
from test_int8_pixel_conv import CASE_ENDS, CASES as INT8_CASES, case_chain  # noqa: E402

ON_ONEDNN_INT8 = _lite.cpu_features()["amx_int8"] and INFO["loaded"]


@pytest.mark.skipif(not ON_ONEDNN_INT8, reason=f"no AMX-INT8 or no oneDNN here ({INFO['status']})")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(INT8_CASES)))
def test_int8_convs_between_uint8_rows_on_onednn(tmp_path, case, threads):
    """Against lite's own integer kernels (LITE_ONEDNN=0): the same exact integer sums, the epilogue rounded at other
    points, so codes may differ by one where a value lands near a rounding tie (the tolerance test_int8_pixel_conv
    allows between lite's pixel-major and channel-major kernels), and ONNX Runtime's float32 model."""
    import onnxruntime as ort
    import lite
    C, M, kernel, strides, pads, dilation, hw = INT8_CASES[case]
    _, residual, tail = CASE_ENDS[case]
    src, ms, x = case_chain(tmp_path, case)
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    before = _lite.onednn_info()["convolutions"]
    m = lite.Model()
    m.build_from_file(ms, lite.ModelType.MINDIR_LITE, ctx)
    taken = _lite.onednn_info()["convolutions"] - before
    got = m.predict({"x": x})[0].get_data_to_numpy()
    # R (whose rows B adds) and B (whose rows D reads pixel-major where it has 16 outputs) where their outputs are
    # whole 16-channel tiles, their depth more than one AMX step (C x taps > 64: at 64 or less lite's epilogue is the
    # faster, but for under 32 outputs, half of lite's 32-channel tiles) and at least 8 rows (a stride-1 1x1 always,
    # any other with two threads); oneDNN may decline a zero point with dilation
    oh = (hw[0] + pads[0] + pads[2] - dilation * (kernel[0] - 1) - 1) // strides[0] + 1
    pointwise = kernel == (1, 1) and strides == (1, 1)
    eligible = (M % 16 == 0 and (C * kernel[0] * kernel[1] > 64 or M < 32) and
                (oh >= 8 or (threads == 1 and not pointwise)))
    assert taken <= (residual + (tail == 16)) * eligible, taken
    if case in (0, 1, 2, 4, 11) and eligible:
        assert taken == residual + (tail == 16), taken
    lite_own = run_isolated(ms, {"x": x}, threads, {"LITE_ONEDNN": "0"})
    cos = float(got.ravel() @ lite_own.ravel() / np.linalg.norm(got) / np.linalg.norm(lite_own))
    assert cos > 0.99999, cos
    # a code one off at a pixel of b reaches y at that pixel only (D is 1x1): few pixels differ
    differs = (np.abs(got - lite_own) > 1e-6).any(axis=1)
    assert differs.mean() <= 0.02, differs.mean()
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99


@pytest.mark.skipif(not ON_ONEDNN_INT8, reason=f"no AMX-INT8 or no oneDNN here ({INFO['status']})")
def test_int8_rows_end_in_the_zero_point_row(tmp_path):
    """A (a stem reading the float input: lite's AMX stem kernel) and B (oneDNN) have no activation, so their
    outputs' zero points are far from 0 (B's folded into its bias: oneDNN's brgemm kernels then run it). B writes uint8
    rows that C (stride 2 into 6 rows at two threads: lite's pixel-major kernel) reads with padding: C's padding taps
    read the row after the pixels, which must hold B's output zero point (a 0 there shifts every border pixel of C)."""
    import lite
    from test_int8_pixel_conv import full_quant
    from test_integer_quant import uint8_activations_in
    rng = np.random.default_rng(11)
    w = {"wa": rng.standard_normal((32, 16, 3, 3)) / 12, "ba": rng.standard_normal(32) * 0.3,
         "wb": rng.standard_normal((32, 32, 3, 3)) / 17, "bb": rng.standard_normal(32) * 0.2 + 1.0,
         "wc": rng.standard_normal((32, 32, 3, 3)) / 17, "wd": rng.standard_normal((16, 32, 1, 1)) / 5}
    pad = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], **pad),
             helper.make_node("Conv", ["a", "wb", "bb"], ["b"], **pad),
             helper.make_node("Conv", ["b", "wc"], ["c"], strides=[2, 2], **pad), helper.make_node("Conv", ["c", "wd"], ["y"])]
    samples = [rng.standard_normal((1, 16, 12, 12)).astype(F32) for _ in range(4)]
    src, ms = full_quant(tmp_path, "zp_row", nodes, (1, 16, 12, 12), w, samples)
    zps = uint8_activations_in(ms)
    assert zps["a"][1] > 40 and zps["b"][1] > 40, zps   # A's and B's output zero points
    x = rng.standard_normal((1, 16, 12, 12)).astype(F32)
    before = _lite.onednn_info()["convolutions"]
    ctx = lite.Context()
    ctx.cpu.thread_num = 2
    m = lite.Model()
    m.build_from_file(ms, lite.ModelType.MINDIR_LITE, ctx)
    assert _lite.onednn_info()["convolutions"] - before == 1   # B
    got = m.predict({"x": x})[0].get_data_to_numpy()
    lite_own = run_isolated(ms, {"x": x}, 2, {"LITE_ONEDNN": "0"})
    assert (np.abs(got - lite_own) > 1e-6).any(axis=1).mean() <= 0.02
    import onnxruntime as ort
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99


@needs_onednn
def test_workers_share_the_primitives_from_many_threads(tmp_path):
    """A ModelParallelRunner's workers share one copy of the weights, so their Convs share oneDNN's primitives (and
    reordered weights), run at once from several threads (each its own stream and OpenMP thread count): every result
    equals a single Model's, bit for bit."""
    import threading
    import lite
    m, x, _, _ = chain("3x3 on 14x14")
    path = convert(m, str(tmp_path))
    ctx = lite.Context()
    ctx.cpu.precision_mode = "preferred_bf16"
    ctx.parallel.workers_num = 2
    before = _lite.onednn_info()["convolutions"]
    runner = lite.ModelParallelRunner()
    runner.build_from_file(path, ctx)
    assert _lite.onednn_info()["convolutions"] - before == 2   # once, for both workers
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal(x.shape).astype(F32) for _ in range(24)]
    reference = build(path, "preferred_bf16", 1)
    want = [reference.predict({"x": v})[0].get_data_to_numpy() for v in inputs]
    got, errors = {}, []

    def client(k: int) -> None:
        try:
            for i in range(k, len(inputs), 4):
                got[i] = runner.predict([inputs[i]])[0].get_data_to_numpy()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    clients = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    assert not errors, errors
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[i], w)
