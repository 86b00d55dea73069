"""The channel-blocked activation layout (NCHW8c, core/channel_blocked_layout.h): which tensors take it, and
results against ONNX Runtime (rtol 1e-4, atol 1e-5) where they do and where a kernel forces NCHW back."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(11)


class Graph:
    """A small ONNX graph builder: convolutions with seeded weights, named outputs."""

    def __init__(self, x_shape):
        self.x_shape = list(x_shape)
        self.nodes, self.inits = [], []

    def _const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(self, x, c_in, c_out, k=1, stride=1, group=1, name=None, clip=False, pads=None):
        name = name or f"conv{len(self.nodes)}"
        w = self._const(f"{name}_w", rng.uniform(-0.5, 0.5, (c_out, c_in // group, k, k)))
        b = self._const(f"{name}_b", rng.uniform(-0.5, 0.5, c_out))
        pads = [k // 2] * 4 if pads is None else pads
        self.nodes.append(helper.make_node("Conv", [x, w, b], [name], name=name, group=group, strides=[stride] * 2,
                                           pads=pads, kernel_shape=[k, k]))
        if not clip:
            return name
        lo, hi = self._const(f"{name}_lo", 0.0), self._const(f"{name}_hi", 6.0)
        self.nodes.append(helper.make_node("Clip", [name, lo, hi], [f"{name}_act"], name=f"{name}_act"))
        return f"{name}_act"

    def op(self, op_type, inputs, name, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def model(self, outputs):
        graph = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.x_shape)],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                                  self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def inverted_residual(g, x, c, expand, stride, name):
    """MobileNetV2's block: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 project, + input when it fits."""
    h = g.conv(x, c, c * expand, name=f"{name}_expand", clip=True)
    h = g.conv(h, c * expand, c * expand, k=3, stride=stride, group=c * expand, name=f"{name}_dw", clip=True)
    h = g.conv(h, c * expand, c, name=f"{name}_project")
    return g.op("Add", [h, x], f"{name}_add") if stride == 1 else h


def blocked_names(model, threads=1):
    with tempfile.TemporaryDirectory() as tmp:
        m = load(convert(model, tmp), threads)
        m.predict([rng.uniform(-1, 1, model.graph.input[0].type.tensor_type.shape.dim[0].dim_value and
                               [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)])
        return set(m.channel_blocked_tensors())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 16, 14, 14), (2, 24, 9, 11), (1, 16, 7, 7), (1, 8, 20, 3), (1, 8, 13, 1),
                                   (1, 8, 1, 1), (1, 8, 5, 5)],
                         ids=lambda s: "x".join(map(str, s)))
def test_mobilenet_blocks_run_blocked_and_match(shape, threads):
    n, c, h, w = shape
    g = Graph(shape)
    stem = g.conv("x", c, c, name="stem", clip=True)            # NCHW input: the GEMM, so an NCHW output
    a = inverted_residual(g, stem, c, 6, 1, "b1")               # its Add fuses into the projection (NCHW)
    b = inverted_residual(g, a, c, 6, 2, "b2")                  # stride 2: no residual
    head = g.conv(b, c, 40, name="head", clip=True)             # 40 channels: a tile with 8 of 16 left
    model = g.model([head])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    # depthwise -> pointwise -> pointwise: blocked; an expansion reading NCHW writes NCHW; b1's projection, whose
    # residual (the stem's output) is NCHW, and the graph output stay NCHW.
    assert blocked_names(model, threads) == {"b2_dw_act", "b2_project"}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c", [16, 24, 40])
@pytest.mark.parametrize("relu", [False, True])
def test_projection_with_residual_stays_blocked(c, relu, threads):
    """Blocks with a residual read and write blocks: the projection adds its block's input (the last block's
    output, blocked) in the tile, before the activation when one follows the Add."""
    shape = (2, c, 11, 9)
    g = Graph(shape)
    stem = g.conv("x", c, c, name="stem", clip=True)
    a = inverted_residual(g, stem, c, 2, 2, "b1")                    # stride 2: no residual, writes blocks
    b = inverted_residual(g, a, c, 3, 1, "b2")                       # residual: b1's blocked projection
    if relu:
        b = g.op("Relu", [b], "b2_relu")
    d = inverted_residual(g, b, c, 2, 1, "b3")
    model = g.model([g.conv(d, c, 8, name="head")])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    blocked = blocked_names(model, threads)
    assert {"b1_project", "b2_relu" if relu else "b2_add", "b3_add"} <= blocked, blocked


def test_graph_outputs_and_foreign_readers_stay_nchw():
    g = Graph((1, 16, 12, 12))
    a = g.conv("x", 16, 16, k=3, group=16, name="dw1", clip=True)    # depthwise: can write blocks
    b = g.conv(a, 16, 32, name="pw1")                                 # and a pointwise Conv read them
    pooled = g.op("AveragePool", [b], "pool", kernel_shape=[2, 2], strides=[2, 2])   # knows only NCHW
    c = g.conv(pooled, 32, 32, k=3, group=32, name="dw2")
    d = g.conv(c, 32, 16, name="pw2")
    model = g.model([d, a])                                           # but a is also a graph output
    assert_parity(model, {"x": rng.uniform(-2, 2, (1, 16, 12, 12)).astype(np.float32)})
    assert blocked_names(model) == {"dw2"}


@pytest.mark.parametrize("threads", [1, 2])
def test_elementwise_between_blocked_kernels(threads):
    g = Graph((2, 16, 10, 10))
    a = g.conv("x", 16, 16, k=3, group=16, name="dw1")
    b = g.conv("x", 16, 16, k=5, group=16, name="dw2")
    prod = g.op("Mul", [a, b], "prod")                                # same shapes: blocked operands
    sig = g.op("Sigmoid", [prod], "sig")                              # unary: any layout
    e = g.conv(sig, 16, 24, name="pw1")                               # 24 channels: 16 + 8
    f = g.conv(e, 24, 24, k=3, stride=2, group=24, name="dw3")
    hs = g.op("HardSwish", [f], "hs")
    out = g.conv(hs, 24, 8, name="pw2")
    model = g.model([out])
    assert_parity(model, {"x": rng.uniform(-2, 2, (2, 16, 10, 10)).astype(np.float32)}, threads=threads)
    assert {"dw1", "dw2", "prod", "sig", "pw1"} <= blocked_names(model, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 2], "strides": [2, 2]},
                                   {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [0, 1, 2, 0], "ceil_mode": 1}],
                         ids=["3x3s2p1", "2x2s2", "3x2 asymmetric ceil"])
def test_pools_on_blocked_tensors(attrs, threads):
    """MaxPool (2-D, no dilation) reads and writes blocks; GlobalAveragePool and GlobalMaxPool read them."""
    g = Graph((2, 16, 15, 13))
    a = g.conv("x", 16, 16, k=3, group=16, name="dw1")
    pooled = g.op("MaxPool", [a], "pool", **attrs)
    b = g.conv(pooled, 16, 16, k=3, group=16, name="dw2")
    avg = g.op("GlobalAveragePool", [b], "avg")
    mx = g.op("GlobalMaxPool", [b], "max")
    model = g.model([avg, mx])
    assert_parity(model, {"x": rng.uniform(-2, 2, (2, 16, 15, 13)).astype(np.float32)}, threads=threads)
    assert {"dw1", "pool", "dw2"} <= blocked_names(model, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
def test_one_by_one_depthwise_on_blocks(stride, threads):
    """A 1x1 depthwise Conv reading blocks (its producer, another, writes them) runs the depthwise kernel: it had taken
    the blocked pointwise kernel's branch, which read M x C weights from a buffer of M (every output wrong)."""
    c = 16
    g = Graph((1, c, 9, 40))
    w = g._const("w", rng.uniform(0.5, 1.5, (c, 1, 1, 1)))
    b = g._const("b", rng.uniform(-1, 1, c))
    g.nodes.append(helper.make_node("Conv", ["x", w, b], ["d0"], name="d0", group=c, kernel_shape=[1, 1]))
    g.nodes.append(helper.make_node("Conv", ["d0", w, b], ["d1"], name="d1", group=c, kernel_shape=[1, 1],
                                    strides=[stride] * 2))
    model = g.model(["d1"])
    assert_parity(model, {"x": rng.uniform(-1, 1, (1, c, 9, 40)).astype(np.float32)}, threads=threads)
    assert "d0" in blocked_names(model, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("strides", [[2, 2], [1, 1]])
def test_blocked_max_pool_propagates_nan(strides, threads):
    """On channel blocks as on NCHW planes (test_operators' test_maxpool_propagates_nan), a NaN anywhere in a window
    makes that output NaN (NumPy's max semantics), in the fused two- / three-row pass and the three-column one alike;
    windows without one keep their max. Unit 1x1 depthwise Convs around the pool keep the values exact and the pool
    on blocks."""
    c = 16
    x = rng.uniform(-1, 1, (1, c, 9, 40)).astype(np.float32)
    x[0, 0, 4, 17] = np.nan
    x[0, 9, 0, 0] = np.nan
    x[0, 15, 8, 39] = np.nan
    x[0, 3, 2, 5] = -np.inf
    g = Graph(x.shape)
    one, zero = g._const("one", np.ones((c, 1, 1, 1))), g._const("zero", np.zeros(c))
    g.nodes.append(helper.make_node("Conv", ["x", one, zero], ["dw1"], name="dw1", group=c, kernel_shape=[1, 1]))
    pooled = g.op("MaxPool", ["dw1"], "pool", kernel_shape=[3, 3], strides=strides, pads=[1, 1, 1, 1])
    g.nodes.append(helper.make_node("Conv", [pooled, one, zero], ["y"], name="dw2", group=c, kernel_shape=[1, 1]))
    model = g.model(["y"])
    with tempfile.TemporaryDirectory() as tmp:
        m = load(convert(model, tmp), threads)
        got = m.predict({"x": x})[0].get_data_to_numpy()
        assert "pool" in set(m.channel_blocked_tensors())
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    sh, sw = strides
    want = np.empty_like(got)
    for i in range(got.shape[2]):
        for j in range(got.shape[3]):
            want[:, :, i, j] = padded[:, :, i * sh:i * sh + 3, j * sw:j * sw + 3].max(axis=(2, 3))
    assert np.isnan(got).sum() > 0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("hw", [(1, 1), (3, 3), (4, 4), (7, 7), (5, 9)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_blocked_global_pools_nan_inf_and_tails(hw, threads):
    """GlobalAveragePool / GlobalMaxPool on channel blocks reduce four pixels at a time in separate chains, then the
    area's last 1-3 pixels: every plane size leaves a different tail. NaN anywhere in a plane makes both outputs NaN,
    -inf is a value (the max of an all -inf plane, a mean of -inf), and the means match NumPy's to float rounding."""
    c = 16
    x = rng.uniform(-1, 1, (2, c, *hw)).astype(np.float32)
    area = hw[0] * hw[1]
    x[0, 1].flat[0] = np.nan               # a first pixel
    x[1, 9].flat[area - 1] = np.nan        # a last one (in the tail where area % 4)
    x[0, 4].flat[area // 2] = -np.inf
    x[1, 12] = -np.inf                     # a whole plane
    g = Graph(x.shape)
    one, zero = g._const("one", np.ones((c, 1, 1, 1))), g._const("zero", np.zeros(c))
    g.nodes.append(helper.make_node("Conv", ["x", one, zero], ["dw"], name="dw", group=c, kernel_shape=[1, 1]))
    g.op("GlobalAveragePool", ["dw"], "avg")
    g.op("GlobalMaxPool", ["dw"], "max")
    model = g.model(["avg", "max"])
    with tempfile.TemporaryDirectory() as tmp:
        m = load(convert(model, tmp), threads)
        avg, mx = (t.get_data_to_numpy() for t in m.predict({"x": x}))
        assert "dw" in set(m.channel_blocked_tensors())
    with np.errstate(invalid="ignore"):
        want_avg, want_max = x.mean(axis=(2, 3), keepdims=True), x.max(axis=(2, 3), keepdims=True)
    for got, want in ((avg, want_avg), (mx, want_max)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want_avg)
    np.testing.assert_allclose(avg[finite], want_avg[finite], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mx[~np.isnan(mx)], want_max[~np.isnan(want_max)])


def test_broadcasts_and_odd_channel_counts_stay_nchw():
    g = Graph((1, 12, 10, 10))                                        # 12 channels: not a multiple of 8
    a = g.conv("x", 12, 12, k=3, group=12, name="dw1")
    b = g.conv(a, 12, 16, name="pw1")
    c = g.conv(b, 16, 16, k=3, group=16, name="dw2")                  # 16 channels: could be blocked, but
    scale = g._const("scale", rng.uniform(-1, 1, (1, 16, 1, 1)))
    d = g.op("Mul", [c, scale], "scaled")                             # a per-channel broadcast reads it
    out = g.conv(d, 16, 8, name="pw2")
    model = g.model([out])
    assert_parity(model, {"x": rng.uniform(-2, 2, (1, 12, 10, 10)).astype(np.float32)})
    assert blocked_names(model) == set()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 8, 29, 31), (2, 16, 12, 12)], ids=lambda s: "x".join(map(str, s)))
def test_strided_depthwise_reads_blocked_input(shape, threads):
    """Two stride-2 blocks in a row: the second one's depthwise reads a blocked expansion, odd and even widths."""
    n, c, h, w = shape
    g = Graph(shape)
    stem = g.conv("x", c, c, name="stem", clip=True)
    a = inverted_residual(g, stem, c, 2, 2, "b1")
    b = inverted_residual(g, a, c, 3, 2, "b2")
    model = g.model([g.conv(b, c, 16, name="head")])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    assert {"b2_expand_act", "b2_dw_act"} <= blocked_names(model, threads)


def _depthwise(g, x, c, name, kernel, stride, dilation, pads):
    w = g._const(f"{name}_w", rng.uniform(-0.5, 0.5, (c, 1, *kernel)))
    b = g._const(f"{name}_b", rng.uniform(-0.5, 0.5, c))
    g.nodes.append(helper.make_node("Conv", [x, w, b], [name], name=name, group=c, kernel_shape=list(kernel),
                                    strides=list(stride), dilations=list(dilation), pads=list(pads)))
    return name


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kernel,stride,dilation,pads,hw", [
    ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (16, 30)),   # 16-pixel chunks, then 14 (even) interior pixels
    ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (15, 17)),   # an odd interior count: the last pixel alone
    ((3, 3), (2, 2), (1, 1), (0, 0, 1, 1), (17, 20)),   # stride 2, padding only bottom/right
    ((5, 5), (1, 1), (1, 1), (2, 2, 2, 2), (14, 19)),   # two edge columns per side
    ((5, 5), (2, 2), (1, 1), (2, 2, 2, 2), (21, 21)),
    ((3, 3), (1, 1), (2, 2), (2, 2, 2, 2), (18, 16)),   # dilated
    ((3, 5), (1, 2), (1, 1), (1, 2, 0, 1), (16, 23)),   # rectangular filter, unequal strides and pads
    ((3, 3), (1, 1), (1, 1), (0, 0, 0, 0), (14, 14)),   # no padding: no edge columns
    ((7, 15), (1, 1), (1, 1), (3, 7, 3, 7), (16, 14)),  # as wide as the row: every column an edge
    ((3, 3), (3, 3), (1, 1), (1, 1, 1, 1), (28, 29)),   # stride 3
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_depthwise_reads_wide_blocked_input_in_place(kernel, stride, dilation, pads, hw, threads):
    """A depthwise Conv whose blocked input is 14+ pixels wide reads it in place (no zero-padded copy): taps past
    the top and bottom read a zero row, those past the left and right edges are left out pixel by pixel."""
    shape = (2, 16, *hw)
    g = Graph(shape)
    a = g.conv("x", 16, 16, k=3, group=16, name="dw1", clip=True)   # writes blocks
    b = _depthwise(g, a, 16, "dw2", kernel, stride, dilation, pads)  # reads them in place
    model = g.model([g.conv(b, 16, 8, name="pw")])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    assert {"dw1_act", "dw2"} <= blocked_names(model, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
def test_projection_writes_nchw_with_an_nchw_residual(relu, threads):
    """A projection reading blocks whose output is a graph output and whose residual is the graph input: the
    residual is added in the transposing copy, then the activation."""
    shape = (2, 24, 10, 7)
    g = Graph(shape)
    a = g.conv("x", 24, 24, k=3, group=24, name="dw1", clip=True)   # writes blocks
    b = g.conv(a, 24, 24, name="project")
    y = g.op("Add", [b, "x"], "sum")
    if relu:
        y = g.op("Relu", [y], "out")
    model = g.model([y])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    assert blocked_names(model, threads) == {"dw1_act"}


def assert_close_to_ort(model, x, threads, rms_tolerance=1e-4):
    """Against ONNX Runtime within rms_tolerance of the outputs' RMS: Winograd's transforms round differently from
    direct summation (1-2e-5 of the RMS measured, see test_conv_kernels), a wrong tap, tile or channel is O(RMS)."""
    with tempfile.TemporaryDirectory() as tmp:
        got = [t.get_data_to_numpy() for t in load(convert(model, tmp), threads).predict({"x": x})]
    for g_, w_ in zip(got, run_ort(model, {"x": x})):
        assert g_.shape == w_.shape
        np.testing.assert_allclose(g_, w_, rtol=0, atol=rms_tolerance * float(np.sqrt(np.mean(w_.astype(np.float64) ** 2))))


def bottleneck(g, x, c_in, mid, c_out, stride, name):
    """ResNet's block: 1x1 reduce + ReLU, 3x3 at the stride + ReLU, 1x1 expand, + the input (or its 1x1 projection
    at the stride where the shape changes), ReLU."""
    h = g.op("Relu", [g.conv(x, c_in, mid, name=f"{name}_reduce")], f"{name}_reduce_act")
    h = g.op("Relu", [g.conv(h, mid, mid, k=3, stride=stride, name=f"{name}_conv")], f"{name}_conv_act")
    h = g.conv(h, mid, c_out, name=f"{name}_expand")
    shortcut = x if stride == 1 and c_in == c_out else g.conv(x, c_in, c_out, stride=stride, name=f"{name}_shortcut")
    return g.op("Relu", [g.op("Add", [h, shortcut], f"{name}_add")], f"{name}_out")


@pytest.mark.parametrize("threads", [1, 2])
def test_resnet_runs_blocked_from_the_pool_to_the_global_pool(threads):
    """ResNet-50's shape in float32: the stem (pixel tiles here, NCHW input) writes blocks, the max pool reads them,
    Winograd (3x3 stride 1, 64 channels) and pixel-tile (3x3 stride 2) Convs read and write them, the strided 1x1
    shortcut samples them for the blocked pointwise kernel, the residuals are added blocked, the global pool
    reads them: every activation between the stem and the global pool is blocked."""
    shape = (1, 3, 64, 60)
    g = Graph(shape)
    stem = g.op("Relu", [g.conv("x", 3, 16, k=7, stride=2, name="stem")], "stem_act")      # 32x30
    pooled = g.op("MaxPool", [stem], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])   # 16x15
    a = bottleneck(g, pooled, 16, 64, 64, 1, "b1")     # Winograd 64 -> 64 on 16x15: 16 tiles
    b = bottleneck(g, a, 64, 64, 64, 1, "b2")          # the residual: b1's blocked output
    c = bottleneck(g, b, 64, 32, 128, 2, "b3")         # 3x3 stride 2, strided shortcut
    model = g.model([g.op("GlobalAveragePool", [c], "gap")])
    assert_close_to_ort(model, rng.uniform(-1, 1, shape).astype(np.float32), threads)
    blocked = blocked_names(model, threads)
    expected = {"stem_act", "pool"} | {f"{b}_{t}" for b in ("b1", "b2", "b3") for t in ("reduce_act", "conv_act", "out")}
    expected |= {"b1_shortcut", "b3_shortcut"}
    assert expected <= blocked, expected - blocked


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 64, 16, 15), (2, 64, 50, 5), (1, 64, 28, 28), (1, 64, 14, 14)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layouts", ["blocked", "blocked+residual", "blocked in", "blocked out"])
def test_winograd_reads_and_writes_either_layout(shape, layouts, threads):
    """A blocked input is transposed row by row before the column split; a blocked output is stored 8 channels at a
    time with the epilogue. Rows narrower than 8 pixels (5), 16 tiles in 4 rows, 28x28 at two threads (whole tile
    rows each), 14x14 at two threads (the steps split: input and output channels by blocks)."""
    c = shape[1]
    g = Graph(shape)
    src = g.conv("x", c, c, k=3, group=c, name="dw_in") if layouts != "blocked out" else "x"
    y = g.conv(src, c, c, k=3, name="wino")
    if layouts == "blocked+residual":
        y = g.op("Add", [y, src], "sum")
    y = g.op("Relu", [y], "act")
    out = g.conv(y, c, c, k=3, group=c, name="dw_out") if layouts != "blocked in" else y
    model = g.model([out])
    assert_close_to_ort(model, rng.uniform(-1, 1, shape).astype(np.float32), threads)
    expected = ({"dw_in"} if src == "dw_in" else set()) | ({"act"} if out != y else set())
    assert blocked_names(model, threads) == expected


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,stride,pads,hw", [(3, 2, [1, 1, 1, 1], (15, 14)), (3, 1, [1, 1, 1, 1], (7, 7)),
                                              (2, 2, [0, 0, 0, 0], (12, 10)), (3, 2, [0, 1, 1, 0], (9, 11))],
                         ids=["3x3s2", "3x3s1 7x7", "2x2s2 unpadded", "3x3s2 one-sided"])
@pytest.mark.parametrize("layouts", ["blocked", "blocked+residual", "blocked in", "blocked out"])
def test_pixel_tiles_read_and_write_either_layout(k, stride, pads, hw, layouts, threads):
    """The pixel-tile kernel (KxK Convs not on Winograd or the direct kernel): a blocked input changes its tap
    offsets and padded copy, a blocked output is stored 8 channels of a pixel at a time; 40 output channels leave
    a register tile of 32 with 8."""
    shape = (2, 16, *hw)
    g = Graph(shape)
    src = g.conv("x", 16, 16, k=3, group=16, name="dw_in") if layouts != "blocked out" else "x"
    y = g.conv(src, 16, 40, k=k, stride=stride, pads=pads, name="tiles")
    if layouts == "blocked+residual":   # a residual of the output's shape, blocked: a strided depthwise of x
        oh, ow = [(n + pads[i] + pads[i + 2] - k) // stride + 1 for i, n in enumerate(hw)]
        r = g.conv("x", 16, 40, name="widen")
        r = g.conv(r, 40, 40, k=k, stride=stride, group=40, pads=pads, name="dw_res")
        y = g.op("Add", [y, r], "sum")
    y = g.op("Relu", [y], "act")
    out = g.conv(y, 40, 40, k=3, group=40, name="dw_out") if layouts != "blocked in" else y
    model = g.model([out])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    blocked = blocked_names(model, threads)
    assert ("dw_in" in blocked) == (src == "dw_in") and ("act" in blocked) == (out != y), blocked


# Blocked in and out, 8 | C and 64 | M: the wide tiles where cpu_features()["conv_wide_tiles"] (6 pixels x 64
# channels, the depth in chunks of input blocks with the sums carried between them). (c, m, k, stride, pads,
# dilation, hw): tiles that span output rows, 3 and 5 input blocks (a last chunk of one), under 6 pixels in all,
# one-sided padding, dilation, 5x5, an unpadded 2x2, two 64-channel groups, a plane of more tiles than one run.
WIDE_TILES = [
    (16, 64, 3, 2, [1, 1, 1, 1], 1, (15, 14)),
    (24, 128, 3, 1, [1, 1, 1, 1], 1, (7, 7)),
    (8, 64, 2, 2, [0, 0, 0, 0], 1, (12, 10)),
    (40, 64, 3, 2, [0, 1, 1, 0], 1, (9, 11)),
    (16, 64, 3, 1, [2, 2, 2, 2], 2, (9, 9)),
    (16, 128, 3, 2, [1, 1, 1, 1], 1, (4, 4)),
    (16, 64, 5, 1, [2, 2, 2, 2], 1, (6, 6)),
    (24, 64, 3, 1, [1, 1, 1, 1], 1, (36, 37)),   # 1332 pixels: 222 tiles, runs of 192 and 30
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act", ["Relu", "Clip", "Sigmoid", None])
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("case", WIDE_TILES, ids=lambda c: f"{c[0]}to{c[1]}_k{c[2]}s{c[3]}d{c[5]}_{c[6][0]}x{c[6][1]}")
def test_wide_tiles_on_blocked_layers(case, residual, act, threads):
    c, m, k, stride, pads, dilation, hw = case
    shape = (2, c, *hw)
    g = Graph(shape)
    src = g.conv("x", c, c, k=3, group=c, name="dw_in")
    w = g._const("wide_w", rng.uniform(-0.5, 0.5, (m, c, k, k)))
    b = g._const("wide_b", rng.uniform(-0.5, 0.5, m))
    y = g.op("Conv", [src, w, b], "wide", strides=[stride] * 2, pads=pads, kernel_shape=[k, k],
             dilations=[dilation] * 2)
    if residual:   # a blocked residual of the output's shape: a strided depthwise Conv of a 1x1 one
        r = g.conv(src, c, m, name="widen")
        r = g.op("Conv", [r, g._const("dw_res_w", rng.uniform(-0.5, 0.5, (m, 1, k, k)))], "dw_res", group=m,
                 strides=[stride] * 2, pads=pads, kernel_shape=[k, k], dilations=[dilation] * 2)
        y = g.op("Add", [y, r], "sum")
    if act == "Clip":
        y = g.op("Clip", [y, g._const("lo", 0.0), g._const("hi", 6.0)], "act")
    elif act:
        y = g.op(act, [y], "act")
    out = g.conv(y, m, m, k=3, group=m, name="dw_out")
    model = g.model([out])
    taps = c * k * k
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads, atol=1e-6 * taps)
    blocked = blocked_names(model, threads)
    assert "dw_in" in blocked and y in blocked, blocked


@pytest.mark.skipif(os.environ.get("LITE_CONV_WIDE_TILES") is not None, reason="already under a forced choice")
@pytest.mark.parametrize("wide", ["0", "1"])
def test_wide_tiles_forced_either_way(wide):
    """LITE_CONV_WIDE_TILES picks the wide tiles (on AVX-512) or the two-vector ones on any CPU: both routes of the
    cases above run on every AVX-512 machine whatever its vendor's default."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider",
                        __file__, "-k", "wide_tiles_on_blocked and (Relu or None)"],
                       env={**os.environ, "LITE_CONV_WIDE_TILES": wide}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("stride,hw", [(2, (14, 14)), (2, (13, 9)), (3, (12, 16))], ids=str)
@pytest.mark.parametrize("out_blocked", [True, False])
def test_strided_pointwise_samples_blocked_input(stride, hw, out_blocked, threads):
    """A strided 1x1 Conv on a blocked input: the sampled pixels copied for the blocked pointwise kernel, its
    output blocked (with a blocked residual) or NCHW."""
    shape = (2, 16, *hw)
    g = Graph(shape)
    a = g.conv("x", 16, 16, k=3, group=16, name="dw_in")
    y = g.conv(a, 16, 24, stride=stride, name="shortcut")
    if out_blocked:
        r = g.conv(g.conv(a, 16, 24, name="widen"), 24, 24, k=1, stride=stride, name="sampled")
        y = g.op("Relu", [g.op("Add", [y, r], "sum")], "act")
        y = g.conv(y, 24, 24, k=3, group=24, name="dw_out")
    model = g.model([y])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    blocked = blocked_names(model, threads)
    assert "dw_in" in blocked and ("act" in blocked) == out_blocked, blocked


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(2, 16, 15, 13), (1, 8, 7, 5)], ids=lambda s: "x".join(map(str, s)))
def test_max_pool_writes_blocks_from_nchw(shape, threads):
    """A max pool reading an NCHW tensor (the graph input) writes blocks for a depthwise Conv: pooled 8 planes at a
    time, then transposed (a plane of 12 pixels: one whole 8-pixel group and an overlapping one; 3x2: narrower than
    8)."""
    g = Graph(shape)
    pooled = g.op("MaxPool", ["x"], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = g.model([g.conv(pooled, shape[1], shape[1], k=3, group=shape[1], name="dw")])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    assert blocked_names(model, threads) == {"pool"}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c_out,act", [(32, "Clip"), (16, "Relu"), (40, "HardSwish"), (24, None)])
def test_direct_stem_writes_blocks(c_out, act, threads):
    """A stem on the direct kernel (rows of 96+ outputs, few taps) writes blocks for the depthwise Conv after it: 24
    channels of a row at a time (4 tiles of 6) transposed into three blocks, the last group 8 or 16 channels; ReLU
    and ReLU6 in the tiles, other activations on the blocked rows after."""
    shape = (1, 3, 194, 200)                                         # 97 x 100 outputs
    g = Graph(shape)
    stem = g.conv("x", 3, c_out, k=3, stride=2, name="stem", clip=act == "Clip")
    if act not in (None, "Clip"):
        stem = g.op(act, [stem], "stem_act")
    model = g.model([g.conv(stem, c_out, c_out, k=3, group=c_out, name="dw")])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    assert blocked_names(model, threads) == {"stem" if act is None else "stem_act"}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c", [24, 32])
@pytest.mark.parametrize("stride,pads,hw", [(1, (1, 1, 1, 1), (7, 7)), (1, (1, 1, 1, 1), (14, 13)),
                                            (2, (1, 1, 1, 1), (14, 14)), (2, (0, 0, 1, 1), (16, 11)),
                                            (1, (0, 0, 0, 0), (5, 9)), (2, (1, 1, 1, 1), (3, 2))],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("act", ["Clip", "HardSwish", None])
def test_depthwise_on_small_blocked_planes(c, stride, pads, hw, act, threads):
    """3x3 depthwise Convs on rows of up to 16 input pixels between blocked tensors (AVX-512: two blocks per vector
    in a padded copy, rows in strips of up to 8 pixels): a last pair with one block (24 channels), stride 2, one-sided
    and no padding, a row shorter than a strip, ReLU6 in registers and HardSwish after."""
    shape = (2, c, *hw)
    g = Graph(shape)
    a = g.conv("x", c, c, k=3, group=c, name="dw_in")                  # writes blocks
    b = _depthwise(g, a, c, "dw", (3, 3), (stride, stride), (1, 1), pads)
    if act == "Clip":
        lo, hi = g._const("lo", 0.0), g._const("hi", 6.0)
        b = g.op("Clip", [b, lo, hi], "dw_act")
    elif act:
        b = g.op(act, [b], "dw_act")
    model = g.model([g.conv(b, c, 8, name="pw")])
    assert_parity(model, {"x": rng.uniform(-2, 2, shape).astype(np.float32)}, threads=threads)
    assert {"dw_in", "dw" if act is None else "dw_act"} <= blocked_names(model, threads)
