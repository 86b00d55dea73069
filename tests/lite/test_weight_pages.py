"""Weights laid out at load (here a float32 MatMul's packed panels) are asked for in 2 MB pages: with Linux's
transparent huge pages on ("always" or "madvise"), the process's anonymous huge pages grow by about their size."""
from __future__ import annotations

import os

import numpy as np
import pytest

from parity import load
from test_skinny_gemm import matmul_file

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def anon_huge_kb() -> int:
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not os.path.exists(THP) or "[never]" in open(THP).read(), reason="no transparent huge pages")
def test_packed_weights_sit_in_huge_pages(tmp_path):
    k, n = 1024, 4096   # 16 MB of packed panels
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    path = matmul_file(tmp_path / "m.ms", w, None, 1)
    before = anon_huge_kb()
    model = load(path)   # static shapes: the plan, and the packed weight, are made at build
    x = np.ones((1, k), np.float32)
    got = model.predict({"x": x})[0].get_data_to_numpy()
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-3)
    assert anon_huge_kb() - before >= 8 * 1024
