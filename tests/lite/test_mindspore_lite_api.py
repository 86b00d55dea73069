"""MindSpore Lite's Python API patterns: inputs looked up by tensor name (and a clear KeyError naming the inputs
there are), and a flat array from np.fromfile given to set_data_from_numpy (reshaped to the input's shape when its
element count matches; a wrong count is refused)."""
from __future__ import annotations

import numpy as np
import pytest

from model_zoo.tiny import small_cnn
from parity import convert, load, run_ort


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    d = tmp_path_factory.mktemp("cnn")
    model = small_cnn()
    return model, load(convert(model, str(d), input_shape=f"{model.graph.input[0].name}:1,3,32,32"))


def test_lookup_by_tensor_name(cnn):
    model, m = cnn
    name = model.graph.input[0].name
    assert m.get_input_by_tensor_name(name).name == name
    out = model.graph.output[0].name
    assert m.get_output_by_tensor_name(out).name == out
    with pytest.raises(KeyError, match=f"no input named 'nope' \\(its inputs: {name}\\)"):
        m.get_input_by_tensor_name("nope")


def test_flat_data_from_a_raw_file(cnn, tmp_path):
    model, m = cnn
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    x.tofile(tmp_path / "input.bin")
    inp = m.get_inputs()[0]
    inp.set_data_from_numpy(np.fromfile(tmp_path / "input.bin", np.float32))
    assert inp.shape == [1, 3, 32, 32]
    got = m.predict([inp])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_ort(model, {model.graph.input[0].name: x})[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="expected rank 4"):
        inp.set_data_from_numpy(np.zeros(100, np.float32))


def test_build_from_buffer(cnn, tmp_path):
    """A model built from its bytes in memory runs as the one built from its file; bytes that are not a model are a
    clear error."""
    import lite
    model, m = cnn
    path = convert(model, str(tmp_path), input_shape=f"{model.graph.input[0].name}:1,3,32,32")
    from_buffer = lite.Model()
    from_buffer.build_from_buffer(open(path, "rb").read())
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(from_buffer.predict([x])[0].get_data_to_numpy(), m.predict([x])[0].get_data_to_numpy())
    with pytest.raises(ValueError, match="invalid .ms file"):
        lite.Model().build_from_buffer(b"not a model at all" * 10)
    with pytest.raises(TypeError, match="bytes-like"):
        lite.Model().build_from_buffer("model.ms")
