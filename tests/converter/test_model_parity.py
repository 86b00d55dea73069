"""Whole models against ONNX Runtime: an MLP, a CNN, a transformer encoder block exported from
PyTorch, dynamic batch and sequence lengths. float32: rtol 1e-4, atol 1e-5."""
from __future__ import annotations

import os

import numpy as np
import pytest

from model_zoo.tiny import mlp, small_cnn
from parity import assert_parity, convert, load, run_ort

rng = np.random.default_rng(7)


def test_mlp():
    assert_parity(mlp(), {"x": rng.standard_normal((3, 64)).astype(np.float32)})


@pytest.mark.parametrize("threads", [1, 2])
def test_cnn_with_residual_and_bn(threads):
    assert_parity(small_cnn(), {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}, threads=threads)


def test_dynamic_batch_runs_at_1_and_4(tmp_path):
    model = small_cnn()
    ms = convert(model, str(tmp_path))
    m = load(ms)
    assert m.get_inputs()[0].shape == [-1, 3, 32, 32]
    for batch in (1, 4, 1):
        x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        got = m.predict([x])[0].get_data_to_numpy()
        np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
        assert m.get_outputs()[0].shape == [batch, 10]


def test_resize_ahead_of_time(tmp_path):
    ms = convert(small_cnn(), str(tmp_path))
    m = load(ms)
    inputs = m.get_inputs()
    m.resize(inputs, [[3, 3, 32, 32]])
    assert inputs[0].shape == [3, 3, 32, 32]
    assert m.get_inputs()[0].shape == [3, 3, 32, 32]
    assert m.get_outputs()[0].shape == [3, 10]
    x = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    inputs[0].set_data_from_numpy(x)
    out = m.predict(inputs)
    assert out[0].shape == [3, 10]


def test_fixed_input_shape_folds_shape_subgraphs(tmp_path, encoder_onnx):
    """With --inputShape the Shape->Gather->Concat->Reshape chains fold away at convert time."""
    path, _ = encoder_onnx
    import converter
    free = converter.Converter().convert("ONNX", path, str(tmp_path / "free"))
    fixed = converter.Converter().convert("ONNX", path, str(tmp_path / "fixed"), input_shape="x:2,6,32;mask:2,1,1,6")
    assert fixed.nodes < free.nodes
    m = load(fixed.output_file)
    assert m.get_inputs()[0].shape == [2, 6, 32]


@pytest.fixture(scope="session")
def encoder_onnx(cache_dir):
    """A pre-norm transformer encoder block (hand-written attention, GELU MLP), exported by PyTorch."""
    torch = pytest.importorskip("torch")
    path = os.path.join(cache_dir, "encoder_block.onnx")
    d = 32
    if not os.path.exists(path):
        from model_zoo.tiny import torch_encoder_block
        block = torch_encoder_block(d=d, heads=4, ff=64)
        x, mask = torch.randn(2, 6, d), torch.zeros(2, 1, 1, 6)
        tmp = path + ".tmp"
        torch.onnx.export(block, (x, mask), tmp, input_names=["x", "mask"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 3: "seq"}}, dynamo=False)
        os.replace(tmp, path)
    return path, d


@pytest.mark.parametrize("batch,seq", [(1, 5), (4, 12), (2, 1)])
def test_transformer_encoder_block_from_pytorch(encoder_onnx, tmp_path, batch, seq):
    path, d = encoder_onnx
    x = rng.standard_normal((batch, seq, d)).astype(np.float32)
    mask = np.where(rng.random((batch, 1, 1, seq)) < 0.2, -1e4, 0.0).astype(np.float32)
    import onnx
    assert_parity(onnx.load(path), {"x": x, "mask": mask}, workdir=str(tmp_path))


def test_transformer_block_same_model_many_shapes(encoder_onnx, tmp_path):
    """One built model serves several sequence lengths (re-inference and re-planning per shape)."""
    path, d = encoder_onnx
    m = load(convert(path, str(tmp_path)), threads=2)
    for batch, seq in [(1, 3), (3, 9), (1, 3), (2, 16)]:
        feeds = {"x": rng.standard_normal((batch, seq, d)).astype(np.float32),
                 "mask": np.zeros((batch, 1, 1, seq), np.float32)}
        got = m.predict(feeds)[0].get_data_to_numpy()
        np.testing.assert_allclose(got, run_ort(path, feeds)[0], rtol=1e-4, atol=1e-5)
