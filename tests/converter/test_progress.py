"""Long conversions report progress (issue 35): converter_lite --logLevel / -v prints each phase (optimisation
passes, weights written, calibration samples, GPTQ layers) with its timing; a terminal gets bars drawn in place."""
from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import onnx

from converter.progress import Progress, configure_logging
from model_zoo.tiny import small_cnn

BIN = os.path.dirname(sys.executable)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, "converter_lite"), *args], capture_output=True, text=True, timeout=120)


def test_log_levels(tmp_path):
    src = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(src))
    quiet = run("--fmk=ONNX", f"--modelFile={src}", f"--outputFile={tmp_path / 'a'}")
    assert quiet.returncode == 0 and "[converter]" not in quiet.stderr
    info = run("--fmk=ONNX", f"--modelFile={src}", f"--outputFile={tmp_path / 'b'}", "-v")
    assert info.returncode == 0, info.stderr
    assert "[converter] INFO optimising 'small_cnn'" in info.stderr and "writing weights" in info.stderr
    assert "done in" in info.stderr
    debug = run("--fmk=ONNX", f"--modelFile={src}", f"--outputFile={tmp_path / 'c'}", "--logLevel=debug",
                "--fp16=on", "--inputShape=x:1,3,32,32")
    assert debug.returncode == 0, debug.stderr
    assert "constant_folding: fired" in debug.stderr and "accuracy: written model" in debug.stderr
    bad = run("--fmk=ONNX", f"--modelFile={src}", f"--outputFile={tmp_path / 'd'}", "--logLevel=LOUD")
    assert bad.returncode != 0 and "--logLevel" in bad.stderr


def test_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    configure_logging("WARNING")
    out = Terminal()
    with Progress("GPTQ layers", 3, stream=out) as p:
        for name in ("q", "k", "v"):
            p.step(name)
    text = out.getvalue()
    assert "\rGPTQ layers [" in text and "] 3/3" in text and "#" * 30 in text and text.endswith(" s\n")
    configure_logging("ERROR")   # --logLevel=ERROR: quiet, bars included
    quiet = Terminal()
    with Progress("GPTQ layers", 3, stream=quiet) as p:
        p.step("q")
    assert quiet.getvalue() == "" and logging.getLogger("converter").level == logging.ERROR
    configure_logging("WARNING")
