"""The long sanitizer run (issue 35): >= 10,000 mutated .ms files and >= 1,000 mutated ONNX models through the
ASan + UBSan build. Needs build/asan/fuzz_load (./build.sh asan builds it, and CI runs a shorter corpus there);
run with `pytest -m slow tests/fuzz`."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = os.path.join(ROOT, "build", "asan", "fuzz_load")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(DRIVER), reason="no sanitizer build (./build.sh asan)")
def test_long_sanitizer_run():
    out = subprocess.run([sys.executable, "-W", "ignore", "-m", "tests.fuzz.sanitizer_fuzz", "--driver", DRIVER,
                          "--ms", "10000", "--onnx", "1000", "--seed", "1"], capture_output=True, text=True,
                         cwd=ROOT, timeout=3600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-6000:]
    assert int(out.stdout.split("fuzz_load: ")[1].split()[0]) >= 10000 and "'onnx_internal_errors': 0" in out.stdout
