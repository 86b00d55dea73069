"""Products with constant weights under precision bfloat16 (Context precision_mode preferred_bf16, AVX512_BF16):
weights stored as bfloat16 are taken as they are and float32 ones rounded once; a few rows (a decode step) take the
skinny vdpbf16ps path, more rows the bf16 GEMM. Both against NumPy on the bf16-rounded operands, for every row count
up to the skinny limit and past it, odd depths and partial panels, with the fused epilogue."""
from __future__ import annotations

import numpy as np
import pytest

import lite
from converter.quantization import decode, to_bfloat16
from test_skinny_gemm import matmul_file

pytestmark = pytest.mark.skipif("avx512_bf16" not in open("/proc/cpuinfo").read(),
                                reason="the bf16 kernels need AVX512_BF16")
rng = np.random.default_rng(5)


def bf16(x: np.ndarray) -> np.ndarray:
    return decode(to_bfloat16(np.ascontiguousarray(x, np.float32)), x.shape).astype(np.float64)


def load_bf16(path: str, threads: int = 1) -> lite.Model:
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    ctx.cpu.precision_mode = "preferred_bf16"
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    assert m.compute_precision == "bfloat16"
    return m


@pytest.mark.parametrize("stored_as", ["bfloat16", "float32"])
@pytest.mark.parametrize("k,n", [(45, 37), (300, 70), (64, 32)])
def test_products_on_bf16_operands(tmp_path, stored_as, k, n):
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = to_bfloat16(w) if stored_as == "bfloat16" else None
    values = decode(stored, w.shape) if stored is not None else w
    for rows in (1, 2, 3, 5, 8, 9, 20):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        got = load_bf16(matmul_file(tmp_path / f"m{rows}.ms", values, stored, rows)).predict({"x": x})[0]
        want = bf16(x) @ bf16(values)
        bound = 1e-6 * k ** 0.5 * (np.abs(bf16(x)) @ np.abs(bf16(values))) + 1e-6   # float32 sums
        err = np.abs(got.get_data_to_numpy() - want)
        assert np.all(err <= bound), (stored_as, rows, err.max())


@pytest.mark.parametrize("rows", [1, 6, 12, 45])   # 12, 45: the GEMM's in-register SiLU and multiplier
def test_fused_epilogue_and_threads(tmp_path, rows):
    k, n = 96, 72
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored = to_bfloat16(w)
    values = decode(stored, w.shape)
    bias = rng.standard_normal(n).astype(np.float32)
    feeds = {"x": rng.standard_normal((rows, k)).astype(np.float32),
             "r": rng.standard_normal((rows, n)).astype(np.float32),
             "g": rng.standard_normal((rows, n)).astype(np.float32)}
    path = matmul_file(tmp_path / "m.ms", values, stored, rows, bias)
    one = load_bf16(path).predict(feeds)[0].get_data_to_numpy()
    two = load_bf16(path, threads=2).predict(feeds)[0].get_data_to_numpy()
    np.testing.assert_array_equal(one, two)
    y = bf16(feeds["x"]) @ bf16(values) + bias + feeds["r"]
    np.testing.assert_allclose(one, y / (1 + np.exp(-y)) * feeds["g"], rtol=1e-4, atol=1e-4)


def test_fused_silu_at_the_extremes(tmp_path):
    """The bf16 GEMM's in-register SiLU past exp's clamps (|y| up to ~300) and with a NaN row."""
    rows, k, n = 45, 96, 72
    values = decode(to_bfloat16(rng.standard_normal((k, n)).astype(np.float32)), (k, n))
    bias = rng.standard_normal(n).astype(np.float32)
    feeds = {"x": (rng.standard_normal((rows, k)) * 30).astype(np.float32),
             "r": rng.standard_normal((rows, n)).astype(np.float32),
             "g": rng.standard_normal((rows, n)).astype(np.float32)}
    feeds["x"][4, 9] = np.nan
    got = load_bf16(matmul_file(tmp_path / "m.ms", values, None, rows, bias)).predict(feeds)[0].get_data_to_numpy()
    y = bf16(feeds["x"]) @ bf16(values) + bias + feeds["r"]
    with np.errstate(over="ignore", invalid="ignore"):
        want = y / (1 + np.exp(-y)) * feeds["g"]
    assert np.abs(y[np.isfinite(y)]).max() > 100 and np.isnan(got[4]).all()
    keep = np.arange(rows) != 4
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-4, atol=1e-3)
