"""precision_mode preferred_fp16 on an x86 CPU with AVX512-FP16 (issue 36): MatMul/Gemm and the GEMM-shaped Convs
with constant weights multiply float16-rounded operands (vfmadd231ph), each lane summing at most 64 products in
float16 before float32 takes over; attention, depthwise and the rest stay float32. The reference is the product of the
float16-rounded operands in float64; the bound is the float16 summation's, 4e-3 of the products' magnitude
(sum |a||b|: 64 steps of 2^-11 at most, far less in practice). Skipped where lite's float16 kernels do not run (no
AVX512-FP16, or LITE_CPU_ISA caps them); ARM64's float16 kernels are tested under emulation (tests/arm64)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import lite
from lite import _lite
from model_zoo.hf_tiny import TINY_ARCHS, export_onnx
from parity import convert, run_ort
from test_bf16 import CONVS as BF16_CONVS
from test_bf16 import bf16, cosine, model
from test_bf16 import build as build_with

pytestmark = pytest.mark.skipif(not _lite.cpu_features()["fp16_kernels"],
                                reason="no float16 kernels here (no AVX512-FP16, or LITE_CPU_ISA caps them)")
F32 = np.float32


def fp16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to float16 (nearest even), as float32."""
    return np.asarray(x, F32).astype(np.float16).astype(F32)


def build(path: str, mode: str = "preferred_fp16", threads: int = 1) -> lite.Model:
    return build_with(path, mode, threads)


def check_products(got: np.ndarray, want16: np.ndarray, magnitude: np.ndarray, exact: np.ndarray,
                   want_bf16: np.ndarray | None = None) -> None:
    """got within the float16 summation bound of the product of float16-rounded operands; and float16 arithmetic
    really ran: further from float32 than float32 summation order would put it, and (where given) nearer the
    float16 operands' product on average than bf16 operands would give (no bf16 kernel took it)."""
    assert got.shape == want16.shape
    err = np.abs(got.astype(np.float64) - want16)
    assert (err <= 4e-3 * magnitude + 1e-6).all(), float((err / (magnitude + 1e-6)).max())
    scale = float(np.abs(want16).max())
    assert np.abs(got - exact).max() > 1e-6 * scale
    if want_bf16 is not None:   # float16 sums of 64 products err 0.3-0.5x as much on average as bf16 operands do
        assert err.mean() < 0.7 * np.abs(want_bf16 - want16).mean(), (err.mean(), np.abs(want_bf16 - want16).mean())
    assert cosine(got, exact) > 0.99999


@pytest.mark.parametrize("M,K,N,act", [(37, 75, 45, "Relu"), (8, 32, 32, None), (5, 3, 7, "Sigmoid"),
                                       (70, 1030, 100, "Gelu"), (200, 64, 33, None), (1, 300, 70, None),
                                       (9, 129, 65, "Relu")])
def test_matmul_bias_activation(tmp_path, M, K, N, act):
    """Depths from 3 to 1030 (one float16 run of 64 pairs, several, several depth blocks), rows 1 to 200 (every tile
    height), columns off the 32-column panels."""
    rng = np.random.default_rng(M)
    w = {"w": rng.standard_normal((K, N)).astype(F32), "b": rng.standard_normal(N).astype(F32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["q" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["q"], ["y"]))
    m = model(nodes, [("x", [M, K])], w, 20 if act == "Gelu" else 17)
    x = rng.standard_normal((M, K)).astype(F32)
    ms = convert(m, str(tmp_path))
    acts = {None: lambda v: v, "Relu": lambda v: np.maximum(v, 0), "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "Gelu": lambda v: run_ort(model([helper.make_node("Gelu", ["x"], ["y"])], [("x", [M, N])], {}, 20),
                                      {"x": v.astype(F32)})[0].astype(np.float64)}
    pre16 = fp16(x).astype(np.float64) @ fp16(w["w"]) + w["b"]
    mag = np.abs(x).astype(np.float64) @ np.abs(w["w"])
    want16, exact = acts[act](pre16), run_ort(m, {"x": x})[0]
    want_bf16 = acts[act](bf16(x).astype(np.float64) @ bf16(w["w"]) + w["b"])
    # the activations' slopes are at most 1.13 (GELU): the pre-activation bound carries through
    for threads in (1, 2):
        lm = build(ms, threads=threads)
        assert lm.compute_precision == "float16"
        check_products(lm.predict([x])[0].get_data_to_numpy(), want16, 1.13 * mag, exact,
                       want_bf16 if K >= 32 else None)


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 1.0), (0, 1, 2.0, 0.0),
                                                        (1, 1, 1.0, 1.0)])
def test_gemm_attributes(tmp_path, trans_a, trans_b, alpha, beta):
    rng = np.random.default_rng(2)
    M, K, N = 19, 145, 50
    a_shape = [K, M] if trans_a else [M, K]
    w = {"w": rng.standard_normal((N, K) if trans_b else (K, N)).astype(F32), "b": rng.standard_normal(N).astype(F32)}
    m = model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transA=trans_a, transB=trans_b, alpha=alpha,
                                beta=beta)], [("x", a_shape)], w)
    x = rng.standard_normal(a_shape).astype(F32)
    a = x.T if trans_a else x
    wm = w["w"].T if trans_b else w["w"]
    want16 = fp16(F32(alpha) * a).astype(np.float64) @ fp16(wm) + beta * w["b"]   # lite rounds alpha * A
    mag = np.abs(alpha * a).astype(np.float64) @ np.abs(wm)
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        got = build(ms, threads=threads).predict({"x": x})[0].get_data_to_numpy()
        check_products(got, want16, mag, run_ort(m, {"x": x})[0])


# The bf16 tests' Conv forms (pointwise, strided, grouped, 1-D, pixel-major) and two more: a large plane (im2col in
# blocks) and a 3-channel stem. At float16 the 2-D KxK ones of one group run float32 (the Convs
# float32 runs on its channel-blocked kernels: kernels/conv.cc, Float32Faster), bit for bit enforce_fp32's;
# LITE_FP16_FLOAT32_CONVS=0 runs them on the float16 GEMM / pixel-major kernels, as every form below ran before.
CONVS = {**BF16_CONVS,
         "3x3 at 56x56 (im2col blocks)": ((1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
         "stem 7x7 stride 2": ((1, 3, 64, 64), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]})}
FLOAT32_AT_FP16 = {"3x3 small plane", "3x3 stride 2", "pixel-major 3x3", "pixel-major stride 2", "pixel-major 5x5",
                   "3x3 at 56x56 (im2col blocks)", "stem 7x7 stride 2"}
ALL_AT_FP16 = os.environ.get("LITE_FP16_FLOAT32_CONVS") == "0"


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv_forms(tmp_path, name):
    xs, ws, attrs = CONVS[name]
    rng = np.random.default_rng(len(name))
    w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(F32)
    b = rng.standard_normal(ws[0]).astype(F32)
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], [("x", list(xs))], {"w": w, "b": b})
    x = rng.standard_normal(xs).astype(F32)

    def conv(xv, wv, bv):   # float32 sums of the given operands (ONNX Runtime)
        return run_ort(model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], [("x", list(xs))],
                             {"w": wv, "b": bv}), {"x": xv})[0].astype(np.float64)

    want16, mag = conv(fp16(x), fp16(w), b), conv(np.abs(x), np.abs(w), np.zeros_like(b))
    ms = convert(m, str(tmp_path))
    for threads in (1, 2):
        got = build(ms, threads=threads).predict({"x": x})[0].get_data_to_numpy()
        if name in FLOAT32_AT_FP16 and not ALL_AT_FP16:
            np.testing.assert_array_equal(got, build(ms, "enforce_fp32", threads).predict({"x": x})[0].get_data_to_numpy())
            continue
        check_products(got, want16, mag + 1e-3 * np.abs(want16).max(), run_ort(m, {"x": x})[0],
                       conv(bf16(x), bf16(w), b))


@pytest.mark.skipif(ALL_AT_FP16, reason="already every Conv at float16")
def test_conv_forms_all_at_float16():
    """LITE_FP16_FLOAT32_CONVS=0: the forms the rule keeps float32 run their float16 kernels, within the float16 bound."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider",
                        __file__, "-k", "test_conv_forms and not all_at"],
                       env={**os.environ, "LITE_FP16_FLOAT32_CONVS": "0"}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f"{len(CONVS)} passed" in r.stdout, r.stdout[-500:]


def test_which_ops_stay_float32(tmp_path):
    """Depthwise Convs and attention have no float16 kernels: bit for bit what enforce_fp32 computes (the bf16-only
    kernels, the bf16 pixel-major Convs and bf16 attention, never run for preferred_fp16)."""
    rng = np.random.default_rng(6)
    dw = {"w": (rng.standard_normal((32, 1, 3, 3)) / 3).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], group=32, pads=[1, 1, 1, 1])], [("x", [1, 32, 14, 14])], dw)
    x = {"x": rng.standard_normal((1, 32, 14, 14)).astype(F32)}
    ms = convert(m, str(tmp_path), "dw")
    assert np.array_equal(build(ms).predict(x)[0].get_data_to_numpy(),
                          build(ms, "enforce_fp32").predict(x)[0].get_data_to_numpy())
    feeds = {"q": rng.standard_normal((2, 2, 37, 24), F32), "k": rng.standard_normal((2, 2, 70, 24), F32),
             "v": rng.standard_normal((2, 2, 70, 20), F32)}
    g = helper.make_graph([helper.make_node("Attention", ["q", "k", "v"], ["y"])], "a",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in feeds.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    a = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    a.ir_version = 10
    ms = convert(a, str(tmp_path), "attn")
    for threads in (1, 2):
        assert np.array_equal(build(ms, threads=threads).predict(feeds)[0].get_data_to_numpy(),
                              build(ms, "enforce_fp32", threads).predict(feeds)[0].get_data_to_numpy())


@pytest.mark.parametrize("M,hw", [(48, 7), (40, 12)])
def test_depthwise_then_pointwise(tmp_path, M, hw):
    """Depthwise -> pointwise keeps the channel-blocked layout: the blocked pointwise kernel's float16 tiles take it
    (32+ channels in and out), never bf16 ones."""
    rng = np.random.default_rng(M)
    C = 32
    w = {"dw": (rng.standard_normal((C, 1, 3, 3)) / 3).astype(F32),
         "pw": (rng.standard_normal((M, C, 1, 1)) / np.sqrt(C)).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "dw"], ["d"], group=C, pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["d"], ["r"]), helper.make_node("Conv", ["r", "pw"], ["y"])],
              [("x", [2, C, hw, hw])], w)
    x = rng.standard_normal((2, C, hw, hw)).astype(F32)
    ms = convert(m, str(tmp_path))
    exact = build(ms, "enforce_fp32").predict([x])[0].get_data_to_numpy().astype(np.float64)
    r = np.maximum(run_ort(model([helper.make_node("Conv", ["x", "dw"], ["y"], group=C, pads=[1, 1, 1, 1])],
                                 [("x", [2, C, hw, hw])], {"dw": w["dw"]}), {"x": x})[0], 0)
    as_bf16 = np.einsum("mc,nchw->nmhw", bf16(w["pw"][:, :, 0, 0]).astype(np.float64), bf16(r))
    for threads in (1, 2):
        got = build(ms, threads=threads).predict([x])[0].get_data_to_numpy()
        assert np.abs(got - exact).mean() < 0.7 * np.abs(as_bf16 - exact).mean()
        assert cosine(got, exact) > 0.99999


def test_inverted_residual_keeps_channel_blocks(tmp_path):
    """A MobileNet block (1x1 expansion, depthwise, 1x1 projection + the block's input) at float16: the projection
    with its residual takes the float32 blocked pointwise kernel, so the depthwise Conv reads and writes channel blocks
    (on NCHW planes MobileNetV2's depthwise layers took 1.7x the time)."""
    rng = np.random.default_rng(5)
    C, E, hw = 24, 96, 14
    w = {"we": (rng.standard_normal((E, C, 1, 1)) / np.sqrt(C)).astype(F32),
         "wd": (rng.standard_normal((E, 1, 3, 3)) / 3).astype(F32),
         "wp": (rng.standard_normal((C, E, 1, 1)) / np.sqrt(E)).astype(F32)}
    m = model([helper.make_node("Conv", ["x", "we"], ["e"]), helper.make_node("Relu", ["e"], ["a"]),
               helper.make_node("Conv", ["a", "wd"], ["d"], group=E, pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["d"], ["b"]), helper.make_node("Conv", ["b", "wp"], ["p"]),
               helper.make_node("Add", ["p", "x"], ["y"])],
              [("x", [1, C, hw, hw])], w)
    x = rng.standard_normal((1, C, hw, hw)).astype(F32)
    ms = convert(m, str(tmp_path))
    exact = build(ms, "enforce_fp32").predict([x])[0].get_data_to_numpy()
    for threads in (1, 2):
        lm = build(ms, threads=threads)
        got = lm.predict([x])[0].get_data_to_numpy()
        assert "b" in set(lm.channel_blocked_tensors()), lm.channel_blocked_tensors()
        assert cosine(got, exact) > 0.99999
        np.testing.assert_allclose(got, exact, rtol=2e-2, atol=2e-2 * float(np.abs(exact).max()))


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 40])
def test_weights_stored_as_float16(tmp_path, rows):
    """A model converted with --fp16 (MatMul weights stored as float16) runs its products on those halves as they are:
    the same values, bit for bit, as the float32-stored model whose weights the kernels round (a float32 product over
    the stored halves would differ); decode steps (1-8 rows) and the GEMM alike."""
    rng = np.random.default_rng(rows)
    # (the bias float16-representable: --fp16 stores it as float16 too)
    w = {"w": rng.standard_normal((300, 70)).astype(F32), "b": fp16(rng.standard_normal(70))}
    m = model([helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"])],
              [("x", [rows, 300])], w)
    halves = convert(m, str(tmp_path), "halves", fp16=True)
    floats = convert(m, str(tmp_path), "floats")
    x = rng.standard_normal((rows, 300)).astype(F32)
    for threads in (1, 2):
        got = build(halves, threads=threads).predict([x])[0].get_data_to_numpy()
        np.testing.assert_array_equal(got, build(floats, threads=threads).predict([x])[0].get_data_to_numpy())
        in_float32 = build(halves, "enforce_fp32", threads).predict([x])[0].get_data_to_numpy()
        assert not np.array_equal(got, in_float32)


def test_non_finite_values(tmp_path):
    """A NaN stays in its row; a value past float16's range (65504) becomes infinity, as in every float16 engine;
    the other rows are unaffected."""
    rng = np.random.default_rng(7)
    w = {"w": rng.standard_normal((96, 40)).astype(F32)}
    ms = convert(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [6, 96])], w), str(tmp_path))
    x = rng.standard_normal((6, 96)).astype(F32)
    x[1, 5] = np.nan
    x[3, 70] = 1e6
    got = build(ms).predict([x])[0].get_data_to_numpy()
    assert np.isnan(got[1]).all()
    assert np.isinf(got[3]).all()
    keep = [0, 2, 4, 5]
    want = fp16(x[keep]).astype(np.float64) @ fp16(w["w"])
    assert np.abs(got[keep] - want).max() <= 4e-3 * (np.abs(x[keep]) @ np.abs(w["w"])).max()


@pytest.mark.parametrize("name", ["resnet", "bert", "vit", "convnext"])
def test_architectures_stay_close_to_float32(name, cache_dir, tmp_path):
    arch = TINY_ARCHS[name]
    path = export_onnx(name, cache_dir)
    ms = convert(path, str(tmp_path), name)
    lm = build(ms, threads=2)
    assert lm.compute_precision == "float16"
    for i, dims in enumerate(arch.shapes):
        feeds = arch.make_feeds(dims, np.random.default_rng(20 + i))
        got = lm.predict(feeds)[0].get_data_to_numpy()
        want = run_ort(path, feeds)[0]
        assert got.shape == want.shape
        assert cosine(got, want) > 0.9999, (name, dims, cosine(got, want))


def test_isa_cap_falls_back_to_float32(tmp_path):
    """LITE_CPU_ISA=avx2 turns the AVX-512 kernels off: preferred_fp16 then computes in float32, and says so."""
    code = ("import warnings, lite; c = lite.Context(); c.cpu.precision_mode = 'preferred_fp16'\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            f"    m = lite.Model(); m.build_from_file({str(tmp_path / 'm.ms')!r}, lite.ModelType.MINDIR_LITE, c)\n"
            "print(m.compute_precision, '|', *[str(x.message) for x in w])")
    convert(model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [2, 4])], {"w": np.ones((4, 4), F32)}),
            str(tmp_path), "m")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_CPU_ISA": "avx2"}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("float32 |"), r.stdout
    assert "lite's float16 kernels do not run here" in r.stdout
