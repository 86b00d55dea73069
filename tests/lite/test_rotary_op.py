"""The RotaryEmbedding operator (ONNX opset 23) against ONNX Runtime and a NumPy reference: 4-D and 3-D inputs,
rotate-half and interleaved pairs, partial rotary dims, tables indexed by position ids or given per batch (batch 1
broadcasting), and clear errors for bad shapes and out-of-range position ids."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.ops import rotary_embedding
from parity import assert_parity, convert, load

rng = np.random.default_rng(5)


def rotary_model(feeds: dict[str, np.ndarray], dynamic: bool = False, **attrs) -> onnx.ModelProto:
    names = ["x", "cos", "sin"] + (["pos"] if "pos" in feeds else [])
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}
    dims = lambda n: [f"{n}{i}" for i in range(feeds[n].ndim)] if dynamic else list(feeds[n].shape)  # noqa: E731
    graph = helper.make_graph([helper.make_node("RotaryEmbedding", names, ["y"], name="rope", **attrs)], "rope",
                              [helper.make_tensor_value_info(n, elem[feeds[n].dtype], dims(n)) for n in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model


def tables(rows, half, batch=None):
    shape = (rows, half) if batch is None else (batch, rows, half)
    angles = rng.uniform(-3, 3, shape).astype(np.float32)
    return np.cos(angles), np.sin(angles)


def case(x_shape, half, positions=None, table_batch=None, max_pos=40):
    b, s = x_shape[0], x_shape[2] if len(x_shape) == 4 else x_shape[1]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if positions:
        feeds["cos"], feeds["sin"] = tables(max_pos, half)
        feeds["pos"] = rng.integers(0, max_pos, (b, s)).astype(np.int64)
    else:
        feeds["cos"], feeds["sin"] = tables(s, half, table_batch or b)
    return feeds


CASES = {
    "half_4d_positions": lambda: (case((2, 4, 7, 16), 8, positions=True), {}),
    "interleaved_4d_positions": lambda: (case((2, 4, 7, 16), 8, positions=True), {"interleaved": 1}),
    "half_3d": lambda: (case((2, 9, 3 * 32), 16), {"num_heads": 3}),
    "interleaved_3d_positions": lambda: (case((1, 5, 2 * 8), 4, positions=True), {"num_heads": 2, "interleaved": 1}),
    "partial_half_4d": lambda: (case((1, 2, 6, 32), 8), {"rotary_embedding_dim": 16}),
    "partial_interleaved_3d": lambda: (case((2, 3, 4 * 24), 6, positions=True),
                                       {"num_heads": 4, "rotary_embedding_dim": 12, "interleaved": 1}),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rotary_matches_onnxruntime(name, threads):
    feeds, attrs = CASES[name]()
    assert_parity(rotary_model(feeds, **attrs), feeds, threads=threads, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rotary_matches_numpy_reference(name, tmp_path):
    feeds, attrs = CASES[name]()
    got = load(convert(rotary_model(feeds, **attrs), str(tmp_path)), 2).predict(feeds)[0].get_data_to_numpy()
    want = rotary_embedding(feeds["x"], feeds["cos"], feeds["sin"], feeds.get("pos"),
                            interleaved=bool(attrs.get("interleaved")), num_heads=attrs.get("num_heads", 0),
                            rotary_embedding_dim=attrs.get("rotary_embedding_dim", 0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    rot = attrs.get("rotary_embedding_dim")
    if rot and feeds["x"].ndim == 4:   # the unrotated tail is copied
        np.testing.assert_array_equal(got[..., rot:], feeds["x"][..., rot:])


def test_batch_one_tables_broadcast_over_the_batch(tmp_path):
    """A lite extension (what the rotary fusion emits): (1, S, rot / 2) tables serve every batch."""
    feeds = case((3, 2, 5, 8), 4, table_batch=1)
    got = load(convert(rotary_model(feeds), str(tmp_path)), 1).predict(feeds)[0].get_data_to_numpy()
    want = rotary_embedding(feeds["x"], np.repeat(feeds["cos"], 3, 0), np.repeat(feeds["sin"], 3, 0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_position_id_outside_the_table_is_a_clear_error(tmp_path):
    feeds = case((1, 2, 4, 8), 4, positions=True, max_pos=10)
    model = load(convert(rotary_model(feeds, dynamic=True), str(tmp_path)), 1)
    feeds["pos"][0, 2] = 10
    with pytest.raises(Exception, match="position id 10 is outside the table's 10 rows"):
        model.predict(feeds)


@pytest.mark.parametrize("bad, match", [
    ({"cos": np.zeros((40, 5), np.float32), "sin": np.zeros((40, 5), np.float32)}, r"cos_cache \[40, 5\].*\(max_position, 4\)"),
    ({"pos": np.zeros((1, 3), np.int64)}, r"position_ids \[1, 3\] must be \(1, 4\)"),
])
def test_bad_shapes_name_the_operand(bad, match, tmp_path):
    feeds = case((1, 2, 4, 8), 4, positions=True)
    model = load(convert(rotary_model(feeds, dynamic=True), str(tmp_path)), 1)
    feeds.update(bad)
    with pytest.raises(Exception, match=match):
        model.predict(feeds)
