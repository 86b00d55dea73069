"""A conversion killed while it writes (SIGKILL, which no cleanup handler sees) leaves nothing behind: the output
is written to an unnamed file (O_TMPFILE) that gets its name only when complete. Where the system has no
O_TMPFILE the hidden temporary file remains possible; this test needs Linux."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

SCRIPT = r"""
import sys, time
import numpy as np
from converter.ir import Graph, Node, Tensor
from converter.writer import write_ms
g = Graph(name="g")
g.tensors["x"] = Tensor("x", np.dtype(np.float32), [4])
g.tensors["w"] = Tensor("w", np.dtype(np.float32), [4], np.ones(4, np.float32))
g.tensors["y"] = Tensor("y", np.dtype(np.float32), [4])
g.nodes.append(Node("add", "Add", ["x", "w"], ["y"], {}))
g.inputs, g.outputs = ["x"], ["y"]
def verify(path):   # the file is complete here; the process is killed before it is named
    print("written", flush=True)
    time.sleep(60)
write_ms(g, sys.argv[1], verify=verify)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
def test_sigkill_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out / "m.ms")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert os.listdir(out) == []


def test_a_completed_write_is_named_and_readable(tmp_path):
    import numpy as np

    from converter.ir import Graph, Node, Tensor
    from converter.writer import write_ms
    from parity import load
    g = Graph(name="g")
    g.tensors["x"] = Tensor("x", np.dtype(np.float32), [4])
    g.tensors["w"] = Tensor("w", np.dtype(np.float32), [4], np.arange(4, dtype=np.float32))
    g.tensors["y"] = Tensor("y", np.dtype(np.float32), [4])
    g.nodes.append(Node("add", "Add", ["x", "w"], ["y"], {}))
    g.inputs, g.outputs = ["x"], ["y"]
    seen = []
    write_ms(g, str(tmp_path / "m.ms"), verify=lambda p: seen.append(os.path.getsize(p)))
    assert os.listdir(tmp_path) == ["m.ms"] and seen == [os.path.getsize(tmp_path / "m.ms")]
    y = load(str(tmp_path / "m.ms")).predict({"x": np.ones(4, np.float32)})[0].get_data_to_numpy()
    np.testing.assert_array_equal(y, np.arange(4) + 1)
