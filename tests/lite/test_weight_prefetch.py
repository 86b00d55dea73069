"""How weights read once per product are prefetched: non-temporal (prefetchnta) on AMD, into L2 on Intel, where a
non-temporal line goes to L1 only and a panel every row tile reads came from memory again for each tile.
The choice is a vendor default with an override (LITE_WEIGHT_PREFETCH_NTA); it is a hint only, so the products are
bit-identical either way."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import convert


def _cpu_is_intel() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in f)
    except OSError:
        return False


def _features(env_value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LITE_WEIGHT_PREFETCH_NTA"}
    if env_value is not None:
        env["LITE_WEIGHT_PREFETCH_NTA"] = env_value
    code = "from lite import _lite; f = _lite.cpu_features(); print(f['intel'], f['weight_prefetch_nta'])"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    intel, nta = r.stdout.split()
    return {"intel": intel == "True", "nta": nta == "True"}


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="cpuid vendor: x86-64 Linux")
def test_vendor_default_and_override():
    default = _features(None)
    assert default["intel"] == _cpu_is_intel()
    assert default["nta"] == (not default["intel"])
    assert _features("1")["nta"] is True
    assert _features("0")["nta"] is False
    assert _features("yes")["nta"] == default["nta"]   # not 0 / 1: the vendor's default


def _small_plane_net(path) -> str:
    """What streams weights with few pixels per weight: a 7x7 plane's blocked 1x1 and 3x3 Convs (ResNet-50's last
    stage, shrunk) and a 49-row MatMul with a 2 MB weight."""
    rng = np.random.default_rng(5)
    c, m = 64, 256
    w1 = (rng.standard_normal((m, c, 1, 1)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((m, m, 3, 3)) * 0.02).astype(np.float32)
    w3 = (rng.standard_normal((m * 49, 2048)) * 0.01).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Reshape", ["d", "shape"], ["e"]), helper.make_node("MatMul", ["e", "w3"], ["y"])]
    graph = helper.make_graph(
        nodes, "plane", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(w3, "w3"),
         numpy_helper.from_array(np.array([1, m * 49], np.int64), "shape")])
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("threads", [1, 2])
def test_products_equal_with_either_prefetch(tmp_path, threads):
    path = _small_plane_net(tmp_path)
    x = np.random.default_rng(6).standard_normal((1, 64, 7, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for nta in ("0", "1"):
        out = tmp_path / f"y{nta}.npy"
        code = ("import numpy as np, lite; c = lite.Context(); "
                f"c.cpu.thread_num = {threads}; m = lite.Model(); "
                f"m.build_from_file({path!r}, lite.ModelType.MINDIR_LITE, c); "
                f"np.save({str(out)!r}, m.predict({{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0].get_data_to_numpy())")
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LITE_WEIGHT_PREFETCH_NTA": nta},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs[nta] = np.load(out)
    assert np.isfinite(outs["0"]).all() and np.abs(outs["0"]).max() > 0
    np.testing.assert_array_equal(outs["0"], outs["1"])
