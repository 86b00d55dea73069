"""The pixel-major integer Conv (lite/src/cpu/u8_pixel_conv.h, AVX-512 VNNI) and its uint8 rows storage
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
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from lite import _lite
from converter.api import Converter

sys.path.insert(0, os.path.dirname(__file__))
from test_integer_quant import F32, rel_err, run, save_model, uint8_activations_in, write_cfg  # noqa: E402

VNNI = bool(_lite.cpu_features().get("avx512_vnni"))


def chain(tmp_path, rng, C, M, kernel, strides, pads, dilation, hw, act, residual, tail):
    """The chain above; tail = D's output channels (16: pixel-major, 8: the channel-major kernel reads b as NCHW)."""
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
    src = save_model(tmp_path / "chain.onnx", nodes, [("x", [2, cin, *hw])], ["y"], {k: v.astype(F32) for k, v in w.items()})
    cal = tmp_path / "cal"
    os.makedirs(cal)
    for i in range(4):
        np.save(cal / f"{i}.npy", rng.standard_normal((2, cin, *hw)).astype(F32))
    cfg = write_cfg(tmp_path / "q.cfg", "FULL_QUANT", f"[data_preprocess_param]\ncalibrate_path=x:{cal}\ninput_type=NPY\n")
    Converter().convert("ONNX", src, str(tmp_path / "chain"), config_file=cfg)
    return src, str(tmp_path / "chain.ms")


def run_with(env, path, x, threads):
    """run() in a fresh process with `env` (the switches are read once per process)."""
    np.save(os.path.join(os.path.dirname(path), "x.npy"), x)
    out = path + ".".join(f"{k}{v}" for k, v in env.items()) + ".npy"
    code = (f"import numpy as np, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"from test_integer_quant import run; "
            f"np.save({out!r}, run({path!r}, {{'x': np.load({os.path.join(os.path.dirname(path), 'x.npy')!r})}}, {threads})[0])")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(out)


CASES = [   # C, M, kernel, strides, pads (top, left, bottom, right), dilation, hw
    (64, 48, (3, 3), (1, 1), (1, 1, 1, 1), 1, (13, 11)),   # two depth blocks (144 quads); a 16-channel last panel
    (32, 32, (3, 3), (2, 2), (1, 1, 1, 1), 1, (15, 14)),   # stride 2
    (32, 64, (1, 1), (2, 2), (0, 0, 0, 0), 1, (14, 14)),   # a strided 1x1
    (576, 16, (1, 1), (1, 1), (0, 0, 0, 0), 1, (7, 7)),    # a tap split over two depth blocks; a 7-wide plane
    (32, 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, (7, 7)),     # 7-wide: tiles are plane rows, top and bottom taps skipped
    (8, 32, (3, 3), (1, 1), (2, 2, 2, 2), 2, (9, 10)),     # dilation
    (12, 16, (5, 5), (2, 1), (2, 1, 0, 2), 1, (11, 9)),    # unequal strides, asymmetric pads
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_pixel_major_integer_conv(tmp_path, case, threads):
    C, M, kernel, strides, pads, dilation, hw = CASES[case]
    rng = np.random.default_rng(case)
    act, residual, tail = [("Relu", True, 16), ("none", True, 16), ("Relu6", False, 16), ("Relu", True, 8),
                           ("none", False, 16), ("Relu", True, 16), ("Relu", False, 8)][case]
    src, ms = chain(tmp_path, rng, C, M, kernel, strides, pads, dilation, hw, act, residual, tail)
    codes = uint8_activations_in(ms)
    assert codes["a"][1] > 20   # the input's zero point: a signed range
    x = rng.standard_normal((2, 32, *hw)).astype(F32)
    got = run_with({}, ms, x, threads)
    channel_major = run_with({"LITE_INT8_PIXEL": "0"}, ms, x, threads)
    nchw = run_with({"LITE_U8_ROWS": "0"}, ms, x, threads)
    np.testing.assert_array_equal(got, nchw)   # the same kernel on NCHW copies: the same codes, bit for bit
    cos = float(got.ravel() @ channel_major.ravel() / np.linalg.norm(got) / np.linalg.norm(channel_major))
    assert cos > 0.99999 and rel_err(got, channel_major) < 2e-3, (cos, rel_err(got, channel_major))
    want = ort.InferenceSession(src).run(None, {"x": x})[0]
    assert float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99


def test_rows_between_pixel_major_convs(tmp_path):
    """Which tensors are stored as uint8 rows: those only pixel-major Convs write and read."""
    if not VNNI:
        pytest.skip("the pixel-major integer Conv needs AVX-512 VNNI")
    import lite
    rng = np.random.default_rng(7)
    for tail, want in ((16, {"a", "r", "b"}), (8, {"a", "r"})):
        d = tmp_path / str(tail)
        os.makedirs(d)
        _, ms = chain(d, rng, 32, 32, (3, 3), (1, 1), (1, 1, 1, 1), 1, (9, 9), "Relu", True, tail)
        m = lite.Model()
        m.build_from_file(ms)
        m.predict({"x": rng.standard_normal((2, 32, 9, 9)).astype(F32)})
        assert set(m.u8_pixel_tensors()) == want

