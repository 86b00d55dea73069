"""Winograd across channel blocks (cpu/conv/winograd/winograd_blocked.h): 3x3 stride-1 Convs with whole 8-channel blocks
run F(4x4, 3x3) or, on planes of under 36 F(4x4) tiles, F(2x2, 3x3), with the transforms across the channels of a
block and the channel sums as tiles x transformed filters; an NCHW input or output is converted by bands of rows. Against ONNX Runtime: partial tiles at the
right and bottom edges, no / one-sided padding, channel counts in odd numbers of blocks (the 16-channel transforms
take an odd last block on its own), several chunks of tiles, a residual, activations in registers (ReLU, Clip 0-6) and
after the store (Sigmoid), batch 2, and one / two threads (bands of tiles per thread from 32 tiles with at most 64 KiB
of transformed filters a tile, each step split otherwise). The kernel is on by default on Intel; LITE_CONV_WINOGRAD_BLOCKED=1 / 0 runs it (or the other Winograd) on any
CPU, and the last test runs this file both ways so every machine checks both routes."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from onnx import numpy_helper

from lite import _lite
from parity import convert, load, run_ort
from test_channel_blocked import Graph

ON = _lite.cpu_features()["conv_winograd_blocked"]
rng = np.random.default_rng(23)

# (input shape, output channels, pads): the tiles F(2x2) / F(4x4) take, the paths through Run.
CASES = [
    ((1, 64, 14, 14), 64, [1, 1, 1, 1]),      # ResNet-50's 14x14 in miniature: F(2x2), 49 tiles
    ((1, 72, 15, 13), 72, [1, 1, 1, 1]),      # 9 blocks (odd), F(2x2) with partial tiles at both edges
    ((2, 64, 17, 20), 80, [0, 1, 1, 0]),      # batch 2, one-sided padding, 16x19 outputs, 10 output blocks
    ((1, 64, 22, 23), 64, [0, 0, 0, 0]),      # no padding: 20x21 outputs, F(2x2) 110 tiles (bands at two threads)
    ((1, 64, 28, 28), 64, [1, 1, 1, 1]),      # F(4x4): 49 tiles
    ((1, 64, 30, 27), 72, [1, 1, 1, 1]),      # F(4x4) with partial tiles, 64 -> 72 channels
    ((1, 64, 64, 64), 64, [1, 1, 1, 1]),      # F(4x4): 256 tiles in chunks (its sums over 2 MiB)
    ((1, 136, 24, 24), 64, [1, 1, 1, 1]),     # 17 input blocks (the pairs and the odd one), F(4x4) from 36 tiles
    # Filters over 64 KiB a tile: two threads split each step (input blocks in pairs, positions, output blocks).
    ((1, 256, 14, 14), 256, [1, 1, 1, 1]),    # ResNet-50's 14x14 layer: F(2x2), 4.2 MB of transformed filters
    ((1, 264, 13, 13), 264, [1, 1, 1, 1]),    # 33 blocks in and out (an odd pair at each split)
    # 16.8 MB of transformed filters against 4.2 MB of inputs and sums: one chunk past L2, not three within it.
    ((1, 512, 16, 16), 512, [1, 1, 1, 1]),
]


def blocked_model(shape, m, pads, act, residual, layouts="blocked"):
    """A depthwise 3x3 Conv writes blocks, the Conv under test reads and writes them (its residual another tensor of
    its output's shape), a depthwise 3x3 Conv reads them back before the output. layouts "nchw in" / "nchw out" /
    "nchw": the Conv under test reads the graph's input / writes the graph's output instead (NCHW sides)."""
    c = shape[1]
    g = Graph(shape)
    src = "x" if layouts in ("nchw in", "nchw") else g.conv("x", c, c, k=3, group=c, name="dw_in")
    y = g.conv(src, c, m, k=3, name="wino", pads=pads)
    if residual:
        side = g.conv(src, c, c, k=3, group=c, name="dw_side", pads=pads)   # the output's plane
        y = g.op("Add", [y, side if c == m else g.conv(side, c, m, name="proj")], "sum")
    if act == "Clip":
        y = g.op("Clip", [y, g._const("lo", 0.0), g._const("hi", 6.0)], "act")
    elif act:
        y = g.op(act, [y], "act")
    model = g.model([y if layouts in ("nchw out", "nchw") else g.conv(y, m, m, k=3, group=m, name="dw_out")])
    # The Conv under test's weights scaled by its fan-in, as a trained layer's are: sums of unit scale whatever the
    # channel count (with Graph's uniform(-0.5, 0.5) weights 256 channels' sums reach ~30 and Sigmoid saturates, so the
    # output's RMS says nothing of the sums' rounding).
    for init in model.graph.initializer:
        if init.name == "wino_w":
            w = numpy_helper.to_array(init) * np.float32(3.0 / np.sqrt(c * 9))
            init.CopyFrom(numpy_helper.from_array(w.astype(np.float32), init.name))
    return model


def run(model, x, threads):
    with tempfile.TemporaryDirectory() as tmp:
        m = load(convert(model, tmp), threads)
        m.enable_profiling()
        got = m.predict({"x": x})[0].get_data_to_numpy()
        return got, {p["name"]: p["kernel"] for p in m.last_profile()}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act,residual", [(None, False), ("Relu", True), ("Clip", False), ("Sigmoid", True)],
                         ids=["plain", "relu+residual", "clip", "sigmoid+residual"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"_to{c[1]}_pads" + "".join(map(str, c[2])))
def test_blocked_winograd_matches_onnxruntime(case, act, residual, threads):
    check(case, act, residual, threads, "blocked")


# NCHW sides: bands of rows converted per chunk of whole tile rows (several chunks on 64x64; bands of rows per thread
# from 32 tiles at two threads).
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act,residual", [(None, False), ("Relu", True), ("Sigmoid", True)],
                         ids=["plain", "relu+residual", "sigmoid+residual"])
@pytest.mark.parametrize("layouts", ["nchw in", "nchw out", "nchw"])
@pytest.mark.parametrize("case", [CASES[i] for i in (0, 1, 2, 5, 6, 8, 10)],
                         ids=lambda c: "x".join(map(str, c[0])) + f"_to{c[1]}_pads" + "".join(map(str, c[2])))
def test_blocked_winograd_with_nchw_sides_matches_onnxruntime(case, layouts, act, residual, threads):
    check(case, act, residual, threads, layouts)


def check(case, act, residual, threads, layouts):
    shape, m, pads = case
    model = blocked_model(shape, m, pads, act, residual, layouts)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    got, kernels = run(model, x, threads)
    want = run_ort(model, {"x": x})[0]
    # Winograd's transforms round differently from direct summation (~1e-5 of the RMS), a wrong tap, tile or channel
    # is O(RMS).
    rms = float(np.sqrt(np.mean(want.astype(np.float64) ** 2)))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * rms)
    oh, ow = shape[2] + pads[0] + pads[2] - 2, shape[3] + pads[1] + pads[3] - 2
    f4_tiles = ((oh + 3) // 4) * ((ow + 3) // 4)
    if ON:
        assert kernels["wino"] == ("winograd_f4x4_blocked" if f4_tiles >= 36 else "winograd_f2x2_blocked"), kernels
    else:
        assert kernels["wino"] == "winograd_f4x4", kernels


@pytest.mark.parametrize("act", [None, "Relu", "Clip"])
@pytest.mark.parametrize("layouts", ["blocked", "nchw"])
def test_nan_and_inf_reach_only_their_tiles(act, layouts):
    """A NaN in the input spreads through the transforms to the outputs of the tiles that read it (as in direct
    summation, whose windows it falls in), not to other tiles or channels' planes beyond those windows' reach; a fused
    ReLU / ReLU6 keeps it NaN, as ONNX Runtime's does (every output ONNX Runtime gives as NaN is NaN here)."""
    shape = (1, 64, 14, 14)
    model = blocked_model(shape, 64, [1, 1, 1, 1], act, False, layouts)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    x[0, 5, 0, 0] = np.nan
    got, _ = run(model, x, 1)
    want = run_ort(model, {"x": x})[0]
    assert np.isnan(got[np.isnan(want)]).all()
    # The NaN reaches the corner's outputs in ONNX Runtime (through the depthwise Convs around the blocked form: 4x4)
    # and a little further here (a 2x2 tile reads 4x4 inputs: its whole tile takes the NaN); the far corner stays finite.
    assert np.isnan(want[0, :, 0, 0]).all() and np.isnan(got[0, :, 0, 0]).all()
    assert np.isfinite(got[0, :, -4:, -4:]).all() and np.isfinite(want[0, :, -4:, -4:]).all()


@pytest.mark.skipif(os.environ.get("LITE_CONV_WINOGRAD_BLOCKED") is not None, reason="already under a forced choice")
@pytest.mark.parametrize("setting", ["0", "1"])
def test_blocked_winograd_forced_either_way(setting):
    """LITE_CONV_WINOGRAD_BLOCKED=1 / 0 runs the cases above on this kernel or on WinogradConv3x3 on any CPU."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider",
                        __file__, "-k", "matches_onnxruntime and (plain or sigmoid)"],
                       env={**os.environ, "LITE_CONV_WINOGRAD_BLOCKED": setting}, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout
