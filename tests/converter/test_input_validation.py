"""Converter options a user can get wrong are refused with a message naming the mistake, before anything is
written: a negative dim in --inputShape (other than -1 for a dynamic one), an input named twice, an --outputFile that
is a directory (it used to write a hidden '<dir>/.ms'); a model of an opset newer than the converter was checked
against converts with a warning naming its operators."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.api import Converter, FmkType
from converter.frontends.onnx_frontend import NEWEST_CHECKED_OPSET, parse_input_shapes
from converter.ir import ConverterError


def relu_model(path, opset=17):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.parametrize("spec,pattern", [("x:-5,3", r"negative dim\(s\) \[-5\]"), ("x:1,3;x:2,3", "names 'x' twice"),
                                          ("x:1,b", "non-integer dim")])
def test_bad_input_shapes_are_refused(spec, pattern):
    with pytest.raises(ConverterError, match=pattern):
        parse_input_shapes(spec)


def test_dynamic_and_empty_dims_are_accepted():
    assert parse_input_shapes("x:-1,3;y:0,4") == {"x": [-1, 3], "y": [0, 4]}


@pytest.mark.parametrize("as_directory", ["existing", "trailing_separator"])
def test_an_output_directory_is_refused(tmp_path, as_directory):
    model = relu_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    target = str(out) if as_directory == "existing" else str(tmp_path / "new") + os.sep
    with pytest.raises(ConverterError, match="names a directory"):
        Converter().convert(FmkType.ONNX, model, target)
    assert os.listdir(out) == [] and not os.path.exists(tmp_path / "new")


def test_a_newer_opset_converts_with_a_warning(tmp_path):
    model = relu_model(tmp_path / "m.onnx", NEWEST_CHECKED_OPSET + 1)
    with pytest.warns(UserWarning, match=f"opset {NEWEST_CHECKED_OPSET + 1} is newer .* Relu"):
        path = Converter().convert(FmkType.ONNX, model, str(tmp_path / "m"), input_shape="x:2,3").output_file
    import lite
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    x = np.array([[-1, np.nan, 2]] * 2, np.float32)
    np.testing.assert_array_equal(m.predict({"x": x})[0].get_data_to_numpy(), np.array([[0, np.nan, 2]] * 2))
