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
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compare", "--models", "small_cnn", "--threads", "1",
                           "--rounds", "2", "--batch", "2", "--engines", "lite", "onnxruntime", "--gemm",
                           "--gemm-shapes", "256", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "Machine:" in text and "FMA peak" in text
    rows = [line for line in text.splitlines() if line.startswith("| small CNN")]
    assert len(rows) == 3   # summary row + one per engine
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        median, p90, load_ms, rss = float(cells[3]), float(cells[4]), float(cells[6]), float(cells[7])
        assert 0 < median <= p90 and load_ms > 0 and rss > 10
        diff = float(cells[8].split()[0])
        assert diff < 1e-4   # lite's output matches ONNX Runtime's
    gemm = [line for line in text.splitlines() if line.startswith("| 256 (")]
    assert len(gemm) == 1 and all(float(x) > 0 for x in re.findall(r"\| ([\d.]+) \|", gemm[0])[:3])
