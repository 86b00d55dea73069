"""Profiles name the implementation each node ran (Model.last_profile()'s "kernel", benchmark_lite's per-node
table): what a user reads beside OpenVINO's per-layer exec types or ONNX Runtime's kernel names, and what the tests
below use to check that a plan took the kernel its rules pick (Winograd for 3x3 layers, the blocked pointwise kernel
after them, AMX tiles where the CPU has them and nothing on AMX where LITE_CPU_ISA caps it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite import _lite
from parity import convert, load

FEATURES = _lite.cpu_features()
# Winograd F(4x4, 3x3) on whole 8-channel blocks: the blocked kernel where its rule is on (Intel by default).
WINOGRAD_F4 = "winograd_f4x4_blocked" if FEATURES["conv_winograd_blocked"] else "winograd_f4x4"
rng = np.random.default_rng(5)


def conv_chain(tmp_path, c: int, hw: int, name: str = "chain") -> str:
    """3x3 (c -> c, stride 1) -> 1x1 (c -> 2c) -> ReLU, then a 3x3 reading the 1x1's output: a float32 plan keeps the
    activations channel-blocked between the three Convs."""
    def conv(x, cin, cout, k, out):
        w = numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32),
                                    f"{out}_w")
        b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.1, f"{out}_b")
        return helper.make_node("Conv", [x, w.name, b.name], [out], name=out, pads=[k // 2] * 4), [w, b]
    n1, i1 = conv("x", c, c, 3, "c3")
    n2, i2 = conv("c3", c, 2 * c, 1, "pw")
    relu = helper.make_node("Relu", ["pw"], ["r"], name="relu")
    n3, i3 = conv("r", 2 * c, c, 3, "c3b")
    g = helper.make_graph([n1, n2, relu, n3], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("c3b", TensorProto.FLOAT, None)], i1 + i2 + i3)
    return convert(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path), name)


def matmul_model(tmp_path, rows: int, k: int = 64, n: int = 96) -> str:
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return convert(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path), f"mm{rows}")


def kernels(model: lite.Model, shape) -> dict[str, str]:
    model.enable_profiling()
    model.predict([rng.standard_normal(shape).astype(np.float32)])
    return {p["name"]: p["kernel"] for p in model.last_profile()}


def test_every_profile_entry_names_its_kernel(tmp_path):
    m = load(conv_chain(tmp_path, 16, 20))
    m.enable_profiling()
    m.predict([np.zeros((1, 16, 20, 20), np.float32)])
    prof = m.last_profile()
    assert prof and all(set(p) == {"name", "op", "start_us", "duration_us", "kernel"} for p in prof)
    assert all(isinstance(p["kernel"], str) for p in prof)
    assert all(p["kernel"] for p in prof if p["op"] == "Conv")


def test_float32_convs_name_the_kernels_their_rules_pick(tmp_path):
    """64 channels on a 56x56 plane: the 3x3 layers on Winograd F(4x4, 3x3) (16+ output tiles, 64+ channels), the 1x1
    between them on the blocked pointwise kernel (its input channel-blocked); 16 channels: no Winograd."""
    names = kernels(load(conv_chain(tmp_path, 64, 56)), (1, 64, 56, 56))
    assert names["c3"] == WINOGRAD_F4 and names["c3b"] == WINOGRAD_F4, names
    pointwise = [k for n, k in names.items() if n.startswith("pw")]
    assert pointwise == ["blocked_pointwise"], names
    small = kernels(load(conv_chain(tmp_path, 16, 20, "small")), (1, 16, 20, 20))
    assert "winograd" not in small["c3"] and small["c3"], small


@pytest.mark.skipif(os.environ.get("LITE_CONV_WINOGRAD") is not None, reason="already under a forced setting")
def test_winograd_switch_shows_in_the_profile(tmp_path):
    """LITE_CONV_WINOGRAD=0 turns Winograd off: the same 3x3 layers then name another kernel."""
    path = conv_chain(tmp_path, 64, 56)
    code = ("import sys, numpy as np, lite\n"
            "from parity import load\n"
            "m = load(sys.argv[1]); m.enable_profiling(); m.predict([np.zeros((1, 64, 56, 56), np.float32)])\n"
            "print({p['name']: p['kernel'] for p in m.last_profile()}['c3'])\n")
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # parity.py
    env = {**os.environ, "LITE_CONV_WINOGRAD": "0",
           "PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() and "winograd" not in r.stdout, r.stdout


@pytest.mark.parametrize("rows,expect", [(1, "skinny_gemm"), (64, "gemm_packed_b")])
def test_matmul_names_the_product(tmp_path, rows, expect):
    """A constant weight is packed once; a few rows take the skinny product that reads it once, more rows the GEMM."""
    assert kernels(load(matmul_model(tmp_path, rows)), (rows, 64))["mm"] == expect


@pytest.mark.skipif(not FEATURES["amx_bf16"], reason="no AMX-BF16 here (or LITE_CPU_ISA caps it, or the kernel refused "
                                                     "the tile state)")
def test_bf16_convs_run_on_amx_and_not_under_an_isa_cap(tmp_path):
    """At preferred_bf16 on AMX every Conv's kernel is an AMX one (lite's tiles or oneDNN's AMX primitives); under
    LITE_CPU_ISA=avx512 none is."""
    path = conv_chain(tmp_path, 64, 28)
    code = ("import sys, json, numpy as np, lite\n"
            "ctx = lite.Context(); ctx.cpu.precision_mode = 'preferred_bf16'\n"
            "m = lite.Model(); m.build_from_file(sys.argv[1], lite.ModelType.MINDIR_LITE, ctx); m.enable_profiling()\n"
            "m.predict([np.zeros((1, 64, 28, 28), np.float32)])\n"
            "print(json.dumps([p['kernel'] for p in m.last_profile() if p['op'] == 'Conv']))\n")
    for isa, on_amx in ((None, True), ("avx512", False)):
        env = dict(os.environ)
        env.pop("LITE_CPU_ISA", None)
        if isa:
            env["LITE_CPU_ISA"] = isa
        r = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        names = json.loads(r.stdout.strip().splitlines()[-1])
        assert len(names) == 3 and all(names), names
        assert all(("amx" in k) == on_amx for k in names), (isa, names)


def attention_model(tmp_path, q_len: int, mask: bool) -> str:
    """ONNX Attention (opset 23) over 4 heads of 32 values, 64 keys; a float mask when `mask`."""
    names = ["q", "k", "v"] + (["mask"] if mask else [])
    shapes = {"q": [1, 4, q_len, 32], "k": [1, 4, 64, 32], "v": [1, 4, 64, 32], "mask": [1, 1, q_len, 64]}
    g = helper.make_graph([helper.make_node("Attention", names, ["y"], name="attention")], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in names],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return convert(model, str(tmp_path), f"att{q_len}{int(mask)}")


def attention_kernel(path: str, q_len: int, mask: bool, bf16: bool = False) -> str:
    ctx = lite.Context()
    if bf16:
        ctx.cpu.precision_mode = "preferred_bf16"
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    feeds = [rng.standard_normal(s).astype(np.float32)
             for s in ([1, 4, q_len, 32], [1, 4, 64, 32], [1, 4, 64, 32], [1, 1, q_len, 64])[:4 if mask else 3]]
    m.enable_profiling()
    m.predict(feeds)
    return next(p["kernel"] for p in m.last_profile() if p["op"] == "Attention")


def test_attention_names_its_path(tmp_path):
    """A prompt's queries take the tiled kernel; one query over dense keys with no mask the decode step's kernel
    (which reads the keys in place), and with a mask the tiled one again."""
    assert attention_kernel(attention_model(tmp_path, 64, False), 64, False) == "attention"
    assert attention_kernel(attention_model(tmp_path, 1, False), 1, False) == "attention_decode"
    assert attention_kernel(attention_model(tmp_path, 1, True), 1, True) == "attention"


@pytest.mark.skipif(not FEATURES["amx_bf16"], reason="no AMX-BF16 here (or LITE_CPU_ISA caps it, or the kernel refused "
                                                     "the tile state)")
def test_bf16_attention_runs_on_amx(tmp_path):
    assert attention_kernel(attention_model(tmp_path, 64, False), 64, False, bf16=True) == "attention_bf16_amx"


@pytest.mark.skipif(not FEATURES["amx_bf16"], reason="no AMX-BF16 here (or LITE_CPU_ISA caps it, or the kernel refused "
                                                     "the tile state)")
def test_bf16_matmul_names_the_amx_gemm(tmp_path):
    ctx = lite.Context()
    ctx.cpu.precision_mode = "preferred_bf16"
    m = lite.Model()
    m.build_from_file(matmul_model(tmp_path, 64), lite.ModelType.MINDIR_LITE, ctx)
    assert kernels(m, (64, 64))["mm"] == "gemm_bf16_amx"


def test_benchmark_lite_prints_the_kernel_column(tmp_path):
    path = conv_chain(tmp_path, 64, 56)
    trace = tmp_path / "trace.json"
    r = subprocess.run(["benchmark_lite", f"--modelFile={path}", "--loopCount=2", "--timeProfiling",
                        f"--traceFile={trace}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    table = r.stdout.split("opName", 1)[1]
    assert "kernel" in table.splitlines()[0] and "winograd_f4x4" in table and "blocked_pointwise" in table
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["args"]["kernel"] for e in events if e["name"] in ("c3", "c3b")} == {WINOGRAD_F4}
