"""precision_mode preferred_fp16 on channel-blocked activations, x86 with AVX512-FP16 (issue 36): the blocked pointwise
kernel's float16 tiles (cpu/conv/blocked_pointwise.cc: 12 pixels x 32 channels on vfmadd231ph, input channel pairs as
32-bit broadcasts, float16 runs of at most 64 products a lane added into float32) and the plan's per-node float32 choice
(Kernel::Float32Faster: the Convs float32 runs on its blocked kernels stay float32, so the activations stay blocked).
The reference is the pointwise product of float16-rounded operands in float64; the bound the float16 summation's, as
in test_fp16.py. Skipped where lite's x86 float16 kernels do not run."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from lite import _lite
from parity import convert, run_ort
from test_bf16 import cosine, model
from test_fp16 import build, fp16

pytestmark = pytest.mark.skipif(not _lite.cpu_features()["fp16_kernels"] or _lite.cpu_features()["isa"] == "neon",
                                reason="no x86 float16 kernels here (no AVX512-FP16, or LITE_CPU_ISA caps them)")
F32 = np.float32
FORCED = os.environ.get("LITE_FP16_POINTWISE") == "0"


def kernels(lm, feeds) -> dict[str, str]:
    lm.enable_profiling()
    lm.predict(feeds)
    return {p["name"]: p["kernel"] for p in lm.last_profile()}


def depthwise_pointwise(C: int, M: int, hw: int, act: str | None, residual: bool, batch: int = 2, seed: int = 0,
                        stride: int = 1):
    """x -> depthwise 3x3 (blocked output) -> ReLU -> pointwise C -> M, strided or not (+ the depthwise output when
    residual) -> act."""
    rng = np.random.default_rng(seed)
    w = {"dw": (rng.standard_normal((C, 1, 3, 3)) / 3).astype(F32),
         "pw": (rng.standard_normal((M, C, 1, 1)) / np.sqrt(C)).astype(F32),
         "b": rng.standard_normal(M).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], group=C, pads=[1, 1, 1, 1], name="dw"),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Conv", ["r", "pw", "b"], ["p"], name="pw", strides=[stride, stride])]
    last = "p"
    if residual:
        nodes.append(helper.make_node("Add", ["p", "r"], ["s"]))
        last = "s"
    if act == "Relu6":
        w["lo"], w["hi"] = np.array(0, F32), np.array(6, F32)
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    elif act:
        nodes.append(helper.make_node(act, [last], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    if residual:   # a 1x1 depthwise Conv of ones after it: the block's output stays blocked, as its residual is
        nodes[-1].output[0] = "z"
        w["one"] = np.ones((M, 1, 1, 1), F32)
        nodes.append(helper.make_node("Conv", ["z", "one"], ["y"], group=M))
    m = model(nodes, [("x", [batch, C, hw, hw])], w)
    x = rng.standard_normal((batch, C, hw, hw)).astype(F32)
    return m, w, x


def reference(w, x, C, M, hw, act, residual, batch, stride=1):
    """(float16-operand result in float64, products' magnitude, float32 result) of the graph above."""
    dw = model([helper.make_node("Conv", ["x", "dw"], ["y"], group=C, pads=[1, 1, 1, 1])], [("x", [batch, C, hw, hw])],
               {"dw": w["dw"]})
    r = np.maximum(run_ort(dw, {"x": x})[0], 0).astype(F32)[:, :, ::stride, ::stride]
    wm = w["pw"][:, :, 0, 0]
    pre16 = np.einsum("mc,nchw->nmhw", fp16(wm).astype(np.float64), fp16(r)) + w["b"][None, :, None, None]
    pre = np.einsum("mc,nchw->nmhw", wm.astype(np.float64), r) + w["b"][None, :, None, None]
    mag = np.einsum("mc,nchw->nmhw", np.abs(wm).astype(np.float64), np.abs(r))
    if residual:
        pre16, pre = pre16 + r, pre + r
    f = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0), "Relu6": lambda v: np.clip(v, 0, 6),
         "Sigmoid": lambda v: 1 / (1 + np.exp(-v))}[act]
    return f(pre16), mag, f(pre)


@pytest.mark.skipif(FORCED, reason="the float16 tiles are switched off")
@pytest.mark.parametrize("C,M,hw,act,residual", [
    (32, 32, 7, None, False), (32, 32, 7, "Relu", True), (48, 40, 12, "Relu6", False), (48, 40, 12, "Sigmoid", False),
    (264, 72, 5, None, False), (264, 72, 5, "Relu", False), (264, 264, 5, "Relu6", True), (64, 96, 9, "Sigmoid", False),
    (64, 96, 9, None, False), (96, 96, 9, "Sigmoid", True)])
def test_pointwise_tiles(tmp_path, C, M, hw, act, residual):
    """Channels in 32-264 (one to three float16 runs), out 32-96 (a last tile of 8-16 channels), 25-144 pixels (a last
    tile of 1-12), batch 2, bias, the block's residual, ReLU / ReLU6 in the tile and Sigmoid after; one and two
    threads. Without a residual the pointwise Conv is the graph's last (NCHW output through the transposing copy); with
    one (the Add fused) a 1x1 depthwise Conv of ones follows, so its output and residual are blocked."""
    m, w, x = depthwise_pointwise(C, M, hw, act, residual, seed=C + M + hw)
    want16, mag, exact = reference(w, x, C, M, hw, act, residual, 2)
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, threads=threads)
        got = lm.predict([x])[0].get_data_to_numpy().astype(np.float64)
        assert kernels(lm, [x])["pw"] == "blocked_pointwise_fp16"
        slope = 1.0 if act != "Sigmoid" else 0.25
        err = np.abs(got - want16)
        assert (err <= slope * 4e-3 * mag + 1e-5).all(), float(err.max())
        assert np.abs(got - exact).max() > 1e-6 * np.abs(exact).max()   # float16 products ran
        assert cosine(got, exact) > 0.99999


@pytest.mark.skipif(FORCED, reason="the float16 tiles are switched off")
@pytest.mark.parametrize("hw", [6, 13])
def test_blocked_output_feeds_depthwise(tmp_path, hw):
    """Pointwise between two depthwise Convs: its output stays blocked (the tiles store 8-channel blocks), close to
    float32 throughout."""
    rng = np.random.default_rng(hw)
    C, M = 48, 64
    w = {"d1": (rng.standard_normal((C, 1, 3, 3)) / 3).astype(F32),
         "pw": (rng.standard_normal((M, C, 1, 1)) / np.sqrt(C)).astype(F32),
         "d2": (rng.standard_normal((M, 1, 3, 3)) / 3).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "d1"], ["a"], group=C, pads=[1, 1, 1, 1]),
               helper.make_node("Conv", ["a", "pw"], ["p"], name="pw"),
               helper.make_node("Relu", ["p"], ["q"]),
               helper.make_node("Conv", ["q", "d2"], ["y"], group=M, pads=[1, 1, 1, 1])], [("x", [1, C, hw, hw])], w)
    x = rng.standard_normal((1, C, hw, hw)).astype(F32)
    ms = convert(m, str(tmp_path))
    want = run_ort(m, {"x": x})[0]
    for threads in (1, 2):
        lm = build(ms, threads=threads)
        assert kernels(lm, [x])["pw"] == "blocked_pointwise_fp16"
        assert "q" in set(lm.channel_blocked_tensors())
        got = lm.predict([x])[0].get_data_to_numpy()
        assert cosine(got, want) > 0.99999
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * float(np.abs(want).max()))


@pytest.mark.skipif(FORCED, reason="the float16 tiles are switched off")
@pytest.mark.parametrize("hw", [9, 14])
def test_strided_pointwise_tiles(tmp_path, hw):
    """A strided 1x1 Conv (ResNet's downsampling shortcut) on a blocked input: its sampled copy on the float16 tiles."""
    m, w, x = depthwise_pointwise(48, 64, hw, "Relu", False, seed=hw, stride=2)
    want16, mag, exact = reference(w, x, 48, 64, hw, "Relu", False, 2, stride=2)
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        lm = build(ms, threads=threads)
        got = lm.predict([x])[0].get_data_to_numpy().astype(np.float64)
        assert kernels(lm, [x])["pw"] == "blocked_pointwise_fp16"
        assert got.shape == want16.shape
        assert (np.abs(got - want16) <= 4e-3 * mag + 1e-5).all()
        assert np.abs(got - exact).max() > 1e-6 * np.abs(exact).max() and cosine(got, exact) > 0.99999


@pytest.mark.parametrize("C,M", [(24, 64), (64, 24)])
def test_narrow_layers_keep_float32_tiles(tmp_path, C, M):
    """Under 32 channels in or out the float32 tiles run (the per-run conversion outweighs the products there)."""
    m, w, x = depthwise_pointwise(C, M, 8, None, False, batch=1)
    ms = convert(m, str(tmp_path))
    assert kernels(build(ms), [x])["pw"] == "blocked_pointwise"


@pytest.mark.skipif(FORCED, reason="the float16 tiles are switched off")
def test_nan_stays_in_its_pixels(tmp_path):
    m, w, x = depthwise_pointwise(64, 64, 10, "Relu", False, batch=1, seed=3)
    x[0, 5, 2, 7] = np.nan
    ms = convert(m, str(tmp_path))
    want = run_ort(m, {"x": x})[0]
    got = build(ms).predict([x])[0].get_data_to_numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any() and np.isfinite(got).sum() > 0.9 * got.size


def resnet_block(hw: int):
    """A stem (3 channels, 7x7 stride 2), a 1x1 reduction, a 3x3, a 1x1 expansion plus a strided 1x1 shortcut: the
    Convs float32 runs on its blocked kernels and the stride-1 1x1 ones."""
    rng = np.random.default_rng(9)
    w = {"stem": (rng.standard_normal((64, 3, 7, 7)) / 12).astype(F32),
         "red": (rng.standard_normal((32, 64, 1, 1)) / 8).astype(F32),
         "mid": (rng.standard_normal((32, 32, 3, 3)) / 17).astype(F32),
         "exp": (rng.standard_normal((128, 32, 1, 1)) / 6).astype(F32),
         "sc": (rng.standard_normal((128, 64, 1, 1)) / 8).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "stem"], ["s0"], pads=[3, 3, 3, 3], strides=[2, 2], name="stem"),
             helper.make_node("Relu", ["s0"], ["s"]),
             helper.make_node("Conv", ["s", "red"], ["r0"], name="red"), helper.make_node("Relu", ["r0"], ["r"]),
             helper.make_node("Conv", ["r", "mid"], ["m0"], pads=[1, 1, 1, 1], name="mid"),
             helper.make_node("Relu", ["m0"], ["mm"]),
             helper.make_node("Conv", ["mm", "exp"], ["e"], name="exp"),
             helper.make_node("Conv", ["s", "sc"], ["c"], name="sc"),
             helper.make_node("Add", ["e", "c"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [__import__("onnx").numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), rng.standard_normal((1, 3, hw, hw))


@pytest.mark.skipif(FORCED or os.environ.get("LITE_FP16_FLOAT32_CONVS") == "0", reason="a rule is switched off")
def test_float32_convs_keep_channel_blocks(tmp_path):
    """The stem and the 3x3 run float32 (their blocked kernels), the 1x1 ones the float16 tiles, every activation
    between them channel-blocked; planned again for another input size (the per-node choice is made per plan) the
    results match a model built for that size alone."""
    m, x = resnet_block(64)
    ms = convert(m, str(tmp_path))
    lm = build(ms)
    feeds = [x.astype(F32)]
    k = kernels(lm, feeds)
    assert k["stem"] == "pixel_tiles" and k["mid"].startswith(("winograd_f", "pixel_tiles")), k
    assert k["red"] == "blocked_pointwise_fp16" and k["exp"] == "blocked_pointwise_fp16", k
    assert {"s", "r", "mm"} <= set(lm.channel_blocked_tensors()), lm.channel_blocked_tensors()
    want = run_ort(m, {"x": feeds[0]})[0]
    first = lm.predict(feeds)[0].get_data_to_numpy()
    assert cosine(first, want) > 0.99999
    other = [np.random.default_rng(1).standard_normal((1, 3, 40, 48)).astype(F32)]
    got = lm.predict(other)[0].get_data_to_numpy()
    np.testing.assert_array_equal(got, build(ms).predict(other)[0].get_data_to_numpy())
    assert cosine(got, run_ort(m, {"x": other[0]})[0]) > 0.99999
    np.testing.assert_array_equal(lm.predict(feeds)[0].get_data_to_numpy(), first)


@pytest.mark.skipif(FORCED, reason="already forced")
@pytest.mark.parametrize("variable", ["LITE_FP16_POINTWISE", "LITE_FP16_FLOAT32_CONVS"])
def test_rules_switch_off(tmp_path, variable):
    """LITE_FP16_POINTWISE=0: the float32 tiles at float16; LITE_FP16_FLOAT32_CONVS=0: every Conv at float16 (the
    stem and the 3x3 on the float16 GEMM, NCHW between them)."""
    m, x = resnet_block(32)
    ms = convert(m, str(tmp_path))
    code = ("import sys, numpy as np, lite\n"
            "c = lite.Context(); c.cpu.precision_mode = 'preferred_fp16'\n"
            f"m = lite.Model(); m.build_from_file({ms!r}, lite.ModelType.MINDIR_LITE, c)\n"
            f"x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)\n"
            "m.enable_profiling(); m.predict([x])\n"
            "print(' '.join(p['name'] + '=' + p['kernel'] for p in m.last_profile() if p['kernel']))")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, variable: "0"}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    k = dict(kv.split("=") for kv in r.stdout.split())
    if variable == "LITE_FP16_POINTWISE":
        assert k["red"] == "blocked_pointwise" and k["stem"] == "pixel_tiles", k
    else:
        assert k["stem"] != "pixel_tiles" and k["red"] != "blocked_pointwise_fp16", k


def test_patch_embedding_stays_float16(tmp_path):
    """A patch embedding (16x16 at stride 16) keeps its float16 kernel: its output leaves for a Reshape, no blocked
    chain to keep (ViT-B/16's: 1.05 ms at float16, 1.58 on the float32 pixel tiles)."""
    rng = np.random.default_rng(4)
    w = {"w": (rng.standard_normal((64, 3, 16, 16)) / 28).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[16, 16], name="patch")], [("x", [1, 3, 64, 64])], w)
    x = rng.standard_normal((1, 3, 64, 64)).astype(F32)
    ms = convert(m, str(tmp_path))
    k = kernels(build(ms), [x])["patch"]
    assert k not in ("pixel_tiles", "direct") and not k.startswith("winograd"), k
    got = build(ms).predict([x])[0].get_data_to_numpy()
    exact = run_ort(m, {"x": x})[0]
    assert np.abs(got - exact).max() > 1e-6 * np.abs(exact).max() and cosine(got, exact) > 0.99999
