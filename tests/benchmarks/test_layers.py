"""The per-layer comparison (benchmarks.layers): OpenVINO's layer names are matched to lite's nodes, unmatched layers
of either engine are kept, and the tool runs end to end. Timings are not asserted."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.layers import match

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_match_pairs_conv_layers_and_keeps_the_rest():
    lite = {"/conv1/Conv": (("Conv", "winograd_f4x4"), 0.5), "/pool/MaxPool": (("MaxPool", "-"), 0.1),
            "/tail/Add": (("Add", "-"), 0.02)}
    openvino = {"/conv1/Conv/WithoutBiases": ("Convolution", "brgconv_avx512_f32", 0.4),
                "/pool/MaxPool": ("MaxPool", "jit_avx512_f32", 0.2),
                "x_abcd_acdb_/conv1/Conv/WithoutBiases": ("Reorder", "jit_uni_f32", 0.05)}
    matched, lite_only, openvino_only = match(lite, openvino)
    assert matched == [("/conv1/Conv", "Conv", 0.5, 0.4, "brgconv_avx512_f32", "winograd_f4x4"),
                       ("/pool/MaxPool", "MaxPool", 0.1, 0.2, "jit_avx512_f32", "-")]
    assert lite_only == [("/tail/Add", "Add", 0.02, "-")]
    assert openvino_only == [("x_abcd_acdb_/conv1/Conv/WithoutBiases", "Reorder", "jit_uni_f32", 0.05)]


def test_layers_tool_writes_a_complete_table(tmp_path):
    pytest.importorskip("openvino")
    out = tmp_path / "layers.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.layers", "--model", "small_cnn", "--runs", "3",
                           "--warmup", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "Machine:" in text and "Sum of layers: lite" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    assert any("(OpenVINO only)" not in r and "(lite only)" not in r for r in rows)   # some layers matched
    assert len(rows) >= 5
    # Each matched Conv names the kernel lite ran beside OpenVINO's.
    convs = [[c.strip() for c in r.strip("|").split("|")] for r in rows if "| Conv |" in r and "only)" not in r]
    assert convs and all(c[5] not in ("", "-") for c in convs), text


def test_layers_tool_compares_int8_models(tmp_path):
    """--precision int8: lite's FULL_QUANT model beside OpenVINO's NNCF model, both calibrated on the same samples;
    their Conv layers keep the ONNX names, so they are matched."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    out = tmp_path / "layers_int8.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.layers", "--model", "small_cnn", "--precision", "int8",
                           "--calibration", "2", "--runs", "3", "--warmup", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert ", int8;" in text and "Sum of layers: lite" in text
    matched = [line for line in text.splitlines() if line.startswith("| ") and "| Conv |" in line
               and "only)" not in line]
    assert matched, text
