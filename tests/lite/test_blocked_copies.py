"""Copies on channel-blocked tensors (core/channel_blocked_layout.h): Concat and Split along the channels and a
Slice of a channel run read and write [N][C/8][H][W][8], each side in its own layout (runs of whole blocks on a
blocked side, transposed where the two sides differ), and Resize's nearest gather of the last two axes reads and
writes blocks (both or neither), so C2f / CSP blocks and FPN necks stay blocked between their Convs; any other form
(another axis, a cut inside a block, a linear resize) keeps NCHW. Results against ONNX Runtime either way. Also
Softmax over a middle axis (its column blocks), with NaN, infinities and ragged tails."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tempfile

from parity import assert_parity, convert, load
from test_channel_blocked import Graph, blocked_names

rng = np.random.default_rng(23)


def c2f_split(g: Graph, x: str, c: int, name: str) -> str:
    """ultralytics' C2f with one bottleneck, as its ONNX export writes it: 1x1 to 2c, Split into halves, the second
    through two 3x3 Convs (+ the half), the halves and the bottleneck's output concatenated, 1x1 back."""
    y = g.conv(x, c, 2 * c, name=f"{name}_cv1")
    g.nodes.append(helper.make_node("Split", [y, f"{name}_sizes"], [f"{name}_a0", f"{name}_half"], axis=1,
                                    name=f"{name}_split"))
    g.inits.append(helper.make_tensor(f"{name}_sizes", TensorProto.INT64, [2], [c, c]))
    half = f"{name}_half"
    m = g.conv(g.conv(half, c, c, k=3, name=f"{name}_m1"), c, c, k=3, name=f"{name}_m2")
    m = g.op("Add", [half, m], f"{name}_res")
    cat = g.op("Concat", [f"{name}_a0", half, m], f"{name}_cat", axis=1)
    return g.conv(cat, 3 * c, c, name=f"{name}_cv2")


def c2f(g: Graph, x: str, c: int, split: str, name: str) -> str:
    """C2f as model_zoo's YOLO graph writes it (split "slice": the 2c-channel output whole into the Concat, its second
    half cut by one Slice) or as its ONNX export does ("split")."""
    if split != "slice":
        return c2f_split(g, x, c, name)
    y = g.conv(x, c, 2 * c, name=f"{name}_cv1")
    half = _int64_slice(g, y, f"{name}_half", [c], [2 * c], [1])
    m = g.conv(g.conv(half, c, c, k=3, name=f"{name}_m1"), c, c, k=3, name=f"{name}_m2")
    m = g.op("Add", [half, m], f"{name}_res")
    return g.conv(g.op("Concat", [y, m], f"{name}_cat", axis=1), 3 * c, c, name=f"{name}_cv2")


def _int64_slice(g: Graph, x: str, name: str, starts, ends, axes) -> str:
    for key, value in (("s", starts), ("e", ends), ("a", axes)):
        g.inits.append(helper.make_tensor(f"{name}_{key}", TensorProto.INT64, [len(value)], value))
    return g.op("Slice", [x, f"{name}_s", f"{name}_e", f"{name}_a"], name)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("split", ["slice", "split"])
@pytest.mark.parametrize("shape", [(1, 16, 12, 12), (2, 8, 7, 9)], ids=lambda s: "x".join(map(str, s)))
def test_c2f_blocks_stay_blocked(shape, split, threads):
    n, c, h, w = shape
    g = Graph(shape)
    stem = g.conv("x", c, c, k=3, name="stem")
    out = c2f(g, stem, c, split, "b")
    model = g.model([g.conv(out, c, 8, k=3, name="head")])
    # (outputs reach ~200: float32 summation order differs from ORT's by up to ~1e-7 of that)
    assert_parity(model, {"x": rng.uniform(-1, 1, shape).astype(np.float32)}, threads=threads, atol=1e-3)
    blocked = blocked_names(model, threads)
    assert {"b_half", "b_res", "b_cat", "b_cv2"} <= blocked, blocked


@pytest.mark.parametrize("threads", [1, 2])
def test_copies_that_cannot_stay_blocked_keep_nchw(threads):
    shape = (2, 16, 10, 12)
    g = Graph(shape)
    a = g.conv("x", 16, 32, k=3, name="a")
    inside = _int64_slice(g, a, "inside", [4], [28], [1])            # a cut inside a block
    rows = _int64_slice(g, a, "rows", [2, 8], [8, 32], [2, 1])       # rows cut too
    tall = g.op("Concat", [a, a], "tall", axis=2)                     # not the channel axis
    odd = g.conv("x", 16, 4, name="odd")                              # 4 channels cannot be blocked
    mixed = g.op("Concat", [a, odd], "mixed", axis=1)
    outs = [g.conv(inside, 24, 8, k=3, name="o1"), g.conv(rows, 24, 8, k=3, name="o2"),
            g.conv(tall, 32, 8, k=3, name="o3"), g.conv(mixed, 36, 8, k=3, name="o4")]
    model = g.model(outs)
    assert_parity(model, {"x": rng.uniform(-1, 1, shape).astype(np.float32)}, threads=threads)
    assert not {"inside", "rows", "tall", "mixed"} & blocked_names(model, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 16, 9, 7), (2, 24, 4, 17)], ids=lambda s: "x".join(map(str, s)))
def test_copies_between_mixed_layouts(shape, threads):
    """An NCHW-only producer (AveragePool) beside blocked ones: the Concat writes blocks from both, the Split and the
    Slice read blocks and write an NCHW part for an NCHW-only reader, and the blocked parts stay blocked."""
    n, c, h, w = shape
    g = Graph(shape)
    a = g.conv("x", c, c, k=3, name="a")                                              # blocked
    pooled = g.op("AveragePool", ["x"], "pooled", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])  # NCHW
    cat = g.op("Concat", [a, pooled], "cat", axis=1)
    g.nodes.append(helper.make_node("Split", ["cat", "sizes"], ["s0", "s1"], axis=1, name="split"))
    g.inits.append(helper.make_tensor("sizes", TensorProto.INT64, [2], [8, 2 * c - 8]))
    s0_pool = g.op("AveragePool", ["s0"], "s0_pool", kernel_shape=[2, 2], strides=[1, 1])    # reads NCHW
    s1 = g.conv("s1", 2 * c - 8, 8, k=3, name="s1_conv")
    part = _int64_slice(g, cat, "part", [8], [c + 8], [1])
    part_pool = g.op("AveragePool", [part], "part_pool", kernel_shape=[2, 2], strides=[1, 1])
    model = g.model([s0_pool, g.conv(cat, 2 * c, 8, k=3, name="head"), s1, part_pool])
    assert_parity(model, {"x": rng.uniform(-1, 1, shape).astype(np.float32)}, threads=threads, atol=1e-4)
    blocked = blocked_names(model, threads)
    assert {"a", "cat", "s1"} <= blocked, blocked
    assert not {"pooled", "s0", "part"} & blocked, blocked


def _resize(g: Graph, x: str, name: str, mode: str, scales=None, sizes=None, **attrs) -> str:
    roi = f"{name}_roi"
    g.inits.append(helper.make_tensor(roi, TensorProto.FLOAT, [0], []))
    inputs = [x, roi]
    if scales is not None:
        g.inits.append(helper.make_tensor(f"{name}_scales", TensorProto.FLOAT, [4], scales))
        inputs.append(f"{name}_scales")
    else:
        g.inits.append(helper.make_tensor(f"{name}_scales", TensorProto.FLOAT, [0], []))
        g.inits.append(helper.make_tensor(f"{name}_sizes", TensorProto.INT64, [4], sizes))
        inputs += [f"{name}_scales", f"{name}_sizes"]
    return g.op("Resize", inputs, name, mode=mode, **attrs)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("form", ["2x", "sizes 7x5", "half_pixel 3x", "linear"])
def test_nearest_resize_between_blocked_convs(form, threads):
    shape = (2, 16, 6, 5)
    g = Graph(shape)
    a = g.conv("x", 16, 16, k=3, name="a")
    if form == "2x":
        up = _resize(g, a, "up", "nearest", scales=[1, 1, 2, 2], coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")
    elif form == "sizes 7x5":
        up = _resize(g, a, "up", "nearest", sizes=[2, 16, 7, 5])
    elif form == "half_pixel 3x":
        up = _resize(g, a, "up", "nearest", scales=[1, 1, 3, 3], coordinate_transformation_mode="half_pixel",
                     nearest_mode="round_prefer_ceil")
    else:
        up = _resize(g, a, "up", "linear", scales=[1, 1, 2, 2])
    h = {"2x": 12, "sizes 7x5": 7, "half_pixel 3x": 18, "linear": 12}[form]
    w = {"2x": 10, "sizes 7x5": 5, "half_pixel 3x": 15, "linear": 10}[form]
    b = g.conv("x", 16, 8, k=3, name="b")
    b_up = _resize(g, b, "b_up", "nearest", sizes=[2, 8, h, w])
    cat = g.op("Concat", [up, b_up], "cat", axis=1)
    model = g.model([g.conv(cat, 24, 8, k=3, name="head")])
    assert_parity(model, {"x": rng.uniform(-1, 1, shape).astype(np.float32)}, threads=threads)
    blocked = blocked_names(model, threads)
    if form == "linear":   # the linear resize writes NCHW; the Concat converts its run into blocks
        assert "up" not in blocked and {"b_up", "cat"} <= blocked, blocked
    else:
        assert {"up", "b_up", "cat"} <= blocked, blocked


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,axis", [((1, 4, 16, 300), 2), ((2, 16, 4, 3), 1), ((3, 5, 130), 1),
                                        ((2, 7, 1, 65), 1), ((1, 1, 64), 1)])
def test_softmax_over_a_middle_axis(shape, axis, threads):
    x = rng.normal(0, 4, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::37] = np.inf
    flat[5::41] = -np.inf
    flat[11::53] = np.nan
    x[(0,) * (len(shape) - 1)] = -np.inf   # one whole column of -inf somewhere (its output is NaN, as ORT's)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert_parity(model, {"x": x}, threads=threads)


@pytest.mark.skipif(not __import__("lite")._lite.cpu_features()["avx512_bf16"], reason="needs AVX512_BF16")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("split", ["slice", "split"])
def test_c2f_blocks_pass_bf16_rows(split, threads, tmp_path):
    """At preferred_bf16 the channel joins and cuts (Concat, Split, a Slice of a channel run), the shortcut's Add and
    the nearest upsampling between bf16 pixel-major Convs read and write their bf16 rows, so a C2f / FPN chain stays
    bf16 (YOLOv8n at bf16 26.0 -> 24.4 ms with the Add vectorised; 27.7 before); against ONNX Runtime's float32."""
    import lite
    from parity import convert, run_ort
    shape = (2, 16, 12, 10)
    n, c, h, w = shape
    g = Graph(shape)
    stem = g.conv("x", c, c, k=3, name="stem")
    out = c2f(g, stem, c, split, "b")
    up = _resize(g, out, "up", "nearest", scales=[1, 1, 2, 2], coordinate_transformation_mode="asymmetric",
                 nearest_mode="floor")
    side = _resize(g, stem, "side", "nearest", scales=[1, 1, 2, 2], coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")
    model = g.model([g.conv(g.op("Concat", [up, side], "neck", axis=1), 2 * c, 8, k=3, name="head")])
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    ctx.cpu.precision_mode = "preferred_bf16"
    m = lite.Model()
    m.build_from_file(convert(model, str(tmp_path)), lite.ModelType.MINDIR_LITE, ctx)
    got = m.predict({"x": x})[0].get_data_to_numpy()
    want = run_ort(model, {"x": x})[0]
    cos = float(got.ravel() @ want.ravel() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.999 and np.abs(got - want).max() < 0.03 * np.abs(want).max(), cos
    rows = set(m.bf16_pixel_tensors())
    assert {"b_half", "b_res", "b_cat", "up", "side", "neck"} <= rows, rows


@pytest.mark.parametrize("threads", [1, 2])
def test_a_shape_reader_keeps_blocks(threads):
    """torch.onnx's chunk: the Slices' bounds computed from Shape(x) (evaluated at prepare time). Shape reads only the
    shape, so x keeps its channel blocks (YOLOv8's exported C2f blocks had fallen back to NCHW around it)."""
    shape = (1, 16, 10, 12)
    g = Graph(["n", 16, "h", "w"])   # symbolic: the converter cannot fold the Shape away
    a = g.conv("x", 16, 32, k=3, name="a")
    g.inits.append(helper.make_tensor("one", TensorProto.INT64, [1], [1]))
    g.inits.append(helper.make_tensor("two", TensorProto.INT64, [1], [2]))
    g.inits.append(helper.make_tensor("zero", TensorProto.INT64, [1], [0]))
    g.nodes.append(helper.make_node("Shape", [a], ["a_shape"]))
    g.nodes.append(helper.make_node("Gather", ["a_shape", "one"], ["a_channels"], axis=0))
    g.nodes.append(helper.make_node("Div", ["a_channels", "two"], ["half_channels"]))
    g.nodes.append(helper.make_node("Slice", [a, "zero", "half_channels", "one"], ["first"]))
    g.nodes.append(helper.make_node("Slice", [a, "half_channels", "a_channels", "one"], ["second"]))
    out = g.conv(g.op("Concat", [g.conv("first", 16, 16, k=3, name="f"), "second"], "joined", axis=1), 32, 8,
                 k=3, name="head")
    model = g.model([out])
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    assert_parity(model, {"x": x}, threads=threads, atol=1e-4)
    with tempfile.TemporaryDirectory() as tmp:
        m = load(convert(model, tmp), threads)
        m.predict({"x": x})
        assert {"a", "first", "second", "joined"} <= set(m.channel_blocked_tensors())
