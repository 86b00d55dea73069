"""The convolution kernel paths (depthwise, pointwise, im2col + GEMM, fused activation and residual),
across the shapes where vector blocks and tails meet, against ONNX Runtime (rtol 1e-4, atol 1e-5)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(7)


def conv_model(x_shape, w_shape, attrs, activation=None, residual=False, bias=True):
    c_out = w_shape[0]
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, w_shape).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, c_out).astype(np.float32), "b"))
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], name="conv", **attrs)]
    last = "c"
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    if residual:
        nodes.append(helper.make_node("Add", [last, "r"], ["s"], name="residual"))
        graph_inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
        last = "s"
    if activation == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"], name="act"))
    elif activation:
        nodes.append(helper.make_node(activation, [last], ["y"], name="act"))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    graph = helper.make_graph(nodes, "conv", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if residual:   # the residual input takes the convolution's output shape
        inferred = onnx.shape_inference.infer_shapes(model)
        dims = next(v for v in inferred.graph.value_info if v.name == "c").type.tensor_type.shape.dim
        model.graph.input[1].CopyFrom(helper.make_tensor_value_info("r", TensorProto.FLOAT, [d.dim_value for d in dims]))
    return model


def feeds_for(model, x_shape):
    feeds = {"x": rng.uniform(-2, 2, x_shape).astype(np.float32)}
    for i in model.graph.input[1:]:
        feeds[i.name] = rng.uniform(-2, 2, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
    return feeds


DEPTHWISE = [
    # (C, H, W, k, stride, dilation, pads)
    (8, 9, 9, 3, 1, 1, [1, 1, 1, 1]),
    (8, 9, 9, 3, 2, 1, [1, 1, 1, 1]),
    (5, 17, 33, 3, 2, 1, [0, 0, 1, 1]),        # TF "SAME" padding for stride 2: extra row/column at the end
    (4, 12, 40, 5, 1, 1, [2, 2, 2, 2]),        # one block of 4 vectors, then a partial vector
    (3, 8, 56, 3, 2, 1, [0, 0, 1, 1]),         # 28 outputs: 3 full vectors and a partial one, no full block
    (3, 6, 31, 3, 1, 1, [1, 1, 1, 1]),         # 31 outputs: likewise at stride 1
    (2, 4, 64, 3, 1, 1, [1, 1, 1, 1]),         # exactly two blocks
    (4, 11, 23, 5, 2, 1, [2, 2, 2, 2]),
    (3, 14, 14, 7, 1, 1, [3, 3, 3, 3]),        # ConvNeXt's 7x7
    (3, 10, 10, 3, 1, 2, [2, 2, 2, 2]),        # dilation
    (2, 7, 7, 3, 1, 1, [0, 0, 0, 0]),          # no padding, 5x5 output
    (2, 1, 1, 3, 1, 1, [1, 1, 1, 1]),          # 1x1 plane: every tap but the centre is padding
    (3, 6, 70, 3, 3, 1, [1, 2, 0, 1]),         # stride 3, asymmetric pads
    (2, 5, 5, 9, 1, 1, [4, 4, 4, 4]),          # 81 taps: more than the local tap array
    (16, 10, 21, 7, 1, 1, [3, 3, 3, 3]),       # channel blocks: 7x7, rows of 21 = 8 + 8 + 4 + 1 pixels
    (9, 6, 56, 3, 1, 1, [1, 1, 1, 1]),         # channel blocks up to 56-wide rows: one full block + 1 channel
    (16, 7, 7, 3, 2, 1, [0, 0, 1, 1]),         # channel blocks, rows narrower than a vector, padding at the end only
    (16, 5, 7, 3, 1, 1, [0, 0, 0, 0]),         # likewise with no padding: 5-wide output rows
    # channel blocks at stride 2: 5x5, dilation, wide left pads, odd and even widths, a partial channel block
    (16, 23, 37, 5, 2, 1, [2, 2, 2, 2]),
    (8, 20, 30, 3, 2, 2, [2, 3, 2, 1]),
    (12, 15, 17, 3, 2, 1, [1, 1, 1, 1]),
    (16, 28, 56, 7, 2, 1, [3, 3, 3, 3]),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "C{}_{}x{}_k{}_s{}_d{}_p{}".format(*c[:6], "".join(map(str, c[6]))))
def test_depthwise(case):
    c, h, w, k, s, d, pads = case
    model = conv_model((2, c, h, w), (c, 1, k, k), dict(group=c, strides=[s, s], dilations=[d, d], pads=pads))
    assert_parity(model, feeds_for(model, (2, c, h, w)))


@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_channel_multiplier_and_relu6(threads):
    model = conv_model((1, 4, 15, 15), (8, 1, 3, 3), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1]), activation="Clip")
    assert_parity(model, feeds_for(model, (1, 4, 15, 15)), threads=threads)


@pytest.mark.parametrize("activation", [None, "Relu", "Clip", "Sigmoid", "HardSwish"])
@pytest.mark.parametrize("kind", ["pointwise", "pointwise_half", "pointwise_7x7", "3x3", "3x3_s2", "grouped"])
@pytest.mark.parametrize("residual", [False, True])
def test_conv_epilogues(kind, activation, residual):
    # pointwise_half: 72 pixels, the last 8 a full half-width tile (epilogue in registers); 7x7: 49 = 3 x 16 + 1
    shapes = {"pointwise": ((1, 16, 7, 9), (24, 16, 1, 1), {}),
              "pointwise_half": ((1, 16, 8, 9), (13, 16, 1, 1), {}),
              "pointwise_7x7": ((1, 40, 7, 7), (20, 40, 1, 1), {}),
              "3x3": ((1, 8, 10, 11), (20, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
              "3x3_s2": ((1, 8, 13, 13), (12, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
              "grouped": ((1, 8, 9, 9), (8, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1]))}
    x_shape, w_shape, attrs = shapes[kind]
    model = conv_model(x_shape, w_shape, attrs, activation=activation, residual=residual)
    assert_parity(model, feeds_for(model, x_shape), threads=2)


# Rows of 96+ outputs take the direct kernel (6 channels x up to 4 pixel vectors per register tile, padded
# phase-split input): stems, strides, dilation, groups, partial channel blocks and pixel vectors, row ends of 1 to 4
# vectors (112 = 64 + 48, 96 = 64 + 32, 129 = 64 + 64 + 1 on AVX-512), fused epilogues. Under the Intel rules the
# pixel tiles take them (test_pixel_tile_rules_on_any_cpu runs these cases under both rules).
DIRECT = [
    # (x shape, w shape, attrs)
    ((1, 3, 24, 224), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),      # ResNet stem, 112 wide
    ((1, 3, 9, 226), (32, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1])),       # MobileNetV2 stem (SAME)
    ((1, 5, 6, 100), (7, 5, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 7 channels: 6 + 1
    ((2, 4, 5, 101), (6, 2, 3, 3), dict(group=2, pads=[1, 2, 1, 0])),               # groups, odd pads
    ((1, 3, 8, 110), (5, 3, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 2, 7, 300), (4, 2, 5, 5), dict(strides=[3, 3], pads=[2, 2, 2, 2])),
    ((1, 2, 4, 129), (6, 2, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 129: a last tile of 1 pixel
    ((1, 3, 5, 96), (13, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                        # 96: 64 + 32, 13 = 6 + 6 + 1
]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("activation", [None, "Relu", "Clip", "Sigmoid"])
@pytest.mark.parametrize("case", DIRECT, ids=lambda c: "x".join(map(str, c[1])) + "_w" + str(c[0][3]))
def test_direct_convolution(case, activation, residual):
    x_shape, w_shape, attrs = case
    model = conv_model(x_shape, w_shape, attrs, activation=activation, residual=residual)
    assert_parity(model, feeds_for(model, x_shape), threads=2)


# KxK convolutions on rows under 96 outputs take the pixel-tile kernel (6-8 pixels x two vectors of output channels
# per register tile, the height that fits the plane; one input pointer per pixel, zero-padded copy of the input):
# partial channel blocks and pixel tiles (7-pixel tiles with a 5-pixel last one at 117 pixels, 8-pixel ones with a
# 7-pixel last one at 15), tiles spanning rows, dilation, strides, asymmetric or no padding, groups, both loop
# orders (many pixel chunks with small weights; one chunk when the weights are large and the plane small). The
# strided and dilated cases of PIXEL_MAJOR below run on it too.
PIXEL_TILES = [
    ((1, 64, 14, 14), (48, 64, 3, 3), dict(pads=[1, 1, 1, 1])),                     # 196 pixels (64 out: Winograd)
    ((1, 5, 9, 13), (7, 5, 3, 3), dict(pads=[1, 1, 1, 1])),                         # 7 channels, 117 pixels
    ((1, 6, 11, 10), (33, 6, 5, 5), dict(pads=[2, 1, 0, 2])),                       # 33 = 2 blocks + 1
    ((1, 4, 12, 12), (16, 4, 3, 3), dict(dilations=[2, 3], pads=[2, 3, 2, 3])),
    ((1, 3, 8, 9), (5, 3, 3, 3), {}),                                               # no padding: read in place
    ((2, 8, 7, 7), (12, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),                # batch 2, groups
    ((1, 256, 7, 7), (48, 256, 3, 3), dict(pads=[1, 1, 1, 1])),                     # 442 KiB weights: one chunk
    ((1, 2, 3, 1), (3, 2, 3, 1), dict(pads=[1, 0, 1, 0])),                          # a 3-pixel plane
    ((1, 8, 5, 3), (40, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                         # 15 pixels: 8 + 7
    ((1, 24, 56, 55), (40, 24, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),     # stride 2 into 28x28
    ((1, 16, 23, 40), (24, 16, 2, 2), dict(strides=[2, 2])),                        # ConvNeXt's downsampling
    ((1, 128, 56, 56), (128, 128, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # one chunk per thread
    # 256+ NCHW channels: pixel tiles on AMD, pixel-major (up to 196 pixels) or the GEMM (225) on Intel
    ((1, 256, 15, 16), (40, 256, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 256, 30, 30), (24, 256, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
]


# Output rows of 56 or fewer take the channel-blocked depthwise kernel (8 channels per vector, 8x8
# transposes in and out): full and partial channel blocks, planes with and without whole 8-column runs.
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("activation", [None, "Clip", "Sigmoid", "HardSwish"])
@pytest.mark.parametrize("shape", [(20, 14, 14, 1), (24, 14, 15, 2), (17, 7, 7, 1), (16, 56, 56, 2),
                                   (16, 6, 6, 1), (16, 4, 5, 1), (8, 2, 3, 1), (16, 9, 9, 2)],
                         ids=lambda s: "C{}_{}x{}_s{}".format(*s))
def test_depthwise_channel_blocks(shape, activation, residual, threads):
    c, h, w, s = shape
    model = conv_model((1, c, h, w), (c, 1, 3, 3), dict(group=c, strides=[s, s], pads=[1, 1, 1, 1]),
                       activation=activation, residual=residual)
    assert_parity(model, feeds_for(model, (1, c, h, w)), threads=threads)


# 1-D convolutions run as 2-D ones of height 1, so they take the 2-D paths: pixel tiles (stride 1), implicit
# im2col (strided), the direct kernel (96+ outputs), depthwise, pointwise. Whisper's front end is two of these.
CONV1D = [
    ((1, 16, 50), (24, 16, 3), dict(pads=[1, 1])),                           # pixel tiles
    ((2, 16, 50), (24, 16, 3), dict(pads=[1, 1], strides=[2])),              # implicit im2col
    ((1, 8, 300), (16, 8, 3), dict(pads=[1, 1])),                            # direct (300 outputs)
    ((1, 12, 40), (12, 1, 5), dict(pads=[2, 2], group=12)),                  # depthwise
    ((1, 12, 40), (6, 12, 1), {}),                                           # pointwise
    ((1, 6, 33), (8, 3, 3), dict(pads=[2, 0], dilations=[2], group=2)),      # groups, dilation, one-sided pad
    ((1, 64, 120), (48, 64, 3), dict(pads=[1, 1], strides=[2])),             # pixel tiles on AMD, GEMM on Intel
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CONV1D, ids=lambda c: "x".join(map(str, c[1])) + "_" + "_".join(sorted(c[2])))
def test_conv1d_uses_the_2d_kernels(case, threads):
    x_shape, w_shape, attrs = case
    model = conv_model(x_shape, w_shape, attrs, activation="Relu", residual=True)
    assert_parity(model, feeds_for(model, x_shape), threads=threads)


# 3x3 stride-1 layers with 64+ channels in and out and 16+ output tiles run Winograd F(4x4, 3x3): whole and
# partial 4x4 tiles, no / asymmetric padding, output channels that are not whole register tiles, input
# channels over one GEMM depth block (256), a plane large enough to be processed in two chunks of tile rows.
WINOGRAD = [
    ((1, 64, 14, 14), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),       # ResNet-50 stage 3: 16 tiles
    ((2, 64, 17, 19), (72, 64, 3, 3), dict(pads=[1, 1, 1, 1])),       # batch 2, 5x5 tiles with partial edges
    ((1, 64, 20, 21), (64, 64, 3, 3), {}),                            # no padding: 18x19 outputs
    ((1, 80, 16, 16), (64, 80, 3, 3), dict(pads=[2, 1, 0, 2])),       # asymmetric padding: 16x17 outputs
    ((1, 300, 14, 14), (64, 300, 3, 3), dict(pads=[1, 1, 1, 1])),     # 300 input channels: two depth blocks
    ((1, 64, 64, 64), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),       # 16 tile rows: chunks of 14 and 2
    # With two threads each takes whole tile rows (16+ tiles each): 4 + 4 rows with partial tiles, then 16 + 16
    # rows, each thread's part in chunks of 14 and 2.
    ((1, 64, 30, 27), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 64, 128, 64), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("activation", [None, "Relu", "Sigmoid"])
@pytest.mark.parametrize("case", WINOGRAD, ids=lambda c: "x".join(map(str, c[1])) + "_in" + "x".join(map(str, c[0][1:])))
def test_winograd_convolution(case, activation, residual, threads, tmp_path):
    x_shape, w_shape, attrs = case
    model = conv_model(x_shape, w_shape, attrs, residual=residual)
    feeds = feeds_for(model, x_shape)
    # Winograd's transforms (constants up to 8 and 1/24) round differently from direct summation: measured
    # 1-2e-5 of the RMS of the sums (before the activation, which only narrows differences) at most on these
    # layers, where a wrong tap or tile would be O(RMS).
    sums = run_ort(model, feeds)[0].astype(np.float64)
    tolerance = 1e-4 * float(np.sqrt(np.mean(sums ** 2)))
    if activation:
        model.graph.node[-1].op_type = activation   # the same weights, the activation in place of Identity
    got = load(convert(model, str(tmp_path)), threads).predict(feeds)[0].get_data_to_numpy()
    want = run_ort(model, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)


# Small output planes (1x1 up to 64 pixels or 196 with <= 512 outputs; KxK ones at bf16) and 1x1 reductions (at least
# twice the input channels of the outputs) on any plane run pixel-major: the pixels times the pre-packed transposed
# weights, then transposed into NCHW with bias, residual and activation. Strided 1x1 (sampled input), 1x1 read in
# place (the GEMM reads the NCHW input as its transposed A), KxK with padding, dilation and one-sided pads, planes
# that are not whole 8-pixel runs, input channels that are not whole 8-channel bands, batch 2 and an input past one
# GEMM depth block.
PIXEL_MAJOR = [
    ((1, 256, 7, 7), (64, 256, 1, 1), {}),                                             # 1x1 in place, 49 pixels
    ((1, 96, 14, 14), (64, 96, 1, 1), {}),                                             # 1x1, 196 pixels, <= 512 out
    ((2, 40, 14, 14), (32, 40, 1, 1), dict(strides=[2, 2])),                           # sampled 1x1, batch 2
    ((1, 64, 14, 14), (96, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),        # ResNet's stride-2 3x3
    ((1, 300, 9, 9), (32, 300, 3, 3), dict(strides=[2, 2], pads=[1, 0, 0, 1])),        # 2700 taps, one-sided pads
    ((1, 12, 29, 25), (64, 12, 3, 3), dict(strides=[2, 2], dilations=[2, 2], pads=[1, 2, 1, 2])),   # dilated
    ((1, 20, 11, 11), (32, 20, 5, 5), dict(strides=[3, 2], pads=[2, 2, 2, 2])),        # 5x5, unequal strides
    ((1, 128, 40, 37), (32, 128, 1, 1), {}),                                           # a reduction, 1480 pixels
    ((2, 320, 30, 29), (64, 320, 1, 1), {}),                                           # two depth blocks, 870 pixels
    ((1, 96, 50, 49), (32, 96, 1, 1), dict(strides=[2, 2])),                           # sampled reduction, 625 pixels
    ((1, 64, 20, 19), (576, 64, 1, 1), dict(strides=[2, 2])),                          # sampled, 100 pixels, > 512 out
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("activation", [None, "Relu", "Clip", "Sigmoid"])
@pytest.mark.parametrize("case", PIXEL_TILES + PIXEL_MAJOR,
                         ids=lambda c: "x".join(map(str, c[1])) + "_in" + "x".join(map(str, c[0][1:])))
def test_pixel_tile_and_pixel_major_convolution(case, activation, residual, threads):
    x_shape, w_shape, attrs = case
    model = conv_model(x_shape, w_shape, attrs, activation=activation, residual=residual)
    # Sums of up to 2700 products of magnitude ~1 (outputs up to ~100) in another order than ONNX Runtime's:
    # the float32 rounding bound grows with the number of taps.
    taps = int(np.prod(w_shape[1:]))
    assert_parity(model, feeds_for(model, x_shape), threads=threads, atol=1e-6 * taps)


@pytest.mark.skipif(os.environ.get("LITE_CONV_PIXEL_TILES") is not None, reason="already under a forced rule")
@pytest.mark.parametrize("rule", ["all", "intel"])
def test_pixel_tile_rules_on_any_cpu(rule):
    """Which layers take the pixel tiles depends on the CPU's vendor (ConvKernel::PixelTilesTrail, UseDirect):
    LITE_CONV_PIXEL_TILES forces either rule, so both routes of the cases above run on every machine."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", "-p", "no:cacheprovider",
                        __file__, "-k", "(conv1d_uses or pixel_tile_and or direct_convolution) and not Sigmoid and not Clip"],
                       env={**os.environ, "LITE_CONV_PIXEL_TILES": rule}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout
