"""Which CPUs take the convolution rules first measured on a Sapphire Rapids Xeon (the wide tiles, the pixel-tile
rule, the blocked Winograd): Intel cores and AMD Zen 4 (AuthenticAMD, family 19h, with AVX-512), as /proc/cpuinfo
says; each rule's variable overrides it on any CPU. The kernels themselves are tested both ways elsewhere
(test_winograd_blocked, test_channel_blocked, test_conv_pixel_tiles)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                                reason="cpuid vendor and family: x86-64 Linux")
RULE_VARS = ("LITE_CONV_WIDE_TILES", "LITE_CONV_WINOGRAD_BLOCKED", "LITE_CONV_PIXEL_TILES", "LITE_CPU_ISA")


def _cpuinfo() -> dict:
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break   # the first CPU's block
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def _features(**env_values: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in RULE_VARS}
    env.update(env_values)
    code = "from lite import _lite; print(repr(_lite.cpu_features()))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout)   # a dict of str, bool and str values, printed by repr


def test_zen4_and_intel_take_the_xeon_conv_rules():
    info = _cpuinfo()
    intel = info.get("vendor_id") == "GenuineIntel"
    zen4 = (info.get("vendor_id") == "AuthenticAMD" and info.get("cpu family") == "25"
            and "avx512f" in info.get("flags", "").split())
    f = _features()
    assert f["intel"] == intel and f["amd_zen4"] == zen4
    assert f["xeon_conv_rules"] == (intel or zen4)
    assert f["conv_winograd_blocked"] == f["xeon_conv_rules"]
    if f["isa"] == "avx512f":
        assert f["conv_wide_tiles"] == f["xeon_conv_rules"]


def test_each_rule_is_overridden_on_any_cpu():
    assert _features(LITE_CONV_WINOGRAD_BLOCKED="1")["conv_winograd_blocked"] is True
    assert _features(LITE_CONV_WINOGRAD_BLOCKED="0")["conv_winograd_blocked"] is False
    assert _features(LITE_CONV_WIDE_TILES="0")["conv_wide_tiles"] is False
