"""A tiny model that asks for a huge tensor (a 140-byte ONNX file expanding a scalar to [50000, 50000], 10 GB) is
refused with a message naming the node and the shape, within bounded memory: constant folding checks an Expand's
size before NumPy allocates it, and the runtime's allocation failure while preparing surfaces as a MemoryError naming
the tensor, which the converter reports (run under a 6 GB address-space limit, so no machine is put at risk)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import os, resource, sys
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
op = sys.argv[2]
if op == "Expand":
    first = helper.make_node("Expand", ["one", "shape"], ["big"])
    inits = [numpy_helper.from_array(np.array([1.0], np.float32), "one"),
             numpy_helper.from_array(np.array([50000, 50000], np.int64), "shape")]
else:   # an outer product of two 200 KB constants: [50000, 1] x [1, 50000]
    first = helper.make_node(op, ["col", "row"], ["big"])
    inits = [numpy_helper.from_array(np.ones((50000, 1), np.float32), "col"),
             numpy_helper.from_array(np.ones((1, 50000), np.float32), "row")]
g = helper.make_graph([first, helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)], "g", [],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits)
path = os.path.join(sys.argv[1], "bomb.onnx")
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
from converter.api import Converter, FmkType
from converter.ir import ConverterError
try:
    Converter().convert(FmkType.ONNX, path, os.path.join(sys.argv[1], "bomb"))
    print("CONVERTED")
except ConverterError as e:
    print("REFUSED", e)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking parent (a pytest process grown by earlier
# tests), so it would report the parent's peak.
print("MAXRSS", next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and ru_maxrss in KB are Linux's")
@pytest.mark.parametrize("op", ["Expand", "Mul", "MatMul"])
def test_a_tensor_bomb_is_refused_in_bounded_memory(tmp_path, op):
    """Expand to [50000, 50000], and the broadcasting / outer-product forms (Mul, MatMul of [50000, 1] and [1, 50000]):
    folding checks the result's size before computing it."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), op], capture_output=True, text=True,
                         timeout=300)
    lines = out.stdout.splitlines()
    assert lines and lines[0].startswith("REFUSED"), out.stdout + out.stderr
    assert f"'{op}_0' (" in lines[0] and "'big' [50000, 50000]" in lines[0]   # (a K=1 MatMul becomes a Mul)
    assert int(lines[-1].split()[1]) < 1 << 30   # never near the 10 GB the tensor would take
    assert not os.path.exists(tmp_path / "bomb.ms")
