"""The side-by-side benchmark runner works end to end (a small model, one GEMM shape, one round), so the
committed tables can always be reproduced. Timings are not asserted: only that every figure is there."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_compare_runner_writes_complete_tables(tmp_path):
    out = tmp_path / "table.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compare", "--models", "small_cnn", "--threads", "1", "2",
                           "--rounds", "2", "--batch", "2", "--engines", "lite", "onnxruntime", "--gemm",
                           "--gemm-shapes", "256", "--pause", "0.02", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "Machine:" in text and "FMA peak" in text
    rows = [line for line in text.splitlines() if line.startswith("| small CNN")]
    assert len(rows) == 6   # per thread count: a summary row + one per engine
    summary = {row.split("|")[2].strip(): row for row in rows[:2]}
    assert summary["1"].rstrip(" |").endswith("-")   # no placement figure for one thread
    placement = summary["2"].strip(" |").split("|")[-1].strip()   # CPU 0 <-> 1 round trip before / after
    if hasattr(os, "sched_getaffinity") and {0, 1} <= os.sched_getaffinity(0):
        assert all(float(v) > 0 for v in placement.split(" / "))
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        median, p90, load_ms, rss = float(cells[3]), float(cells[4]), float(cells[6]), float(cells[7])
        assert 0 < median <= p90 and load_ms > 0 and rss > 10
        diff = float(cells[8].split()[0])
        assert diff < 1e-4   # lite's output matches ONNX Runtime's
    gemm = [line for line in text.splitlines() if line.startswith("| 256 (")]
    assert len(gemm) == 2 and all(float(x) > 0 for row in gemm for x in re.findall(r"\| ([\d.]+) \|", row)[:3])


def _mobile_peers_rows(tmp_path, engines: list[str], model: str) -> list[list[str]]:
    out = tmp_path / f"peers_{len(engines)}.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.mobile_peers", "--models", model, "--threads", "1",
                           "--rounds", "1", "--batch", "2", "--pause", "0.02", "--engines", *engines, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "Machine:" in text and "Peers:" in text
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and "| f32 |" in line]


def test_mobile_peers_runner_without_peers(tmp_path):
    """benchmarks.mobile_peers with MNN and ncnn left out (CI has neither): lite and ONNX Runtime, every figure there."""
    rows = _mobile_peers_rows(tmp_path, [], "small_cnn")
    summary, detail = rows[0], rows[1:]
    assert len(summary) == 6 and float(summary[3]) > 0 and float(summary[4]) > 0 and float(summary[5]) > 0
    assert [r[3] for r in detail] == ["lite", "onnxruntime"]
    assert float(detail[0][8].split()[0]) < 1e-4   # lite's output matches ONNX Runtime's


def test_mobile_peers_runner_with_mnn_and_ncnn(tmp_path):
    """Where MNN and ncnn are installed (benchmarks/requirements.txt), both convert and run a batch-1 CNN and match
    ONNX Runtime's output closely (MNN at float32 within 1e-3, ncnn within 0.2 of outputs up to ~6)."""
    import pytest
    from benchmarks import mobile_peers
    if sorted(mobile_peers.installed_peers()) != ["mnn", "ncnn"]:
        pytest.skip("MNN and ncnn (with mnnconvert and pnnx) are not installed")
    rows = _mobile_peers_rows(tmp_path, ["mnn", "ncnn"], "mobilenetv2")
    detail = {r[3]: r for r in rows[1:]}
    assert set(detail) == {"lite", "onnxruntime", "mnn", "ncnn"}
    assert float(detail["mnn"][8].split()[0]) < 1e-3 and float(detail["ncnn"][8].split()[0]) < 0.2


def test_cpu_rules_runner_measures_both_sides(tmp_path):
    """benchmarks.cpu_rules on a small model: each rule's two settings in their own workers, every figure there (or
    the rule skipped with its reason where this CPU lacks its kernels)."""
    out = tmp_path / "rules.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu_rules", "--models", "small_cnn", "--threads", "1",
                           "--rounds", "1", "--batch", "2", "--pause", "0.02", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "Machine:" in text and "LITE_CONV_WIDE_TILES=1 / 0" in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| rule")]
    from benchmarks.cpu_rules import RULES
    assert sorted({r[0] for r in rows}) == sorted(RULES)
    for r in rows:
        if r[6].startswith("skipped: "):
            continue
        intel, other, ratio = float(r[4]), float(r[5]), float(r[6])
        # The ratio is of the unrounded medians; the ms cells are rounded to 0.01.
        assert intel > 0 and other > 0 and abs(ratio * other - intel) <= 0.005 * (1 + ratio) + 5e-4 * other + 1e-6


def test_warm_runs_are_run_and_not_timed(tmp_path):
    """measure(..., warm_runs=N) runs N untimed inferences at the start of every turn: each worker keeps only its
    rounds x batch timed runs, and the untimed ones did run (a worker's run counter sees them)."""
    sys.path.insert(0, ROOT)
    from benchmarks.compare import MODELS, convert, make_feeds, measure
    onnx_path = str(tmp_path / "cnn.onnx")
    shapes = MODELS["small_cnn"][1](onnx_path)
    ms_path = convert(onnx_path, str(tmp_path / "cnn"), shapes)
    feeds_path = str(tmp_path / "feeds.npz")
    make_feeds(shapes, feeds_path)
    from benchmarks import compare
    answers = []   # the number of latencies in each 'run' answer the workers send back
    original = compare.Worker._read

    def counting_read(self):
        r = original(self)
        if "ms" in r:
            answers.append(len(r["ms"]))
        return r

    compare.Worker._read = counting_read
    try:
        ws = measure(["lite", "onnxruntime"], {"lite": ms_path, "onnxruntime": onnx_path}, feeds_path, 1, 3, 2,
                     pause=0.01, warm_runs=4)
    finally:
        compare.Worker._read = original
    assert all(len(w.times) == 3 * 2 for w in ws.values())   # only the timed runs kept
    assert sorted(answers) == [2] * 6 + [4] * 6               # every turn: 4 untimed runs, then 2 timed
