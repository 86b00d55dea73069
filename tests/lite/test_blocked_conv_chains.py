"""Seeded random Convs between channel-blocked tensors (core/channel_blocked_layout.h) against ONNX Runtime: a 3x3
Conv that writes blocks feeds the Conv under test (random kernel 1 / 3 / 5, strides, dilation, one-sided pads,
groups from 1 to depthwise, output channels, ReLU or a residual Add), whose output a 1x1 Conv reads before the graph's
output. Each layout decision (which kernel reads or writes blocks) meets every kind of Conv this way: a 1x1
depthwise Conv on blocks once took the blocked pointwise kernel's branch and read the wrong weights."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import convert, load, run_ort


def random_chain(seed: int):
    rng = np.random.default_rng(seed)
    while True:
        C = int(rng.choice([8, 16, 24, 32, 64]))
        H, W = int(rng.integers(3, 20)), int(rng.integers(3, 20))
        k, s, d = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2])), int(rng.choice([1, 1, 2]))
        g = int(rng.choice([v for v in (1, 2, 4, 8, C) if C % v == 0]))
        M = int(rng.choice([C, 2 * C, 8, 16])) if g == 1 else C * int(rng.choice([1, 1, 2]))
        pads = [int(rng.integers(0, k)) for _ in range(4)] if k > 1 else [0, 0, 0, 0]
        oh = (H + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
        ow = (W + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
        if oh > 0 and ow > 0:
            break
    tail = str(rng.choice(["none", "Relu", "residual"]))
    inits = {"w0": rng.uniform(-0.5, 0.5, (C, C, 3, 3)), "b0": rng.uniform(-0.5, 0.5, C),
             "w1": rng.uniform(-0.5, 0.5, (M, C // g, k, k)), "b1": rng.uniform(-0.5, 0.5, M),
             "w2": rng.uniform(-0.5, 0.5, (8, M, 1, 1))}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1", "b1"], ["c"], pads=pads, kernel_shape=[k, k], strides=[s, s],
                              dilations=[d, d], group=g)]
    out = "c"
    if tail == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["cr"]))
        out = "cr"
    elif tail == "residual" and M == C and (oh, ow) == (H, W):
        nodes.append(helper.make_node("Add", ["c", "ar"], ["cs"]))
        out = "cs"
    nodes.append(helper.make_node("Conv", [out, "w2"], ["y"], kernel_shape=[1, 1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, rng.uniform(-1, 1, (1, C, H, W)).astype(np.float32), dict(C=C, H=H, W=W, k=k, s=s, d=d, g=g, M=M,
                                                                          pads=pads, tail=tail)


@pytest.mark.parametrize("seed", range(24))
def test_random_conv_between_blocks(seed):
    model, x, what = random_chain(seed)
    want = run_ort(model, {"x": x})[0]
    with tempfile.TemporaryDirectory() as tmp:
        ms = convert(model, tmp)
        for threads in (1, 2):
            got = load(ms, threads).predict({"x": x})[0].get_data_to_numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()),
                                       err_msg=f"{what}, {threads} thread(s)")


@pytest.mark.parametrize("seed", range(24, 36))
def test_random_conv_between_bf16_rows(seed):
    """The same chains at preferred_bf16: on CPUs with AVX512_BF16 the Convs between bf16 rows (lite's pixel-major
    kernels, its Winograd and depthwise forms, oneDNN's on AMX) against ONNX Runtime's float32, within bf16's error
    (3e-2 of the output's scale: gross mistakes, not roundings)."""
    from test_bf16 import build
    model, x, what = random_chain(seed)
    want = run_ort(model, {"x": x})[0]
    with tempfile.TemporaryDirectory() as tmp:
        ms = convert(model, tmp)
        for threads in (1, 2):
            got = build(ms, "preferred_bf16", threads).predict({"x": x})[0].get_data_to_numpy()
            err = float(np.abs(got - want).max() / np.abs(want).max())
            assert err < 3e-2, (what, threads, err)
