"""The emulated ARM64 job (issue 39; docs/arm64.md) from pytest: the cross-compiled benchmark_lite runs the corpus
under qemu-user's CPU models, and the target's own Python runs it again through lite.Model; both must reproduce the
x86 runtime's outputs within the stated tolerances (tests/arm64/run.py). Needs build/arm64 (./build.sh arm64-build)
and qemu-aarch64; skipped without them, except under LITE_REQUIRE_ARM64=1, where a missing build or emulator is a
failure (CI runs the job itself after the suite, ./build.sh arm64, which fails without them). Marked `arm64`: `-m arm64`
runs these alone, `-m 'not slow and not arm64'` leaves them out; the longer corpus is marked `slow` too."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.arm64 import run  # noqa: E402

BUILD = os.path.join(ROOT, "build", "arm64")
BINARY = os.path.join(BUILD, "benchmark_lite")

pytestmark = pytest.mark.arm64


def _require_build() -> str:
    """qemu-aarch64's path; skips (or, under LITE_REQUIRE_ARM64=1, fails) without the cross build or the emulator."""
    qemu = shutil.which("qemu-aarch64")
    needs = [(f"{os.path.relpath(BINARY, ROOT)} (./build.sh arm64-build)", os.path.exists(BINARY)),
             ("qemu-aarch64 (apt-get install qemu-user)", qemu is not None),
             (f"{run.SYSROOT} (apt-get install g++-aarch64-linux-gnu)", os.path.isdir(run.SYSROOT))]
    missing = [what for what, ok in needs if not ok]
    if missing:
        message = "no ARM64 build or emulator: " + ", ".join(missing)
        if os.environ.get("LITE_REQUIRE_ARM64") == "1":
            pytest.fail(message + " (LITE_REQUIRE_ARM64=1)")
        pytest.skip(message)
    return qemu


def test_emulated_corpus_matches_x86():
    """Every corpus model on cortex-a53, max and max capped at NEON, lite_kernel_tests where built, and the runner's
    self-check (a reference 1% off must fail)."""
    _require_build()
    p = subprocess.run([sys.executable, "-m", "tests.arm64.run", "--build", BUILD], cwd=ROOT, capture_output=True,
                       text=True, timeout=1800)
    print(p.stdout[-20000:])
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-4000:]
    assert " passed; tolerances" in p.stdout


@pytest.mark.slow
def test_emulated_long_corpus_matches_x86():
    """The longer corpus (--long: every architecture of model_zoo.hf_tiny at its larger dynamic shape, two threads,
    more quantised and bf16 variants): `-m "slow and arm64"`."""
    _require_build()
    p = subprocess.run([sys.executable, "-m", "tests.arm64.run", "--build", BUILD, "--long"], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    print(p.stdout[-20000:])
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-4000:]
    assert " passed; tolerances" in p.stdout
