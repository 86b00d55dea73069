"""Runs a .ms model in a fresh process with extra environment switches (the runtime reads its ISA and layout
switches once per process). The child imports only `lite` and NumPy: importing the test modules (ONNX, ONNX
Runtime, the converter) cost ~1.3 s a process, most of these tests' time."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

_CHILD = """
import sys, numpy as np, lite
path, threads, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
feeds = dict(np.load(out + '.in.npz'))
ctx = lite.Context()
ctx.cpu.thread_num = threads
m = lite.Model()
m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
np.save(out, m.predict(feeds)[0].get_data_to_numpy())
"""


def run_isolated(path: str, feeds: dict[str, np.ndarray], threads: int = 1, env: dict[str, str] | None = None,
                 tag: str = "") -> np.ndarray:
    """The first output of `path` on `feeds`, computed in a child process with `env` added to the environment."""
    env = env or {}
    out = path + tag + ".".join(f"{k}{v}" for k, v in env.items()) + f".t{threads}.npy"
    np.savez(out + ".in.npz", **feeds)
    r = subprocess.run([sys.executable, "-c", _CHILD, path, str(threads), out], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(out)
