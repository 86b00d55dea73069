"""Products with int8/int4-stored weights on dynamically quantised activations (Context.cpu.dynamic_quant,
cpu/gemm/dynamic_quant_gemm): every code layout the integer kernels take (int8/int4, per tensor / per column / blocks
of rows, symmetric and with zero points), row counts inside and past a chunk of 8, partial panels and blocks,
against NumPy running the same scheme (activations to int8 per row and block of depth values, round half to even,
scale max|x| / 127), and against the float32 product within the activations' rounding; the AVX2 build (CPUs without
AVX512-VNNI, LITE_CPU_ISA=avx2 here) against the VNNI build, bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import lite
from converter.quantization import decode, quantize
from test_skinny_gemm import matmul_file

COLUMN_BLOCK = 128   # depth values per activation scale when the weight has no blocks of rows (kDqColumnBlock)

CPU_FLAGS = open("/proc/cpuinfo").read().split()
VNNI = "avx512_vnni" in CPU_FLAGS
AMX_INT8 = "amx_int8" in CPU_FLAGS
pytestmark = pytest.mark.skipif(not VNNI and "avx2" not in CPU_FLAGS,
                                reason="the integer kernels need AVX512-VNNI or AVX2")

rng = np.random.default_rng(11)
TALL_INT8 = lite._lite.dq_tall_int8_path()   # "integer" or "float" on this CPU (cpu/gemm/dq_float_prompts.h)
TALL_INT4 = lite._lite.dq_tall_int4_path()   # "integer" or "bf16" on this CPU (cpu/gemm/dq_bf16_prompts.h)


def tall_in_float(bits: int, rows: int) -> bool:
    return bits == 8 and rows > 8 and TALL_INT8 == "float"


def tall_in_bf16(bits: int, rows: int) -> bool:
    return bits == 4 and rows >= 32 and TALL_INT4 == "bf16"


def bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), as float32 values."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def emulate_bf16(x: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bf16 tiles' product: activations and decoded weights rounded to bf16, products exact, sums in float32;
    and the bound of that float32 summation (a few ulps of the sum of |terms| per 600 depth values)."""
    xb, wb = bf16(x).astype(np.float64), bf16(values).astype(np.float64)
    mag = np.abs(xb) @ np.abs(wb)
    return xb @ wb, 2e-6 * max(1, x.shape[1] / 600) * mag + 1e-6

STORAGE = {   # name: (bits, axis, group, symmetric)
    "int8_column": (8, 1, 0, True),
    "int8_column_zero": (8, 1, 0, False),
    "int8_tensor": (8, -1, 0, True),
    "int8_blocks16": (8, 0, 16, True),
    "int8_blocks32_zero": (8, 0, 32, False),
    "int4_blocks32": (4, 0, 32, True),
    "int4_blocks8_zero": (4, 0, 8, False),
    "int4_blocks32_zero": (4, 0, 32, False),   # AVX2's decode kernel: zero points per block and column
    "int4_blocks64": (4, 0, 64, True),         # ... and blocks of two groups of 32 rows
    "int4_column": (4, 1, 0, True),
    "int4_tensor_zero": (4, -1, 0, False),
}


def load_dq(path: str, dynamic_quant: bool = True, threads: int = 1) -> lite.Model:
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    ctx.cpu.dynamic_quant = dynamic_quant
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    return m


def quantize_rows(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """The scheme's activation side: int8 codes per row and block, and each block's scale."""
    rows, k = x.shape
    blocks = max(1, -(-k // block))
    codes = np.zeros((rows, k), np.float64)
    scales = np.zeros((rows, blocks), np.float64)
    for b in range(blocks):
        part = x[:, b * block:(b + 1) * block].astype(np.float32)
        top = np.abs(part).max(axis=1)
        inv = np.where(top > 0, np.float32(127) / np.where(top > 0, top, 1), 0).astype(np.float32)
        codes[:, b * block:(b + 1) * block] = np.rint(part * inv[:, None])
        scales[:, b] = top / np.float32(127)
    return codes, scales


def emulate(x: np.ndarray, values: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """y = sum over blocks of scale * (codes @ decoded weight rows), in float64; and the bound of float32 rounding
    in the kernel's per-block products (a few ulps of each block's sum of |terms|)."""
    codes, scales = quantize_rows(x, block)
    y = np.zeros((x.shape[0], values.shape[1]))
    mag = np.zeros_like(y)
    for b in range(scales.shape[1]):
        rows = slice(b * block, (b + 1) * block)
        y += scales[:, b:b + 1] * (codes[:, rows] @ values[rows].astype(np.float64))
        mag += scales[:, b:b + 1] * (np.abs(codes[:, rows]) @ np.abs(values[rows].astype(np.float64)))
    return y, 4e-7 * mag + 1e-6


@pytest.mark.parametrize("storage", list(STORAGE))
@pytest.mark.parametrize("k,n", [(45, 37), (600, 50), (64, 16)])
def test_products_follow_the_scheme(tmp_path, storage, k, n):
    bits, axis, group, symmetric = STORAGE[storage]
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, bits, axis, group, symmetric)
    values = decode(stored, w.shape)
    block = group if group else COLUMN_BLOCK
    for rows in (1, 2, 3, 5, 8, 9, 20):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        model = load_dq(matmul_file(tmp_path / f"m{rows}.ms", values, stored, rows))
        assert model.dynamic_quant
        got = model.predict({"x": x})[0].get_data_to_numpy()
        if tall_in_float(bits, rows):   # float32 activations on the decoded weight (test_tall_int8_products_...)
            exact = x.astype(np.float64) @ values   # within float32 rounding of the sums of |terms|
            assert np.all(np.abs(got - exact) <= 2e-6 * (np.abs(x) @ np.abs(values)) + 1e-6), (storage, rows)
            continue
        if tall_in_bf16(bits, rows):   # bf16 tiles on the decoded weight (test_tall_int4_products_on_bf16_tiles)
            want, bound = emulate_bf16(x, values)
            assert np.all(np.abs(got - want) <= bound), (storage, rows, np.abs(got - want).max())
            continue
        want, bound = emulate(x, values, block)
        assert np.all(np.abs(got - want) <= bound), (storage, rows, np.abs(got - want).max())
        # and the float32 product within the activations' rounding: half a code step per value
        exact = x.astype(np.float64) @ values
        step = np.abs(x).max(axis=1, keepdims=True) / 127
        assert np.all(np.abs(got - exact) <= 0.5 * step * np.abs(values).sum(axis=0) + 1e-5)


@pytest.mark.parametrize("storage", ["int8_column", "int4_blocks32", "int4_tensor_zero"])
@pytest.mark.parametrize("rows", [1, 8, 12, 45])
def test_fused_epilogue(tmp_path, storage, rows):
    """Bias, residual, SiLU and multiplier after the integer product, on every chunk of rows."""
    bits, axis, group, symmetric = STORAGE[storage]
    k, n = 96, 40
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, bits, axis, group, symmetric)
    values = decode(stored, w.shape)
    bias = rng.standard_normal(n).astype(np.float32)
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32),
             "r": rng.standard_normal((rows, n)).astype(np.float32),
             "g": rng.standard_normal((rows, n)).astype(np.float32)}
    got = load_dq(matmul_file(tmp_path / "m.ms", values, stored, rows, bias)).predict(feeds)[0].get_data_to_numpy()
    product = feeds["x"].astype(np.float64) @ values if tall_in_float(bits, rows) else \
        emulate_bf16(feeds["x"], values)[0] if tall_in_bf16(bits, rows) else \
        emulate(feeds["x"], values, group or COLUMN_BLOCK)[0]
    y = product + bias + feeds["r"]
    np.testing.assert_allclose(got, y / (1 + np.exp(-y)) * feeds["g"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [13, 300])   # 300 rows of 256: the activations' quantisation splits its rows too
def test_threads_split_panels_without_changing_a_bit(tmp_path, rows):
    k, n = 256, 300
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, 4, 0, 32, True)
    values = decode(stored, w.shape)
    path = matmul_file(tmp_path / "m.ms", values, stored, rows)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    one = load_dq(path, threads=1).predict({"x": x})[0].get_data_to_numpy()
    two = load_dq(path, threads=2).predict({"x": x})[0].get_data_to_numpy()
    np.testing.assert_array_equal(one, two)
    want = emulate_bf16(x, values)[0] if tall_in_bf16(4, rows) else emulate(x, values, 32)[0]
    np.testing.assert_allclose(two, want, rtol=1e-4, atol=1e-4)


def test_non_finite_block_makes_its_row_nan(tmp_path):
    k, n = 64, 20
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, 8, 1, 0, True)
    values = decode(stored, w.shape)
    x = rng.standard_normal((3, k)).astype(np.float32)
    x[0, 3] = np.nan
    x[1, 50] = -np.inf
    got = load_dq(matmul_file(tmp_path / "m.ms", values, stored, 3)).predict({"x": x})[0].get_data_to_numpy()
    assert np.isnan(got[:2]).all()
    want, bound = emulate(x[2:], values, COLUMN_BLOCK)
    assert np.all(np.abs(got[2:] - want) <= bound)


def test_zero_rows_give_zero(tmp_path):
    k, n = 40, 18
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, 4, 1, 0, False)
    x = np.zeros((2, k), np.float32)
    got = load_dq(matmul_file(tmp_path / "m.ms", decode(stored, w.shape), stored, 2)).predict({"x": x})[0]
    np.testing.assert_array_equal(got.get_data_to_numpy(), 0)


def test_off_and_other_layouts_keep_float_activations(tmp_path):
    """Without the option, and for a layout the integer panels do not take (int8 blocks of 12 rows), products use
    float32 activations: the float32 product of the decoded weights, not the scheme's."""
    k, n = 72, 24
    w = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((4, k)).astype(np.float32)
    for stored, option in ((quantize(w, 8, 1, 0, True), False), (quantize(w, 8, 0, 12, True), True)):
        values = decode(stored, w.shape)
        model = load_dq(matmul_file(tmp_path / "m.ms", values, stored, 4), dynamic_quant=option)
        assert model.dynamic_quant == option
        got = model.predict({"x": x})[0].get_data_to_numpy()
        np.testing.assert_allclose(got, x.astype(np.float64) @ values, rtol=1e-5, atol=1e-5)


def run_isa(isa: str, cases: list[tuple[str, np.ndarray | dict[str, np.ndarray]]], tmp_path, threads: int = 1,
            dynamic_quant: bool = True, tall: str = "integer") -> list[np.ndarray]:
    """The models' outputs in a process whose kernels are capped at `isa` (LITE_CPU_ISA), the integer path on there
    (or off), int8 products of more than 8 rows on the path `tall` (LITE_DQ_TALL_PRODUCTS). A case's input is x, or
    a dict of every input."""
    feeds = [x if isinstance(x, dict) else {"x": x} for _, x in cases]
    np.savez(tmp_path / "inputs.npz", **{f"{i}:{name}": v for i, f in enumerate(feeds) for name, v in f.items()})
    code = ("import sys, numpy as np, lite; paths = sys.argv[1:]; " +
            f"xs = np.load({str(tmp_path / 'inputs.npz')!r}); out = []\n"
            f"assert {tall!r} not in ('float', 'integer') or lite._lite.dq_tall_int8_path() == {tall!r}\n"
            "for i, p in enumerate(paths):\n"
            f"    c = lite.Context(); c.cpu.dynamic_quant = {dynamic_quant}; c.cpu.thread_num = {threads}\n"
            "    m = lite.Model(); m.build_from_file(p, lite.ModelType.MINDIR_LITE, c)\n"
            f"    assert m.dynamic_quant == {dynamic_quant}, p\n"
            "    feed = {k.split(':')[1]: xs[k] for k in xs.files if k.split(':')[0] == str(i)}\n"
            "    out.append(m.predict(feed)[0].get_data_to_numpy())\n"
            f"np.savez({str(tmp_path / 'outputs.npz')!r}, *out)\n")
    subprocess.run([sys.executable, "-c", code, *[p for p, _ in cases]],
                   env={**os.environ, "LITE_CPU_ISA": isa, "LITE_DQ_TALL_PRODUCTS": tall}, check=True)
    got = np.load(tmp_path / "outputs.npz")
    return [got[f"arr_{i}"] for i in range(len(cases))]


@pytest.mark.parametrize("threads", [1, 2])
def test_tall_int8_products_in_float_equal_the_weight_only_path(tmp_path, threads):
    """Where integer multiplies are no faster than FMAs (forced here: LITE_DQ_TALL_PRODUCTS=float on the AVX2 build),
    int8 products of more than 8 rows are the float32 GEMM on the decoded weight: bit for bit the weight-only path's
    (dynamic_quant off) for every int8 layout; 8 rows or fewer, and int4 codes, keep the integer scheme."""
    cases, tall = [], []
    for storage, (bits, axis, group, symmetric) in STORAGE.items():
        for k, n in ((45, 37), (600, 50)):
            w = rng.standard_normal((k, n)).astype(np.float32)
            stored = quantize(w, bits, axis, group, symmetric)
            values = decode(stored, w.shape)
            for rows in (8, 9, 40):
                x = rng.standard_normal((rows, k)).astype(np.float32)
                cases.append((str(matmul_file(tmp_path / f"{storage}_{k}_{rows}.ms", values, stored, rows)), x))
                tall.append(bits == 8 and rows > 8)
    as_float = run_isa("avx2", cases, tmp_path, threads, tall="float")
    integer = run_isa("avx2", cases, tmp_path, threads, tall="integer")
    weight_only = run_isa("avx2", cases, tmp_path, threads, dynamic_quant=False, tall="float")
    assert sum(tall) == 5 * 2 * 2
    for (p, _), f, i, wo, is_tall in zip(cases, as_float, integer, weight_only, tall):
        np.testing.assert_array_equal(f, wo if is_tall else i, err_msg=p)
        if is_tall:
            assert not np.array_equal(f, i), p   # the integer scheme's rounding of the activations is gone


def test_tall_int8_path_choice(tmp_path):
    """The choice is reported, the override is taken, and without integer kernels there is nothing to choose."""
    code = "import lite; print(lite._lite.dq_tall_int8_path())"
    for isa, forced, want in (("avx2", "float", "float"), ("avx2", "integer", "integer"),
                              ("portable", "float", "integer"), ("avx2", "", ("float", "integer"))):
        env = {**os.environ, "LITE_CPU_ISA": isa, "LITE_DQ_TALL_PRODUCTS": forced}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() in (want if isinstance(want, tuple) else (want,)), (isa, forced, out.stdout)
    if VNNI:   # vpdpbusd: four times the FMA rate, always integer
        assert TALL_INT8 == "integer"


@pytest.mark.skipif(not VNNI, reason="compares the AVX2 build with the AVX512-VNNI one")
@pytest.mark.parametrize("threads", [1, 2])
def test_avx2_build_equals_vnni_build(tmp_path, threads):
    """Every storage, row counts inside and past the AVX2 tile's 2 rows and the VNNI tile's 8, partial panels and
    blocks, blocks of int4 longer than the int16 sums' 4 steps (int4 per column: blocks of 128 depth values), and
    int8 codes at both ends of their range (the unsigned-times-signed product's overflow case)."""
    cases = []
    for storage, (bits, axis, group, symmetric) in STORAGE.items():
        for k, n in ((45, 37), (600, 50)):
            w = rng.standard_normal((k, n)).astype(np.float32)
            if bits == 8:
                w[:, 0] = np.where(np.arange(k) % 2, 1, -1) * np.abs(w).max()   # codes of -127/127 (and zero points)
            stored = quantize(w, bits, axis, group, symmetric)
            values = decode(stored, w.shape)
            for rows in (1, 2, 3, 9):
                x = rng.standard_normal((rows, k)).astype(np.float32)
                x[0, :4] = [3.0, -3.0, 0.0, 1e-3]
                path = matmul_file(tmp_path / f"{storage}_{k}_{rows}.ms", values, stored, rows)
                cases.append((str(path), x))
    want = run_isa("avx512", cases, tmp_path, threads)   # integer throughout (int4's 9 rows too: not on bf16 tiles)
    got = run_isa("avx2", cases, tmp_path, threads)
    for (p, _), g, w_ in zip(cases, got, want):
        np.testing.assert_array_equal(g, w_, err_msg=p)


def test_portable_isa_turns_it_off(tmp_path):
    """LITE_CPU_ISA=portable (no AVX2): the option then has no effect, and the model says so."""
    k, n = 32, 16
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, 8, 1, 0, True)
    path = matmul_file(tmp_path / "m.ms", decode(stored, w.shape), stored, 1)
    code = ("import lite; c = lite.Context(); c.cpu.dynamic_quant = True; m = lite.Model(); "
            f"m.build_from_file({path!r}, lite.ModelType.MINDIR_LITE, c); print(m.dynamic_quant)")
    for isa, on in (("portable", "False"), ("avx2", "True")):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_CPU_ISA": isa},
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == on, isa


@pytest.mark.skipif(not AMX_INT8, reason="compares the AMX tiles (AMX-INT8) with the AVX512-VNNI kernels")
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_tiles_equal_the_vnni_kernels(tmp_path, threads):
    """Products of more than 8 rows run on AMX tiles (cpu/gemm/dq_amx: blocks of 32 depth values on half-depth
    tiles, of 64k on full ones; other blocks stay on the vector kernels) and equal the AVX512-VNNI kernels'
    (LITE_CPU_ISA=avx512) bit for bit: every storage, rows inside and past a 16-row tile and a 32-row block, a lone
    last panel (N = 37, 50) and whole pairs (64), depths not a multiple of a step, codes at both ends of their range,
    and the fused epilogue (bias, residual, SiLU, multiplier) on some of them."""
    cases = []
    for storage, (bits, axis, group, symmetric) in STORAGE.items():
        for k, n in ((45, 37), (600, 50), (200, 64)):
            w = rng.standard_normal((k, n)).astype(np.float32)
            w[:, 0] = np.where(np.arange(k) % 2, 1, -1) * np.abs(w).max()   # codes at both ends of the range
            stored = quantize(w, bits, axis, group, symmetric)
            values = decode(stored, w.shape)
            for rows in (9, 17, 33, 70):
                x = rng.standard_normal((rows, k)).astype(np.float32)
                x[0, :4] = [3.0, -3.0, 0.0, 1e-3]
                fused = rows == 33 and k == 600
                path = str(matmul_file(tmp_path / f"{storage}_{k}_{rows}.ms", values, stored, rows,
                                       rng.standard_normal(n).astype(np.float32) if fused else None))
                feed = {"x": x, "r": rng.standard_normal((rows, n)).astype(np.float32),
                        "g": rng.standard_normal((rows, n)).astype(np.float32)} if fused else x
                cases.append((path, feed))
    amx = run_isa("native", cases, tmp_path, threads)
    vnni = run_isa("avx512", cases, tmp_path, threads)
    for (p, _), a, v in zip(cases, amx, vnni):
        np.testing.assert_array_equal(a, v, err_msg=p)


AMX_BF16 = "amx_bf16" in CPU_FLAGS


@pytest.mark.skipif(not AMX_BF16, reason="int4 prompts take bf16 tiles on CPUs with AMX-BF16")
@pytest.mark.parametrize("threads", [1, 2])
def test_tall_int4_products_on_bf16_tiles(tmp_path, threads):
    """On AMX-BF16, int4 products of 32 rows or more run as bf16 tile products on the codes decoded per task
    (cpu/gemm/dq_bf16_prompts): the float32 sums of bf16(x) x bf16(scale * (code - zero)), for every int4 storage
    (blocks of 8 with zero points, of 32, 64, per column, per tensor), partial panels (N = 37, 50), a depth off the
    8-row step (45) and one past a tile's depth block (8300: two blocks, the second added to the first), the fused
    epilogue, a narrow B at two threads (N = 37: rows split); the same bits at one and two threads; 31 rows stay
    integer; LITE_DQ_TALL_PRODUCTS=integer turns it off and =bf16 sends int8 codes here too."""
    assert TALL_INT4 == "bf16"
    cases, kinds = [], []
    for storage, (bits, axis, group, symmetric) in STORAGE.items():
        shapes = ((45, 37), (600, 50), (200, 64)) + (((8300, 40),) if storage == "int4_blocks32" else ())
        for k, n in shapes:
            w = rng.standard_normal((k, n)).astype(np.float32)
            stored = quantize(w, bits, axis, group, symmetric)
            values = decode(stored, w.shape)
            for rows in ((31, 32, 70) if k < 8300 else (40,)):
                x = rng.standard_normal((rows, k)).astype(np.float32)
                fused = rows == 70 and k == 600
                bias = rng.standard_normal(n).astype(np.float32) if fused else None
                path = str(matmul_file(tmp_path / f"{storage}_{k}_{rows}.ms", values, stored, rows, bias))
                feed = {"x": x, "r": rng.standard_normal((rows, n)).astype(np.float32),
                        "g": rng.standard_normal((rows, n)).astype(np.float32)} if fused else x
                cases.append((path, feed))
                kinds.append((bits, rows, values, bias, block := group or COLUMN_BLOCK))
    native = run_isa("native", cases, tmp_path, threads, tall="")
    integer = run_isa("native", cases, tmp_path, threads, tall="integer")
    forced = run_isa("native", cases, tmp_path, threads, tall="bf16")
    on_tiles = 0
    for (p, feed), got, i, f, (bits, rows, values, bias, block) in zip(cases, native, integer, forced, kinds):
        x = feed["x"] if isinstance(feed, dict) else feed
        if rows < 32 or bits == 8:   # the integer scheme's
            np.testing.assert_array_equal(got, i, err_msg=p)
            if rows < 32:
                np.testing.assert_array_equal(f, i, err_msg=p)
            continue
        on_tiles += 1
        want, bound = emulate_bf16(x, values)
        if bias is not None:
            y = want + bias + feed["r"]
            want, bound = y / (1 + np.exp(-y)) * feed["g"], 1e-4 * (1 + np.abs(y * feed["g"]))
        assert np.all(np.abs(got - want) <= bound), (p, np.abs(got - want).max())
        np.testing.assert_array_equal(f, got, err_msg=p)
        assert not np.array_equal(i, got), p   # integer when told so
        int_want, int_bound = emulate(x, values, block)
        if bias is None:
            assert np.all(np.abs(i - int_want) <= int_bound), p
    assert on_tiles == 6 * 3 * 2 + 1
    for (p, feed), f, (bits, rows, values, bias, block) in zip(cases, forced, kinds):   # int8 codes under =bf16
        if bits == 8 and rows >= 32 and bias is None:
            want, bound = emulate_bf16(feed, values)
            assert np.all(np.abs(f - want) <= bound), (p, np.abs(f - want).max())
    if threads == 2:
        one = run_isa("native", cases, tmp_path, 1, tall="")
        for (p, _), a, b in zip(cases, one, native):
            np.testing.assert_array_equal(a, b, err_msg=p)


def test_tall_int4_path_choice():
    """The choice is reported and the override taken; capped below AMX (LITE_CPU_ISA=avx512) it stays integer."""
    code = "import lite; print(lite._lite.dq_tall_int4_path())"
    for isa, forced, want in (("native", "", "bf16" if AMX_BF16 else "integer"), ("native", "integer", "integer"),
                              ("avx512", "", "integer"), ("avx2", "bf16", "integer")):
        env = {**os.environ, "LITE_CPU_ISA": isa, "LITE_DQ_TALL_PRODUCTS": forced}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, (isa, forced, out.stdout)


@pytest.mark.skipif(not AMX_BF16, reason="int4 prompts take bf16 tiles on CPUs with AMX-BF16")
def test_bf16_tiles_keep_a_non_finite_value_in_its_row(tmp_path):
    """On the bf16 tiles an infinity or a NaN in one activation row reaches that row's outputs only (as in a float
    product), every other row's outputs stay finite and follow the bf16 emulation."""
    k, n, rows = 96, 40, 40
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = quantize(w, 4, 0, 32, True)
    values = decode(stored, w.shape)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x[3, 5], x[20, 70] = np.inf, np.nan
    got = load_dq(matmul_file(tmp_path / "m.ms", values, stored, rows)).predict({"x": x})[0].get_data_to_numpy()
    assert not np.isfinite(got[3]).any() and np.isnan(got[20]).all()
    others = np.setdiff1d(np.arange(rows), [3, 20])
    want, bound = emulate_bf16(x[others], values)
    assert np.all(np.abs(got[others] - want) <= bound)
