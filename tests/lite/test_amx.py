"""AMX tiles for preferred_bf16 (issue 36): on CPUs with AMX-BF16 the bf16 GEMM (MatMul/Gemm with constant weights,
Conv lowered to products) runs on TDPBF16PS tiles. The reference is the same arithmetic done exactly: float64 products
of the bf16-rounded operands, so only float32 summation order separates the two. The tile kernel's edges are
covered: rows 1-33 and past (16-row tiles, 32-row blocks), columns not a multiple of 32, depths not a multiple of 32
values (the zero-padded last step) and deeper than one depth block (8192: sums carried through C). The dispatch
tests run everywhere: LITE_CPU_ISA=avx512 / avx2 turn AMX off."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite import _lite
from parity import convert
from test_bf16 import bf16

F32 = np.float32
HAS_AMX = _lite.cpu_features()["amx_bf16"]
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 here (or LITE_CPU_ISA caps it, or the kernel "
                                                   "refused the tile state)")


def matmul_model(tmp_path, w: np.ndarray, bias: np.ndarray | None, act: str | None, name: str = "m") -> str:
    M_dyn = "M"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p" if bias is not None or act else "y"])]
    inits = [numpy_helper.from_array(w, "w")]
    if bias is not None:
        nodes.append(helper.make_node("Add", ["p", "b"], ["q" if act else "y"]))
        inits.append(numpy_helper.from_array(bias, "b"))
    if act:
        nodes.append(helper.make_node(act, ["q" if bias is not None else "p"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M_dyn, w.shape[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return convert(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path), name)


def build(path: str, threads: int) -> lite.Model:
    ctx = lite.Context()
    ctx.cpu.precision_mode = "preferred_bf16"
    ctx.cpu.thread_num = threads
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    assert m.compute_precision == "bfloat16"
    return m


def exact(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, act: str | None) -> np.ndarray:
    y = bf16(x).astype(np.float64) @ bf16(w).astype(np.float64)
    if bias is not None:
        y = y + bias
    if act == "Relu":
        y = np.maximum(y, 0)
    return y


@needs_amx
@pytest.mark.parametrize("M,K,N", [(1, 32, 32), (16, 64, 32), (17, 40, 33), (32, 96, 64), (33, 30, 95),
                                   (48, 16, 16), (100, 1030, 70), (7, 3, 5), (70, 8200, 40)])
@pytest.mark.parametrize("threads", [1, 2])
def test_tile_edges_against_exact_products(tmp_path, M, K, N, threads):
    rng = np.random.default_rng(M * 7 + K)
    w, b = rng.standard_normal((K, N)).astype(F32), rng.standard_normal(N).astype(F32)
    lm = build(matmul_model(tmp_path, w, b, "Relu"), threads)
    for rows in (M, max(1, M - 5)):   # a resize: the tile rows of another M from the same packed weights
        x = rng.standard_normal((rows, K)).astype(F32)
        lm.resize(lm.get_inputs(), [[rows, K]])
        got = lm.predict({"x": x})[0].get_data_to_numpy()
        want = exact(x, w, b, "Relu")
        assert got.shape == want.shape
        # float32 sums of K exact products: |error| <= ~K * 2^-24 * sum |products|
        bound = 4 * K * 2.0 ** -24 * (np.abs(bf16(x)).astype(np.float64) @ np.abs(bf16(w)).astype(np.float64)) + 1e-6
        assert (np.abs(got - want) <= bound).all(), (rows, float(np.abs(got - want).max()))


@needs_amx
def test_a_non_finite_row_stays_in_its_row(tmp_path):
    """A row with an infinity and a NaN (and the zero-padded depth past K) must not reach any other row: A tiles hold
    16 rows and the last step past the depth is padded with zeros, never with another row's values."""
    rng = np.random.default_rng(3)
    K, N, M = 45, 40, 37
    w = rng.standard_normal((K, N)).astype(F32)
    lm = build(matmul_model(tmp_path, w, None, None), 1)
    x = rng.standard_normal((M, K)).astype(F32)
    x[5, 3], x[20, K - 1] = np.inf, np.nan
    got = lm.predict({"x": x})[0].get_data_to_numpy()
    bad = ~np.isfinite(got).all(axis=1)
    assert set(np.nonzero(bad)[0]) == {5, 20}
    ok = np.isfinite(x).all(axis=1)
    want = exact(x[ok], w, None, None)
    assert np.allclose(got[ok], want, rtol=1e-5, atol=1e-4)


@needs_amx
def test_same_products_as_the_avx512_kernels(tmp_path):
    """LITE_CPU_ISA=avx512 runs the vdpbf16ps kernels on the same CPU: both sum the same bf16 products in float32."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((200, 150)).astype(F32)
    path = matmul_model(tmp_path, w, None, None)
    x = rng.standard_normal((57, 200)).astype(F32)
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np, lite; c = lite.Context(); c.cpu.precision_mode = 'preferred_bf16'; "
            f"m = lite.Model(); m.build_from_file({path!r}, lite.ModelType.MINDIR_LITE, c); "
            f"np.save({str(tmp_path / 'y.npy')!r}, m.predict({{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0]"
            ".get_data_to_numpy())")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_CPU_ISA": "avx512"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    vector = np.load(tmp_path / "y.npy")
    tiles = build(path, 1).predict({"x": x})[0].get_data_to_numpy()
    scale = float(np.abs(vector).max())
    assert np.abs(tiles - vector).max() <= 1e-5 * scale
    assert not np.array_equal(bf16(tiles), tiles)   # float32 sums, not bf16 results


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_isa_cap_turns_amx_off(isa):
    """LITE_CPU_ISA caps the tile kernels with the rest: avx512 keeps AVX-512 (and its bf16 dot products) without
    AMX. Runs on every CPU (the flags are false where the CPU lacks the feature anyway)."""
    code = "from lite import _lite; f = _lite.cpu_features(); print(f['amx_bf16'], f['amx_int8'], f['isa'])"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_CPU_ISA": isa}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    amx_bf16, amx_int8, got_isa = r.stdout.split()
    assert (amx_bf16, amx_int8) == ("False", "False")
    if isa == "portable":
        assert got_isa == "portable"


def test_amx_reported_only_with_the_cpu_flag():
    """cpu_features()['amx_bf16'] is true only on a CPU whose flags list amx_bf16 and amx_tile (Linux)."""
    flags = set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    if HAS_AMX:
        assert {"amx_bf16", "amx_tile"} <= flags
    elif {"amx_bf16", "amx_tile", "avx512_bf16"} <= flags and not os.environ.get("LITE_CPU_ISA"):
        pytest.fail("the CPU lists AMX-BF16 but lite does not use it (was the tile state refused?)")


@needs_amx
def test_bf16_suite_again_without_amx(tmp_path):
    """The preferred_bf16 tests and the pixel-major integer Conv tests once more with LITE_CPU_ISA=avx512: on an AMX
    CPU the vdpbf16ps and VNNI tiles would otherwise go untested."""
    here = os.path.dirname(__file__)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider",
                        os.path.join(here, "test_bf16.py"), "-k", "not architectures",
                        os.path.join(os.path.dirname(here), "converter", "test_int8_pixel_conv.py")],
                       env={**os.environ, "LITE_CPU_ISA": "avx512"}, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.dirname(here)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout


@needs_amx
@pytest.mark.parametrize("xs,ws,attrs", [((1, 64, 14, 14), (128, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
                                         ((1, 96, 9, 7), (64, 96, 1, 1), {}),
                                         ((1, 24, 11, 13), (40, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
                                         ((2, 32, 15, 13), (64, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
                                         ((1, 32, 6, 40), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
                                         ((1, 48, 5, 70), (32, 48, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]})])
def test_convs_on_amx_tiles(tmp_path, xs, ws, attrs):
    """On AMX CPUs bf16 Convs run pixel-major on AMX tiles (up to 32 pixels x 32 channels, the weight panels read in
    place; each step's input rows gathered, or loaded as a tile straight from the input where a 16-pixel half's rows
    lie evenly apart): the result is the product of the bf16-rounded operands. 24 channels: every tap ends in a
    partial step; 40 outputs: a partial panel; odd planes: tiles of under 32 pixels; 40- and 35-pixel output rows
    (stride 1 and 2): halves inside one row, beside the padding's and the rows' edges, both ways in one tile."""
    import onnxruntime as ort
    rng = np.random.default_rng(5)
    w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(F32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)

    def conv_model(weights):
        return helper.make_model(helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(weights, "w")]),
            opset_imports=[helper.make_opsetid("", 17)])
    lm = build(convert(conv_model(w), str(tmp_path)), 2)
    x = rng.standard_normal(xs).astype(F32)
    got = lm.predict({"x": x})[0].get_data_to_numpy()
    sess = ort.InferenceSession(conv_model(bf16(w)).SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": bf16(x)})[0]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()


@needs_amx
def test_conv_infinity_stays_in_its_windows(tmp_path):
    """An infinity in one input pixel reaches only the outputs whose 3x3 window covers it. 24 channels: each tap's
    step is partial, and what lies past its pairs in memory (the next pixel's channels) must be masked to zero, not
    multiplied by the zero weights (Inf x 0 = NaN)."""
    rng = np.random.default_rng(9)
    xs, ws = (1, 24, 9, 10), (32, 24, 3, 3)
    w = (rng.standard_normal(ws) / 10).astype(F32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    lm = build(convert(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path)), 1)
    x = rng.standard_normal(xs).astype(F32)
    x[0, 7, 4, 5] = np.inf
    got = lm.predict({"x": x})[0].get_data_to_numpy()
    inside = np.zeros(got.shape[2:], bool)
    inside[3:6, 4:7] = True
    finite = np.isfinite(got).all(axis=(0, 1))
    assert finite[~inside].all()
    assert not finite[inside].any()
