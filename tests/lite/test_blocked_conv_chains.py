"""Seeded random Convs between channel-blocked tensors (core/channel_blocked_layout.h) against ONNX Runtime: a 3x3
Conv that writes blocks feeds the Conv under test (random kernel 1 / 3 / 5, strides, dilation, one-sided pads,
groups from 1 to depthwise, output channels, ReLU or a residual Add), whose output a 1x1 Conv reads before the graph's
output. Each layout decision (which kernel reads or writes blocks) meets every kind of Conv this way: a 1x1
depthwise Conv on blocks once took the blocked pointwise kernel's branch and read the wrong weights."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from model_zoo.tiny import conv_chain as random_chain
from parity import convert, load, run_ort


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
