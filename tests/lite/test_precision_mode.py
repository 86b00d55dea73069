"""Context.cpu.precision_mode: enforce_fp32 (default), preferred_bf16 / preferred_fp16 falling back to float32 on a
CPU without that arithmetic (issue 8). On a CPU with bf16 dot products preferred_bf16 computes in bfloat16
(test_bf16.py checks its arithmetic); preferred_fp16 computes in float16 where lite's float16 kernels run (AVX512-FP16,
ARM64 FP16: test_fp16.py checks its arithmetic), elsewhere in float32, with a RuntimeWarning on a CPU with fp16
arithmetic whose kernels LITE_CPU_ISA caps, never an error."""
from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite


def cpu_flags() -> set[str]:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


HAS = {"preferred_bf16": "avx512_bf16" in cpu_flags() and lite._lite.cpu_features()["avx512_bf16"],
       "preferred_fp16": bool({"avx512_fp16", "asimdhp"} & cpu_flags())}
KERNELS = {"preferred_bf16": HAS["preferred_bf16"], "preferred_fp16": lite._lite.cpu_features()["fp16_kernels"]}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("prec")
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((24, 16)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    import onnx
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(d / "m.onnx"))
    return converter.Converter().convert("ONNX", str(d / "m.onnx"), str(d / "m")).output_file


def build(path, mode):
    ctx = lite.Context()
    ctx.cpu.precision_mode = mode
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, ctx)
    return m


def test_default_is_float32(model):
    assert lite.Context().cpu.precision_mode == "enforce_fp32"
    assert build(model, "enforce_fp32").compute_precision == "float32"


@pytest.mark.parametrize("mode", ["preferred_bf16", "preferred_fp16"])
def test_preferred_precision(model, mode):
    x = np.random.default_rng(1).standard_normal((8, 24)).astype(np.float32)
    if KERNELS[mode]:
        m = build(model, mode)
        assert m.compute_precision == ("bfloat16" if mode == "preferred_bf16" else "float16")
        got = m.predict([x])[0].get_data_to_numpy()
        want = build(model, "enforce_fp32").predict([x])[0].get_data_to_numpy()
        assert not np.array_equal(got, want) and np.abs(got - want).max() < 0.05 * np.abs(want).max()
        return
    if HAS[mode]:   # fp16 arithmetic, its kernels capped: float32, with a warning saying so
        with pytest.warns(RuntimeWarning, match=f"precision_mode {mode}: this CPU has fp16 arithmetic but lite's "
                                                "float16 kernels do not run here"):
            m = build(model, mode)
    else:
        m = build(model, mode)   # no such arithmetic here: float32, bit for bit
    assert m.compute_precision == "float32"
    np.testing.assert_array_equal(m.predict([x])[0].get_data_to_numpy(),
                                  build(model, "enforce_fp32").predict([x])[0].get_data_to_numpy())


def test_unknown_mode_is_refused(model):
    with pytest.raises(ValueError, match="precision_mode must be one of enforce_fp32, preferred_bf16, preferred_fp16"):
        build(model, "fp8")
    core = lite.Context()._core()
    core.precision_mode = "fastest"   # past the Python check: the C++ API refuses it too
    with pytest.raises(ValueError, match="precision_mode must be enforce_fp32, preferred_bf16 or preferred_fp16"):
        lite._lite.CoreModel().build_from_file(model, core)


def test_preferred_fp16_warns_on_an_fp16_cpu(model, monkeypatch):
    """The warning path, on any CPU: the CPU report says fp16 arithmetic without lite's float16 kernels; the build
    still succeeds (in float32 where the kernels really are off)."""
    real = lite._lite.cpu_features
    monkeypatch.setattr(lite._lite, "cpu_features",
                        lambda: {**real(), "fp16_arithmetic": True, "fp16_kernels": False})
    with pytest.warns(RuntimeWarning, match="do not run here .LITE_CPU_ISA caps them.; the model computes in float32"):
        m = build(model, "preferred_fp16")
    assert m.compute_precision == ("float16" if real()["fp16_kernels"] else "float32")
