"""Every supported operator on its own, against ONNX Runtime (float32: rtol 1e-4, atol 1e-5), with
broadcasting and edge cases. Graph inputs are fed at run time; initializers become constants."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_parity

rng = np.random.default_rng(1234)
NP2ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
           np.bool_: TensorProto.BOOL, np.uint8: TensorProto.UINT8, np.uint32: TensorProto.UINT32,
           np.uint64: TensorProto.UINT64, np.int8: TensorProto.INT8, np.int16: TensorProto.INT16,
           np.uint16: TensorProto.UINT16, np.float64: TensorProto.DOUBLE}


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def i64(*values):
    return np.array(values, dtype=np.int64)


def single(op, feeds=None, consts=None, attrs=None, opset=17, n_out=1, inputs=None, **kw):
    """One-node model. feeds: graph inputs (name -> array); consts: initializers (name -> array);
    inputs: node input order (defaults to feeds then consts; '' for omitted)."""
    feeds, consts, attrs = feeds or {}, consts or {}, attrs or {}
    inputs = inputs if inputs is not None else list(feeds) + list(consts)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, inputs, outs, name=f"{op.lower()}_node", **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, NP2ONNX[v.dtype.type], list(v.shape)) for k, v in feeds.items()],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    # Output types come from ONNX's own inference (ONNX Runtime needs them declared).
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for o in model.graph.output:   # function ops ONNX cannot infer (GroupNormalization): same type as input 0
        if not o.type.tensor_type.elem_type:
            o.type.tensor_type.elem_type = NP2ONNX[next(iter({**feeds, **consts}.values())).dtype.type]
    return model, feeds


CASES = {
    # --- broadcasting binary ops
    "add_bcast_last": lambda: single("Add", {"a": f32(2, 3, 4), "b": f32(4)}),
    "add_bcast_middle": lambda: single("Add", {"a": f32(2, 1, 4), "b": f32(3, 1)}),
    "add_scalar_const": lambda: single("Add", {"a": f32(2, 3)}, {"b": np.array(1.5, np.float32)}),
    "sub_bcast_first": lambda: single("Sub", {"a": f32(1, 3), "b": f32(5, 3)}),
    "mul_rank_mismatch": lambda: single("Mul", {"a": f32(2, 3, 4, 5), "b": f32(3, 1, 5)}),
    "div": lambda: single("Div", {"a": f32(3, 4), "b": f32(3, 4, lo=0.5, hi=2.0)}),
    "div_int64": lambda: single("Div", {"a": i64(7, 9, 12, 100)}, {"b": i64(2, 3, 5, 7)}),
    "add_int64": lambda: single("Add", {"a": i64(1, 2, 3)}, {"b": i64(10)}),
    "mul_int32": lambda: single("Mul", {"a": np.arange(6, dtype=np.int32).reshape(2, 3)},
                                {"b": np.array([2], np.int32)}),
    "pow": lambda: single("Pow", {"a": f32(3, 4, lo=0.1, hi=3.0), "b": f32(4, lo=-1.0, hi=2.0)}),
    "pow_square": lambda: single("Pow", {"a": f32(3, 4)}, {"b": np.array(2.0, np.float32)}),
    "pow_int_exponent": lambda: single("Pow", {"a": f32(5, lo=0.5, hi=2.0)}, {"b": np.array(3, np.int64)}),
    "equal_int64": lambda: single("Equal", {"a": i64(1, 2, 3, 4)}, {"b": i64(2)}),
    "equal_float_bcast": lambda: single("Equal", {"a": np.array([[1, 2], [3, 4]], np.float32),
                                                  "b": np.array([1, 4], np.float32)}),
    "where_bcast": lambda: single("Where", {"c": rng.random((2, 1, 4)) > 0.5, "x": f32(3, 4), "y": f32(1)}),
    "where_int64": lambda: single("Where", {"c": np.array([True, False, True]), "x": i64(1, 2, 3),
                                            "y": i64(-1, -2, -3)}),
    # --- unary
    "relu": lambda: single("Relu", {"x": f32(2, 3, 4)}),
    "sigmoid": lambda: single("Sigmoid", {"x": f32(2, 7, lo=-8, hi=8)}),
    "tanh": lambda: single("Tanh", {"x": f32(2, 7, lo=-4, hi=4)}),
    "hardswish": lambda: single("HardSwish", {"x": f32(4, 9, lo=-5, hi=5)}),
    "leakyrelu": lambda: single("LeakyRelu", {"x": f32(3, 5)}, attrs={"alpha": 0.2}),
    "leakyrelu_default": lambda: single("LeakyRelu", {"x": f32(3, 5)}),
    "sqrt": lambda: single("Sqrt", {"x": f32(3, 5, lo=0.0, hi=4.0)}),
    "reciprocal": lambda: single("Reciprocal", {"x": f32(3, 5, lo=0.5, hi=4.0)}),
    "neg": lambda: single("Neg", {"x": f32(3, 5)}),
    "neg_int64": lambda: single("Neg", {"x": i64(1, -2, 3)}),
    "exp": lambda: single("Exp", {"x": f32(3, 5)}),
    "erf": lambda: single("Erf", {"x": f32(3, 5, lo=-3, hi=3)}),
    "clip_min_max": lambda: single("Clip", {"x": f32(4, 5)}, {"lo": np.array(-0.5, np.float32),
                                                            "hi": np.array(0.7, np.float32)}),
    "clip_min_only": lambda: single("Clip", {"x": f32(4, 5)}, {"lo": np.array(0.0, np.float32)}),
    "clip_max_only": lambda: single("Clip", {"x": f32(4, 5)}, {"hi": np.array(0.3, np.float32)},
                                    inputs=["x", "", "hi"]),
    "clip_runtime_bounds": lambda: single("Clip", {"x": f32(4, 5), "lo": np.array(-1.0, np.float32),
                                                   "hi": np.array(1.0, np.float32)}),
    "clip_int64": lambda: single("Clip", {"x": i64(-5, 0, 5)}, {"lo": np.array(-1, np.int64),
                                                              "hi": np.array(2, np.int64)}),
    # --- matmul / gemm
    "matmul_2d": lambda: single("MatMul", {"a": f32(5, 7), "b": f32(7, 3)}),
    "matmul_large": lambda: single("MatMul", {"a": f32(67, 300, lo=-0.3, hi=0.3), "b": f32(300, 45, lo=-0.3, hi=0.3)}),
    "matmul_batched": lambda: single("MatMul", {"a": f32(2, 3, 4), "b": f32(2, 4, 5)}),
    "matmul_bcast": lambda: single("MatMul", {"a": f32(2, 1, 3, 4), "b": f32(5, 4, 6)}),
    "matmul_const_weight": lambda: single("MatMul", {"a": f32(3, 2, 8)}, {"w": f32(8, 16)}),
    "matmul_vec_mat": lambda: single("MatMul", {"a": f32(4), "b": f32(4, 3)}),
    "matmul_mat_vec": lambda: single("MatMul", {"a": f32(2, 3, 4), "b": f32(4)}),
    "matmul_vec_vec": lambda: single("MatMul", {"a": f32(4), "b": f32(4)}),
    "gemm_bias_vec": lambda: single("Gemm", {"a": f32(4, 6)}, {"b": f32(6, 5), "c": f32(5)}),
    "gemm_trans": lambda: single("Gemm", {"a": f32(6, 4)}, {"b": f32(5, 6), "c": f32(4, 5)},
                                 attrs={"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    "gemm_col_bias": lambda: single("Gemm", {"a": f32(4, 6)}, {"b": f32(6, 5), "c": f32(4, 1)}),
    "gemm_scalar_c": lambda: single("Gemm", {"a": f32(4, 6)}, {"b": f32(6, 5), "c": np.array(0.3, np.float32)}),
    "gemm_no_c": lambda: single("Gemm", {"a": f32(4, 6)}, {"b": f32(6, 5)}),
    # --- convolution
    "conv_basic": lambda: single("Conv", {"x": f32(2, 3, 9, 9)}, {"w": f32(4, 3, 3, 3), "b": f32(4)}),
    "conv_pads_stride": lambda: single("Conv", {"x": f32(1, 3, 10, 11)}, {"w": f32(5, 3, 3, 2)},
                                       attrs={"pads": [1, 0, 2, 1], "strides": [2, 3]}),
    "conv_dilation": lambda: single("Conv", {"x": f32(1, 2, 12, 12)}, {"w": f32(3, 2, 3, 3)},
                                    attrs={"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "conv_groups": lambda: single("Conv", {"x": f32(1, 4, 8, 8)}, {"w": f32(6, 2, 3, 3), "b": f32(6)},
                                  attrs={"group": 2, "pads": [1, 1, 1, 1]}),
    "conv_depthwise": lambda: single("Conv", {"x": f32(2, 6, 9, 9)}, {"w": f32(6, 1, 3, 3), "b": f32(6)},
                                     attrs={"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "conv_pointwise": lambda: single("Conv", {"x": f32(2, 8, 5, 5)}, {"w": f32(4, 8, 1, 1)}),
    "conv_same_upper": lambda: single("Conv", {"x": f32(1, 2, 7, 8)}, {"w": f32(3, 2, 3, 3)},
                                      attrs={"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "conv_same_lower": lambda: single("Conv", {"x": f32(1, 2, 7, 8)}, {"w": f32(3, 2, 4, 4)},
                                      attrs={"auto_pad": "SAME_LOWER"}),
    "conv_valid": lambda: single("Conv", {"x": f32(1, 2, 7, 8)}, {"w": f32(3, 2, 3, 3)},
                                 attrs={"auto_pad": "VALID"}),
    "conv_1d": lambda: single("Conv", {"x": f32(2, 3, 20)}, {"w": f32(4, 3, 5)}, attrs={"pads": [2, 1],
                                                                                        "strides": [2]}),
    "conv_3d": lambda: single("Conv", {"x": f32(1, 2, 5, 6, 7)}, {"w": f32(3, 2, 3, 3, 3)},
                              attrs={"pads": [1, 1, 1, 1, 1, 1]}),
    # 3-D: the implicit im2col with depth taps (strides, dilations, asymmetric pads, groups, batch 2), the explicit
    # column path of a runtime weight, a video VAE's stride-2 downsampler
    "conv_3d_strided_dilated_groups": lambda: single("Conv", {"x": f32(2, 4, 7, 9, 10)}, {"w": f32(6, 2, 3, 2, 3)},
                                                     attrs={"group": 2, "strides": [2, 1, 2], "dilations": [1, 2, 1],
                                                            "pads": [1, 0, 2, 0, 1, 1]}),
    "conv_3d_runtime_weight": lambda: single("Conv", {"x": f32(1, 3, 4, 6, 5), "w": f32(2, 3, 2, 3, 3)},
                                             attrs={"strides": [1, 2, 1], "pads": [1, 1, 0, 0, 1, 2]}),
    "conv_3d_downsample": lambda: single("Conv", {"x": f32(1, 3, 5, 8, 8)}, {"w": f32(4, 3, 3, 3, 3)},
                                         attrs={"strides": [2, 2, 2]}),
    "conv_runtime_weight": lambda: single("Conv", {"x": f32(1, 2, 6, 6), "w": f32(3, 2, 3, 3)}),
    # --- normalisation and softmax
    "batchnorm": lambda: single("BatchNormalization", {"x": f32(2, 3, 4, 5)},
                                {"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, lo=0.5, hi=2)},
                                attrs={"epsilon": 1e-3}),
    "batchnorm_2d": lambda: single("BatchNormalization", {"x": f32(4, 3)},
                                   {"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, lo=0.5, hi=2)}),
    "softmax_last": lambda: single("Softmax", {"x": f32(2, 3, 7, lo=-5, hi=5)}),
    "softmax_axis1": lambda: single("Softmax", {"x": f32(2, 3, 7)}, attrs={"axis": 1}),
    "softmax_legacy_coerce": lambda: single("Softmax", {"x": f32(2, 3, 4)}, attrs={"axis": 1}, opset=11),
    "layernorm_last": lambda: single("LayerNormalization", {"x": f32(2, 5, 16)}, {"s": f32(16), "b": f32(16)}),
    "layernorm_axis1": lambda: single("LayerNormalization", {"x": f32(2, 3, 4)}, {"s": f32(3, 4)},
                                      attrs={"axis": 1, "epsilon": 1e-3}),
    # rows of whole 64-value runs (BERT's 768), 16-value runs and a tail (100), a tail alone (7); offset rows
    "layernorm_768": lambda: single("LayerNormalization", {"x": f32(3, 768, lo=4, hi=6)}, {"s": f32(768), "b": f32(768)}),
    "layernorm_100_no_bias": lambda: single("LayerNormalization", {"x": f32(4, 100)}, {"s": f32(100)}),
    "layernorm_7": lambda: single("LayerNormalization", {"x": f32(5, 7)}, {"s": f32(7), "b": f32(7)}),
    "rmsnorm_200": lambda: single("RMSNormalization", {"x": f32(3, 200)}, {"s": f32(200)}, opset=23),
    "reducemean_attr": lambda: single("ReduceMean", {"x": f32(2, 3, 4)}, attrs={"axes": [1]}, opset=13),
    "reducemean_input_axes": lambda: single("ReduceMean", {"x": f32(2, 3, 4)}, {"axes": i64(-1)}, opset=18),
    "reducemean_no_keepdims": lambda: single("ReduceMean", {"x": f32(2, 3, 4, 5)}, {"axes": i64(0, 2)},
                                             attrs={"keepdims": 0}, opset=18),
    "reducemean_all": lambda: single("ReduceMean", {"x": f32(2, 3, 4)}, opset=18),
    "reducemean_noop": lambda: single("ReduceMean", {"x": f32(2, 3)}, attrs={"noop_with_empty_axes": 1},
                                      opset=18),
    # --- pooling
    "maxpool": lambda: single("MaxPool", {"x": f32(2, 3, 9, 9)}, attrs={"kernel_shape": [3, 3], "strides": [2, 2]}),
    "maxpool_pads_ceil": lambda: single("MaxPool", {"x": f32(1, 2, 10, 10)}, attrs={
        "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "maxpool_dilation": lambda: single("MaxPool", {"x": f32(1, 2, 10, 10)}, attrs={
        "kernel_shape": [2, 2], "dilations": [2, 2]}),
    "maxpool_same_upper": lambda: single("MaxPool", {"x": f32(1, 2, 7, 7)}, attrs={
        "kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "maxpool_1d": lambda: single("MaxPool", {"x": f32(2, 3, 11)}, attrs={"kernel_shape": [3], "strides": [2]}),
    # rows long enough for the vectorised row combine and strided column passes, odd widths for their tails
    "maxpool_wide_s2": lambda: single("MaxPool", {"x": f32(1, 3, 37, 45)}, attrs={
        "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "maxpool_wide_s3": lambda: single("MaxPool", {"x": f32(1, 2, 20, 50)}, attrs={
        "kernel_shape": [4, 3], "strides": [3, 3], "pads": [0, 2, 1, 0]}),
    # stride 2 at float32: rows padded with -inf, 8 outputs per vector step (one-sided and wide pads, ceil mode past
    # the right edge, a 2x2 window with no padding, 5-wide windows)
    "maxpool_s2_rows": lambda: single("MaxPool", {"x": f32(2, 3, 30, 113)}, attrs={
        "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 2], "ceil_mode": 1}),
    "maxpool_s2_k2": lambda: single("MaxPool", {"x": f32(1, 4, 16, 64)}, attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
    "maxpool_s2_k5": lambda: single("MaxPool", {"x": f32(1, 2, 21, 52)}, attrs={
        "kernel_shape": [5, 5], "strides": [2, 2], "pads": [2, 4, 2, 4]}),
    "avgpool_wide_s1": lambda: single("AveragePool", {"x": f32(1, 2, 19, 41)}, attrs={
        "kernel_shape": [3, 5], "pads": [1, 2, 1, 2]}),
    "avgpool_exclude_pad": lambda: single("AveragePool", {"x": f32(1, 2, 8, 8)}, attrs={
        "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "avgpool_include_pad": lambda: single("AveragePool", {"x": f32(1, 2, 8, 8)}, attrs={
        "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "avgpool_ceil": lambda: single("AveragePool", {"x": f32(1, 2, 9, 9)}, attrs={
        "kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "avgpool_3d": lambda: single("AveragePool", {"x": f32(1, 2, 4, 6, 6)}, attrs={"kernel_shape": [2, 2, 2]}),
    "globalavgpool": lambda: single("GlobalAveragePool", {"x": f32(2, 5, 7, 6)}),
    "globalavgpool_1d": lambda: single("GlobalAveragePool", {"x": f32(2, 5, 7)}),
    # --- shape and data movement
    "reshape_zero_minus1": lambda: single("Reshape", {"x": f32(2, 3, 4)}, {"s": i64(0, -1)}),
    "reshape_allowzero_empty": lambda: single("Reshape", {"x": f32(0, 3)}, {"s": i64(3, 0)},
                                              attrs={"allowzero": 1}, opset=14),
    "reshape_runtime_shape": lambda: single("Reshape", {"x": f32(2, 3, 4), "s": i64(4, 6)}),
    "flatten_axis0": lambda: single("Flatten", {"x": f32(2, 3, 4)}, attrs={"axis": 0}),
    "flatten_axis2": lambda: single("Flatten", {"x": f32(2, 3, 4, 5)}, attrs={"axis": 2}),
    "flatten_neg": lambda: single("Flatten", {"x": f32(2, 3, 4)}, attrs={"axis": -1}),
    "transpose_perm": lambda: single("Transpose", {"x": f32(2, 3, 4, 5)}, attrs={"perm": [0, 2, 3, 1]}),
    "transpose_default": lambda: single("Transpose", {"x": f32(2, 3, 4)}),
    "transpose_int64": lambda: single("Transpose", {"x": np.arange(6, dtype=np.int64).reshape(2, 3)}),
    "concat_neg_axis": lambda: single("Concat", {"a": f32(2, 3, 4), "b": f32(2, 3, 1), "c": f32(2, 3, 2)},
                                      attrs={"axis": -1}),
    "concat_empty_part": lambda: single("Concat", {"a": f32(0, 3), "b": f32(2, 3)}, attrs={"axis": 0}),
    "slice_basic": lambda: single("Slice", {"x": f32(5, 6)}, {"s": i64(1, 0), "e": i64(4, 6)}),
    "slice_axes_steps": lambda: single("Slice", {"x": f32(5, 6, 7)}, {"s": i64(0, 1), "e": i64(7, 6),
                                                                       "a": i64(-1, 1), "st": i64(2, 2)}),
    "slice_negative_step": lambda: single("Slice", {"x": f32(5, 6)}, {"s": i64(-1), "e": i64(-100), "a": i64(1),
                                                                       "st": i64(-1)}),
    "slice_clamped": lambda: single("Slice", {"x": f32(5, 6)}, {"s": i64(-100), "e": i64(1 << 62), "a": i64(0)}),
    "slice_empty": lambda: single("Slice", {"x": f32(5, 6)}, {"s": i64(4), "e": i64(2), "a": i64(0)}),
    "gather_axis0": lambda: single("Gather", {"x": f32(5, 4)}, {"i": i64(0, 4, -1, 2)}),
    "gather_axis1_2d_idx": lambda: single("Gather", {"x": f32(3, 5, 2)}, {"i": np.array([[0, 1], [-1, 3]], np.int64)},
                                          attrs={"axis": 1}),
    "gather_scalar_idx": lambda: single("Gather", {"x": f32(3, 5)}, {"i": np.array(-2, np.int64)}),
    "gather_runtime_idx_int32": lambda: single("Gather", {"x": f32(6, 3), "i": np.array([5, 0, 2], np.int32)}),
    "squeeze_axes_input": lambda: single("Squeeze", {"x": f32(1, 3, 1, 4)}, {"a": i64(-2)}),
    "squeeze_all": lambda: single("Squeeze", {"x": f32(1, 3, 1, 4)}),
    "squeeze_attr_opset11": lambda: single("Squeeze", {"x": f32(1, 3, 1, 4)}, attrs={"axes": [0]}, opset=11),
    "unsqueeze": lambda: single("Unsqueeze", {"x": f32(3, 4)}, {"a": i64(0, -1)}),
    "unsqueeze_attr_opset11": lambda: single("Unsqueeze", {"x": f32(3, 4)}, attrs={"axes": [1]}, opset=11),
    "split_equal": lambda: single("Split", {"x": f32(6, 4)}, n_out=3),
    "split_sizes": lambda: single("Split", {"x": f32(2, 7)}, {"s": i64(2, 5)}, attrs={"axis": -1}, n_out=2),
    "split_attr_opset11": lambda: single("Split", {"x": f32(2, 7)}, attrs={"axis": 1, "split": [3, 4]}, n_out=2,
                                         opset=11),
    "split_num_outputs_uneven": lambda: single("Split", {"x": f32(7, 2)}, attrs={"num_outputs": 3}, n_out=3,
                                               opset=18),
    "cast_float_to_int64": lambda: single("Cast", {"x": f32(3, 4, lo=-5, hi=5)}, attrs={"to": TensorProto.INT64}),
    "cast_int64_to_float": lambda: single("Cast", {"x": i64(1, -2, 3)}, attrs={"to": TensorProto.FLOAT}),
    "cast_float_to_bool": lambda: single("Cast", {"x": np.array([0, 1.5, -2, 0], np.float32)},
                                         attrs={"to": TensorProto.BOOL}),
    "cast_bool_to_float": lambda: single("Cast", {"x": np.array([True, False])}, attrs={"to": TensorProto.FLOAT}),
    "cast_int32_to_int64": lambda: single("Cast", {"x": np.array([7, -3], np.int32)}, attrs={"to": TensorProto.INT64}),
    "shape": lambda: single("Shape", {"x": f32(2, 3, 4)}),
    "shape_start_end": lambda: single("Shape", {"x": f32(2, 3, 4, 5)}, attrs={"start": 1, "end": -1}, opset=15),
    "expand": lambda: single("Expand", {"x": f32(3, 1)}, {"s": i64(2, 3, 4)}),
    "expand_smaller_shape": lambda: single("Expand", {"x": f32(2, 3)}, {"s": i64(3)}),
}


def b(*shape):
    return rng.random(shape) > 0.5


CASES.update({
    # --- issue 3: more elementwise math
    **{f"unary_{op.lower()}": (lambda op=op, lo=lo, hi=hi: single(op, {"x": f32(3, 17, lo=lo, hi=hi)}, opset=18))
       for op, lo, hi in [
        ("Abs", -3, 3), ("Sign", -3, 3), ("Ceil", -3, 3), ("Floor", -3, 3), ("Log", 0.01, 5), ("Sin", -6, 6),
        ("Cos", -6, 6), ("Tan", -1.4, 1.4), ("Atan", -5, 5), ("Asin", -1, 1), ("Acos", -1, 1), ("Sinh", -4, 4),
        ("Cosh", -4, 4), ("Softplus", -30, 30), ("Softsign", -5, 5), ("Mish", -8, 8), ("Elu", -4, 4),
        ("Selu", -4, 4), ("Celu", -4, 4), ("HardSigmoid", -5, 5), ("ThresholdedRelu", -3, 3)]},
    "round_half_even": lambda: single("Round", {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, 2.51], np.float32)}),
    "abs_int64": lambda: single("Abs", {"x": i64(-3, 0, 7)}),
    "sign_int32": lambda: single("Sign", {"x": np.array([-3, 0, 7], np.int32)}),
    "elu_alpha": lambda: single("Elu", {"x": f32(4, 5)}, attrs={"alpha": 0.5}),
    "selu_params": lambda: single("Selu", {"x": f32(4, 5)}, attrs={"alpha": 1.5, "gamma": 1.1}),
    "celu_alpha": lambda: single("Celu", {"x": f32(4, 5)}, attrs={"alpha": 2.0}),
    "hardsigmoid_params": lambda: single("HardSigmoid", {"x": f32(4, 5, lo=-6, hi=6)}, attrs={"alpha": 0.3, "beta": 0.4}),
    "thresholdedrelu_alpha": lambda: single("ThresholdedRelu", {"x": f32(4, 5)}, attrs={"alpha": 0.5}),
    "gelu_erf": lambda: single("Gelu", {"x": f32(4, 9, lo=-5, hi=5)}, opset=20),
    "gelu_tanh": lambda: single("Gelu", {"x": f32(4, 9, lo=-5, hi=5)}, attrs={"approximate": "tanh"}, opset=20),
    "isnan": lambda: single("IsNaN", {"x": np.array([0, np.nan, np.inf, -1], np.float32)}),
    "isinf": lambda: single("IsInf", {"x": np.array([0, np.nan, np.inf, -np.inf], np.float32)}),
    "isinf_positive_only": lambda: single("IsInf", {"x": np.array([np.inf, -np.inf, 1], np.float32)},
                                          attrs={"detect_negative": 0}),
    "not": lambda: single("Not", {"x": b(3, 4)}),
    "prelu_channel_slope": lambda: single("PRelu", {"x": f32(2, 3, 4, 4)}, {"s": f32(3, 1, 1)}),
    "prelu_scalar_slope": lambda: single("PRelu", {"x": f32(2, 5)}, {"s": np.array([0.1], np.float32)}),
    "mod_int_python_sign": lambda: single("Mod", {"a": i64(7, -7, 7, -7, 0)}, {"b": i64(3, 3, -3, -3, 5)}),
    "mod_fmod_float": lambda: single("Mod", {"a": f32(3, 4, lo=-10, hi=10)}, {"b": f32(4, lo=1, hi=3)},
                                     attrs={"fmod": 1}),
    "mod_fmod_int32": lambda: single("Mod", {"a": np.array([7, -7], np.int32)}, {"b": np.array([3, 3], np.int32)},
                                     attrs={"fmod": 1}),
    "and_bcast": lambda: single("And", {"a": b(2, 3), "b": b(3)}),
    "or": lambda: single("Or", {"a": b(2, 3), "b": b(2, 3)}),
    "xor": lambda: single("Xor", {"a": b(2, 3), "b": b(1, 3)}),
    "less": lambda: single("Less", {"a": f32(3, 4), "b": f32(4)}),
    "less_or_equal_int": lambda: single("LessOrEqual", {"a": i64(1, 2, 3)}, {"b": i64(2)}),
    "greater": lambda: single("Greater", {"a": f32(3, 4), "b": f32(3, 1)}),
    "greater_or_equal_int32": lambda: single("GreaterOrEqual", {"a": np.array([1, 2, 3], np.int32),
                                                                "b": np.array([2, 2, 2], np.int32)}),
    "bitshift_left_uint8": lambda: single("BitShift", {"a": np.array([1, 2, 255], np.uint8)},
                                          {"b": np.array([1, 3, 1], np.uint8)}, attrs={"direction": "LEFT"}),
    "bitshift_right_uint32": lambda: single("BitShift", {"a": np.array([1024, 7], np.uint32)},
                                            {"b": np.array([3], np.uint32)}, attrs={"direction": "RIGHT"}),
    "max_variadic_bcast": lambda: single("Max", {"a": f32(3, 1), "b": f32(1, 4), "c": f32(2, 3, 4)}),
    "min_two": lambda: single("Min", {"a": f32(3, 4), "b": f32(4)}),
    "min_int64": lambda: single("Min", {"a": i64(1, 5, 3), "b": i64(4, 2, 3)}),
    "sum_variadic": lambda: single("Sum", {"a": f32(2, 3), "b": f32(3), "c": f32(2, 1)}),
    "sum_single": lambda: single("Sum", {"a": f32(2, 3)}),
    "mean_variadic": lambda: single("Mean", {"a": f32(2, 3), "b": f32(2, 3), "c": f32(1, 3)}),
    # --- reductions
    **{f"{op.lower()}_axes": (lambda op=op: single(op, {"x": f32(2, 3, 4, lo=0.1, hi=2)}, {"axes": i64(0, 2)}, opset=18))
       for op in ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
                  "ReduceSumSquare"]},
    **{f"{op.lower()}_attr_axes_no_keepdims": (lambda op=op: single(op, {"x": f32(2, 3, 4)}, attrs={"axes": [1],
                                                                                                 "keepdims": 0}))
       for op in ["ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSumExp"]},
    "reducesum_opset13_input_axes": lambda: single("ReduceSum", {"x": f32(2, 3, 4)}, {"axes": i64(-1)}, opset=13),
    "reducesum_opset11_attr": lambda: single("ReduceSum", {"x": f32(2, 3, 4)}, attrs={"axes": [0, 1]}, opset=11),
    "reducesum_all": lambda: single("ReduceSum", {"x": f32(2, 3, 4)}, opset=13),
    "reducesum_int64": lambda: single("ReduceSum", {"x": np.arange(12, dtype=np.int64).reshape(3, 4)}, {"axes": i64(1)}),
    "reducemax_int32_all": lambda: single("ReduceMax", {"x": np.array([[3, -1], [7, 2]], np.int32)}, opset=18),
    "reducelogsumexp_large": lambda: single("ReduceLogSumExp", {"x": f32(3, 5, lo=50, hi=90)}, {"axes": i64(1)},
                                            opset=18),
    "argmax": lambda: single("ArgMax", {"x": f32(3, 4, 5)}, attrs={"axis": 1}),
    "argmin_no_keepdims": lambda: single("ArgMin", {"x": f32(3, 4, 5)}, attrs={"axis": -1, "keepdims": 0}),
    "argmax_last_index_ties": lambda: single("ArgMax", {"x": np.array([[1, 3, 3], [2, 2, 1]], np.float32)},
                                             attrs={"axis": 1, "select_last_index": 1}),
    "argmin_int64": lambda: single("ArgMin", {"x": i64(4, 1, 1, 7)}),
})

CASES.update({
    # --- generation and indexing
    "range_float": lambda: single("Range", {}, {"s": np.array(1.0, np.float32), "l": np.array(5.5, np.float32),
                                                 "d": np.array(0.5, np.float32)}, inputs=["s", "l", "d"]),
    "range_runtime_int64": lambda: single("Range", {"s": np.array(10, np.int64), "l": np.array(-3, np.int64),
                                                    "d": np.array(-4, np.int64)}),
    "constantofshape_value": lambda: single("ConstantOfShape", {}, {"s": i64(2, 3)},
                                            attrs={"value": numpy_helper.from_array(np.array([7], np.int64))}),
    "constantofshape_default": lambda: single("ConstantOfShape", {"s": i64(3, 1)}),
    "tile": lambda: single("Tile", {"x": f32(2, 3)}, {"r": i64(2, 3)}),
    "tile_int64_3d": lambda: single("Tile", {"x": np.arange(6, dtype=np.int64).reshape(1, 2, 3)}, {"r": i64(2, 1, 2)}),
    "trilu_upper": lambda: single("Trilu", {"x": f32(2, 4, 5)}),
    "trilu_lower_k": lambda: single("Trilu", {"x": f32(4, 5)}, {"k": np.array(-1, np.int64)}, attrs={"upper": 0}),
    "trilu_upper_k_runtime": lambda: single("Trilu", {"x": f32(4, 5), "k": np.array(2, np.int64)}),
    "cumsum": lambda: single("CumSum", {"x": f32(3, 4)}, {"a": np.array(1, np.int64)}),
    "cumsum_exclusive_reverse": lambda: single("CumSum", {"x": f32(3, 4)}, {"a": np.array(0, np.int32)},
                                               attrs={"exclusive": 1, "reverse": 1}),
    "cumsum_int64": lambda: single("CumSum", {"x": i64(1, 2, 3, 4)}, {"a": np.array(-1, np.int64)}),
    "pad_constant": lambda: single("Pad", {"x": f32(2, 3, 4)}, {"p": i64(0, 1, 2, 0, 2, 1), "v": np.array(1.5, np.float32)}),
    "pad_reflect": lambda: single("Pad", {"x": f32(1, 2, 4, 5)}, {"p": i64(0, 0, 2, 3, 0, 0, 1, 2)},
                                  attrs={"mode": "reflect"}),
    "pad_edge": lambda: single("Pad", {"x": f32(1, 2, 4, 5)}, {"p": i64(0, 0, 3, 1, 0, 0, 2, 4)}, attrs={"mode": "edge"}),
    "pad_wrap": lambda: single("Pad", {"x": f32(1, 2, 4, 5)}, {"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}, attrs={"mode": "wrap"},
                               opset=19),
    "pad_negative_crop": lambda: single("Pad", {"x": f32(4, 6)}, {"p": i64(-1, 2, 1, -2)}),
    "pad_axes_opset18": lambda: single("Pad", {"x": f32(2, 3, 4)}, {"p": i64(1, 2), "v": np.array(0.0, np.float32),
                                                                     "a": i64(-1)}, opset=18),
    "pad_attr_opset10_style": lambda: single("Pad", {"x": f32(2, 3)}, attrs={"pads": [1, 0, 0, 2], "value": 2.0},
                                             opset=10) if False else single("Pad", {"x": f32(2, 3)},
                                                                             {"p": i64(1, 0, 0, 2)}),
    "logsoftmax": lambda: single("LogSoftmax", {"x": f32(2, 3, 7, lo=-5, hi=5)}),
    "logsoftmax_legacy": lambda: single("LogSoftmax", {"x": f32(2, 3, 4)}, attrs={"axis": 1}, opset=11),
    "hardmax": lambda: single("Hardmax", {"x": f32(3, 6)}),
    "hardmax_axis0": lambda: single("Hardmax", {"x": f32(3, 6)}, attrs={"axis": 0}),
    "depthtospace_dcr": lambda: single("DepthToSpace", {"x": f32(2, 8, 3, 4)}, attrs={"blocksize": 2}),
    "depthtospace_crd": lambda: single("DepthToSpace", {"x": f32(1, 18, 2, 3)}, attrs={"blocksize": 3, "mode": "CRD"}),
    "spacetodepth": lambda: single("SpaceToDepth", {"x": f32(2, 3, 4, 6)}, attrs={"blocksize": 2}),
    "gatherelements": lambda: single("GatherElements", {"x": f32(3, 4)},
                                     {"i": np.array([[0, 3], [-1, 1], [2, 2]], np.int64)}, attrs={"axis": 1}),
    "gatherelements_axis0": lambda: single("GatherElements", {"x": f32(3, 4), "i": np.array([[2, 0, 1, 1]], np.int32)}),
    "gathernd": lambda: single("GatherND", {"x": f32(3, 4, 5)}, {"i": np.array([[0, 1], [2, -1]], np.int64)}),
    "gathernd_batch_dims": lambda: single("GatherND", {"x": f32(2, 3, 4)}, {"i": np.array([[[1], [0]], [[2], [2]]], np.int64)},
                                          attrs={"batch_dims": 1}),
    "scatterelements": lambda: single("ScatterElements", {"x": f32(3, 4), "u": f32(2, 2)},
                                      {"i": np.array([[0, 3], [1, 2]], np.int64)}, attrs={"axis": 1},
                                      inputs=["x", "i", "u"]),
    "scatterelements_add": lambda: single("ScatterElements", {"x": f32(4, 2), "u": f32(3, 2)},
                                          {"i": np.array([[0, 1], [0, 1], [3, 3]], np.int64)},
                                          attrs={"axis": 0, "reduction": "add"}, inputs=["x", "i", "u"], opset=18),
    "scatternd": lambda: single("ScatterND", {"x": f32(4, 3), "u": f32(2, 3)}, {"i": np.array([[1], [3]], np.int64)},
                                inputs=["x", "i", "u"]),
    "scatternd_elementwise_mul": lambda: single("ScatterND", {"x": f32(3, 3), "u": f32(2)},
                                                {"i": np.array([[0, 0], [2, 1]], np.int64)}, attrs={"reduction": "mul"},
                                                inputs=["x", "i", "u"], opset=18),
    "onehot": lambda: single("OneHot", {"i": i64(0, 2, -1, 5)}, {"d": np.array(4, np.int64),
                                                               "v": np.array([0.0, 1.0], np.float32)}),
    "onehot_axis0_int_values": lambda: single("OneHot", {"i": np.array([[1, 0], [2, 1]], np.int64)},
                                              {"d": np.array(3, np.int64), "v": i64(-1, 5)}, attrs={"axis": 0}),
    "nonzero_runtime": lambda: single("NonZero", {"x": np.array([[0, 1.5, 0], [2, 0, -0.0]], np.float32)}),
    "nonzero_int64_const_folded": lambda: single("NonZero", {}, {"x": i64(0, 3, 0, 4)}, inputs=["x"]),
    "size": lambda: single("Size", {"x": f32(2, 3, 4)}),
    "topk_largest": lambda: single("TopK", {"x": f32(3, 10)}, {"k": i64(4)}, n_out=2),
    "topk_smallest_axis0": lambda: single("TopK", {"x": f32(6, 3)}, {"k": i64(2)}, attrs={"axis": 0, "largest": 0},
                                          n_out=2),
    "topk_ties_int64": lambda: single("TopK", {"x": i64(3, 1, 3, 2, 3)}, {"k": i64(3)}, n_out=2),
    "instancenorm": lambda: single("InstanceNormalization", {"x": f32(2, 3, 5, 4)}, {"s": f32(3), "b": f32(3)}),
    "groupnorm_opset21": lambda: single("GroupNormalization", {"x": f32(2, 6, 3, 3)}, {"s": f32(6), "b": f32(6)},
                                        attrs={"num_groups": 3, "epsilon": 1e-3}, opset=21),
    "groupnorm_opset18": lambda: single("GroupNormalization", {"x": f32(2, 6, 4)}, {"s": f32(2), "b": f32(2)},
                                        attrs={"num_groups": 2}, opset=18),
    "lpnorm_l2": lambda: single("LpNormalization", {"x": f32(3, 5)}),
    "lpnorm_l1_axis0": lambda: single("LpNormalization", {"x": f32(3, 5)}, attrs={"axis": 0, "p": 1}),
    "globalmaxpool": lambda: single("GlobalMaxPool", {"x": f32(2, 3, 5, 4)}),
})

EMPTY = np.zeros(0, np.float32)
CASES.update({
    "convtranspose_basic": lambda: single("ConvTranspose", {"x": f32(2, 3, 5, 5)}, {"w": f32(3, 4, 3, 3), "b": f32(4)}),
    "convtranspose_stride_pads": lambda: single("ConvTranspose", {"x": f32(1, 4, 4, 5)}, {"w": f32(4, 2, 4, 4)},
                                                attrs={"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "convtranspose_output_padding": lambda: single("ConvTranspose", {"x": f32(1, 2, 4, 4)}, {"w": f32(2, 3, 3, 3)},
                                                   attrs={"strides": [2, 2], "output_padding": [1, 0]}),
    "convtranspose_output_shape": lambda: single("ConvTranspose", {"x": f32(1, 2, 4, 4)}, {"w": f32(2, 3, 3, 3)},
                                                 attrs={"strides": [2, 2], "output_shape": [9, 8]}),
    "convtranspose_groups_dilation": lambda: single("ConvTranspose", {"x": f32(1, 4, 5, 5)}, {"w": f32(4, 3, 3, 3)},
                                                    attrs={"group": 2, "dilations": [2, 2]}),
    "convtranspose_same_upper": lambda: single("ConvTranspose", {"x": f32(1, 2, 4, 5)}, {"w": f32(2, 2, 3, 3)},
                                               attrs={"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "convtranspose_1d": lambda: single("ConvTranspose", {"x": f32(2, 3, 7)}, {"w": f32(3, 2, 4)}, attrs={"strides": [3]}),
    "convtranspose_3d": lambda: single("ConvTranspose", {"x": f32(1, 2, 3, 4, 3)}, {"w": f32(2, 2, 2, 2, 2)},
                                       attrs={"strides": [2, 2, 2]}),
    "resize_nearest_scales": lambda: single("Resize", {"x": f32(1, 2, 3, 4)}, {"roi": EMPTY, "s": np.array(
        [1, 1, 2, 1.5], np.float32)}),
    "resize_nearest_sizes_asymmetric_floor": lambda: single("Resize", {"x": f32(1, 2, 5, 4)}, {"s": i64(1, 2, 3, 9)},
        attrs={"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, inputs=["x", "", "", "s"]),
    "resize_nearest_ceil_align": lambda: single("Resize", {"x": f32(1, 1, 4, 4)}, {"roi": EMPTY, "s": np.array(
        [1, 1, 1.7, 0.6], np.float32)}, attrs={"coordinate_transformation_mode": "align_corners", "nearest_mode": "ceil"}),
    "resize_linear_half_pixel": lambda: single("Resize", {"x": f32(2, 3, 4, 5)}, {"roi": EMPTY, "s": np.array(
        [1, 1, 2, 2], np.float32)}, attrs={"mode": "linear"}),
    "resize_linear_downscale_pytorch": lambda: single("Resize", {"x": f32(1, 2, 8, 9)}, {"s": i64(1, 2, 3, 4)},
        attrs={"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, inputs=["x", "", "", "s"]),
    "resize_linear_align_corners": lambda: single("Resize", {"x": f32(1, 1, 3, 4)}, {"s": i64(1, 1, 7, 5)},
        attrs={"mode": "linear", "coordinate_transformation_mode": "align_corners"}, inputs=["x", "", "", "s"]),
    "resize_cubic": lambda: single("Resize", {"x": f32(1, 2, 5, 6)}, {"roi": EMPTY, "s": np.array(
        [1, 1, 1.6, 2.0], np.float32)}, attrs={"mode": "cubic"}),
    "resize_cubic_exclude_outside": lambda: single("Resize", {"x": f32(1, 1, 6, 6)}, {"s": i64(1, 1, 4, 9)},
        attrs={"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, inputs=["x", "", "", "s"]),
    "resize_tf_crop_and_resize": lambda: single("Resize", {"x": f32(1, 1, 6, 6)}, {
        "roi": np.array([0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3], np.float32), "s": i64(1, 1, 5, 4)},
        attrs={"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0},
        inputs=["x", "roi", "", "s"]),
    "resize_half_pixel_symmetric_axes": lambda: single("Resize", {"x": f32(1, 2, 5, 6)}, {"s": i64(8, 3)},
        attrs={"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric", "axes": [2, 3]},
        inputs=["x", "", "", "s"], opset=19),
})

CASES.update({
    "einsum_matmul": lambda: single("Einsum", {"a": f32(3, 4), "b": f32(4, 5)}, attrs={"equation": "ij,jk->ik"}),
    "einsum_batched_attention": lambda: single("Einsum", {"q": f32(2, 3, 5, 4), "k": f32(2, 3, 6, 4)},
                                               attrs={"equation": "bhid,bhjd->bhij"}),
    "einsum_ellipsis": lambda: single("Einsum", {"a": f32(2, 3, 4), "b": f32(4, 5)}, attrs={"equation": "...ij,jk->...ik"}),
    "einsum_implicit_transpose": lambda: single("Einsum", {"a": f32(3, 4)}, attrs={"equation": "ji"}),
    "einsum_trace_and_sum": lambda: single("Einsum", {"a": f32(4, 4)}, attrs={"equation": "ii->"}),
    "einsum_outer_three": lambda: single("Einsum", {"a": f32(2), "b": f32(3), "c": f32(2)},
                                         attrs={"equation": "i,j,i->ij"}),
    "compress_axis": lambda: single("Compress", {"x": f32(3, 4)}, {"c": np.array([True, False, True])}, attrs={"axis": 0}),
    "compress_flat_runtime": lambda: single("Compress", {"x": f32(2, 3), "c": np.array([0, 1, 1, 0, 1], bool)}),
    "reversesequence_time_major": lambda: single("ReverseSequence", {"x": f32(4, 3, 2)}, {"l": i64(4, 2, 1)}),
    "reversesequence_batch_major": lambda: single("ReverseSequence", {"x": f32(3, 4)}, {"l": i64(1, 3, 4)},
                                                  attrs={"batch_axis": 0, "time_axis": 1}),
    "lrn": lambda: single("LRN", {"x": f32(2, 6, 3, 3)}, attrs={"size": 3}),
    "lrn_params": lambda: single("LRN", {"x": f32(1, 5, 4, 4)}, attrs={"size": 5, "alpha": 0.01, "beta": 0.5,
                                                                         "bias": 2.0}),
    "lppool": lambda: single("LpPool", {"x": f32(1, 2, 6, 6)}, attrs={"kernel_shape": [3, 3], "strides": [2, 2]}),
    "lppool_p1_pads": lambda: single("LpPool", {"x": f32(1, 2, 5, 5)}, attrs={"kernel_shape": [2, 2], "p": 1,
                                                                             "pads": [1, 1, 0, 0]}),
    "maxunpool": lambda: single("MaxUnpool", {"x": f32(1, 1, 2, 2)}, {"i": np.array([[[[0, 3], [9, 14]]]], np.int64)},
                                attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
})

def rnn_case(op, T=5, B=3, I=4, H=6, dirs=1, bias=True, seq_lens=None, init=False, peep=False, layout=0, **attrs):
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    feeds = {"x": f32(*((B, T, I) if layout else (T, B, I)), lo=-1, hi=1)}
    consts = {"w": f32(dirs, g * H, I, lo=-0.5, hi=0.5), "r": f32(dirs, g * H, H, lo=-0.5, hi=0.5)}
    names = ["x", "w", "r"]
    consts["b"] = f32(dirs, 2 * g * H, lo=-0.5, hi=0.5)
    names.append("b" if bias else "")
    if not bias:
        del consts["b"]
    if seq_lens is not None:
        feeds["sl"] = np.array(seq_lens, np.int32)
    names.append("sl" if seq_lens is not None else "")
    if init:
        feeds["h0"] = f32(*((B, dirs, H) if layout else (dirs, B, H)))
        if op == "LSTM":
            feeds["c0"] = f32(*((B, dirs, H) if layout else (dirs, B, H)))
    names.append("h0" if init else "")
    if op == "LSTM":
        names.append("c0" if init else "")
        if peep:
            consts["p"] = f32(dirs, 3 * H)
        names.append("p" if peep else "")
    direction = {1: "forward", 2: "bidirectional"}[dirs] if "direction" not in attrs else attrs.pop("direction")
    return single(op, feeds, consts, attrs={"hidden_size": H, "direction": direction, "layout": layout, **attrs},
                  inputs=names, n_out=3 if op == "LSTM" else 2, opset=14)


CASES.update({
    "lstm_forward": lambda: rnn_case("LSTM"),
    "lstm_bidirectional_init_peephole": lambda: rnn_case("LSTM", dirs=2, init=True, peep=True),
    "lstm_reverse_seq_lens": lambda: rnn_case("LSTM", seq_lens=[5, 2, 3], direction="reverse"),
    "lstm_clip_input_forget": lambda: rnn_case("LSTM", clip=0.5, input_forget=1),
    "lstm_custom_activations": lambda: rnn_case("LSTM", activations=["HardSigmoid", "LeakyRelu", "Softsign"],
                                                activation_alpha=[0.3, 0.1], activation_beta=[0.4]),
    "gru_forward": lambda: rnn_case("GRU"),
    "gru_linear_before_reset_bidir": lambda: rnn_case("GRU", dirs=2, linear_before_reset=1, init=True),
    "gru_seq_lens_no_bias": lambda: rnn_case("GRU", bias=False, seq_lens=[4, 5, 1]),
    "rnn_forward": lambda: rnn_case("RNN"),
    "rnn_bidir_relu_seq_lens": lambda: rnn_case("RNN", dirs=2, activations=["Relu", "Tanh"], seq_lens=[5, 3, 2]),
})

CASES.update({
    "dft_real": lambda: single("DFT", {"x": f32(2, 8, 1)}, opset=17),
    "dft_complex_inverse": lambda: single("DFT", {"x": f32(2, 6, 2)}, attrs={"inverse": 1}, opset=17),
    "dft_onesided_length": lambda: single("DFT", {"x": f32(3, 7, 1)}, {"n": np.array(10, np.int64)},
                                          attrs={"onesided": 1}, opset=17),
    "dft_axis2": lambda: single("DFT", {"x": f32(2, 3, 5, 2)}, attrs={"axis": 2}, opset=17),
    "dft_opset20_axis_input": lambda: single("DFT", {"x": f32(2, 5, 4, 1)}, {"a": np.array(1, np.int64)},
                                             inputs=["x", "", "a"], opset=20),
    "stft_window": lambda: single("STFT", {"x": f32(2, 32, 1)}, {"step": np.array(4, np.int64), "w": f32(8, lo=0, hi=1)},
                                  opset=17),
    "stft_frame_length_twosided": lambda: single("STFT", {"x": f32(1, 20, 1)}, {"step": np.array(3, np.int64),
                                                                                "fl": np.array(6, np.int64)},
                                                 attrs={"onesided": 0}, inputs=["x", "step", "", "fl"], opset=17),
})

CASES.update({
    "add_int8": lambda: single("Add", {"a": np.array([[1, -5], [100, 3]], np.int8), "b": np.array([2, -3], np.int8)}),
    "mul_uint8": lambda: single("Mul", {"a": np.array([3, 5, 200], np.uint8), "b": np.array([2, 7, 1], np.uint8)}),
    "less_uint8": lambda: single("Less", {"a": np.array([3, 5, 200], np.uint8), "b": np.array([4], np.uint8)}),
    "max_uint32": lambda: single("Max", {"a": np.array([3, 5, 200], np.uint32), "b": np.array([4, 0, 300], np.uint32)}),
    "sub_float64": lambda: single("Sub", {"a": rng.standard_normal((2, 3)), "b": rng.standard_normal(3)}),
    "div_uint32": lambda: single("Div", {"a": np.array([9, 10, 7], np.uint32), "b": np.array([2, 3, 7], np.uint32)}),
    "equal_uint64": lambda: single("Equal", {"a": np.array([1, 2], np.uint64), "b": np.array([1, 3], np.uint64)}),
    "where_int8": lambda: single("Where", {"c": np.array([True, False]), "x": np.array([1, 2], np.int8),
                                           "y": np.array([-1, -2], np.int8)}),
    "transpose_uint8": lambda: single("Transpose", {"x": np.arange(6, dtype=np.uint8).reshape(2, 3)}),
})


@pytest.mark.parametrize("case", sorted(CASES))
def test_operator_matches_onnxruntime(case):
    model, feeds = CASES[case]()
    assert_parity(model, feeds)


@pytest.mark.parametrize("case", ["matmul_large", "conv_basic", "softmax_last", "add_bcast_middle",
                                  "transpose_perm", "maxpool", "layernorm_last"])
def test_operator_two_threads(case):
    model, feeds = CASES[case]()
    assert_parity(model, feeds, threads=2)


def test_operator_without_optimisation():
    model, feeds = CASES["conv_groups"]()
    assert_parity(model, feeds, optimize="none")


@pytest.mark.parametrize("op,kwargs", [("LSTM", dict(dirs=2, seq_lens=[1, 5, 3], init=True, peep=True)),
                                       ("GRU", dict(direction="reverse", init=True)), ("RNN", dict(dirs=2))])
def test_recurrent_batch_major_layout(op, kwargs, tmp_path):
    """ONNX Runtime has no layout=1 kernels: compare with its layout=0 result on transposed tensors."""
    from parity import convert, load, run_ort
    rng_state = rng.bit_generator.state
    model1, feeds1 = rnn_case(op, layout=1, **kwargs)
    rng.bit_generator.state = rng_state
    model0, _ = rnn_case(op, layout=0, **kwargs)
    for init0, init1 in zip(model0.graph.initializer, model1.graph.initializer):
        init0.CopyFrom(init1)   # same weights
    feeds0 = {k: (v.transpose(1, 0, 2) if v.ndim == 3 else v) for k, v in feeds1.items()}
    got = [t.get_data_to_numpy() for t in load(convert(model1, str(tmp_path))).predict(feeds1)]
    want = run_ort(model0, feeds0)
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)   # Y: [B, T, D, H]
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w.transpose(1, 0, 2), rtol=1e-4, atol=1e-5)             # [B, D, H]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("op", ["Add", "Where"])
def test_one_long_broadcast_row_splits_across_threads(op, threads, tmp_path):
    """A tensor with a scalar coalesces into one long row; it is split into pieces across the threads
    (BERT's NaN guard, Where(IsNaN(p), 0, p)); every piece must land at the right offsets."""
    n = 200003   # not a multiple of any piece count
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s")]
    if op == "Add":
        nodes = [helper.make_node("Add", ["x", "s"], ["y"])]
    else:
        nodes = [helper.make_node("Greater", ["x", "s"], ["c"]), helper.make_node("Where", ["c", "s", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(3).standard_normal((1, n)).astype(np.float32)
    assert_parity(model, {"x": x}, threads=threads, workdir=str(tmp_path))


@pytest.mark.parametrize("strides", [[2, 2], [1, 1]])
def test_maxpool_propagates_nan(strides, tmp_path):
    """A NaN anywhere in a window makes that output NaN (NumPy's max semantics), on the vectorised stride-2 column
    pass and the generic one alike; windows without one keep their max."""
    from parity import convert, load
    x = rng.uniform(-1, 1, (1, 2, 9, 40)).astype(np.float32)
    x[0, 0, 4, 17] = np.nan
    x[0, 1, 0, 0] = np.nan
    x[0, 1, 8, 39] = np.nan
    model, _ = single("MaxPool", {"x": x}, attrs={"kernel_shape": [3, 3], "strides": strides, "pads": [1, 1, 1, 1]})
    got = load(convert(model, str(tmp_path))).predict({"x": x})[0].get_data_to_numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    sh, sw = strides
    oh, ow = got.shape[2:]
    want = np.empty_like(got)
    for i in range(oh):
        for j in range(ow):
            want[:, :, i, j] = padded[:, :, i * sh:i * sh + 3, j * sw:j * sw + 3].max(axis=(2, 3))
    assert np.isnan(got).sum() > 0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("op", ["Sin", "Cos"])
@pytest.mark.parametrize("threads", [1, 2])
def test_sin_cos_over_every_range(op, threads, tmp_path):
    """Sin / Cos (a vectorised polynomial after a three-part pi/2 reduction up to |x| 8192, libm beyond and for
    NaN / inf): within 2e-7 of float64 NumPy near zero, over thousands of periods and past the fast range; in place
    or not (the output may share the input's buffer), split across threads at any offset."""
    from parity import convert, load
    # Neg first: its output dies at the Sin / Cos, which the planner may then run in place
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["t"]), helper.make_node(op, ["t"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-4, 4, 20011), rng.uniform(-8192, 8192, 20011), rng.uniform(-3e5, 3e5, 301),
                        np.array([0.0, -0.0, np.pi / 2, 8192.0, -8192.0, 8192.001, 1e-30, 3e38, np.inf, -np.inf,
                                  np.nan], np.float32)]).astype(np.float32)
    got = load(convert(model, str(tmp_path)), threads=threads).predict({"x": x})[0].get_data_to_numpy()
    with np.errstate(invalid="ignore"):
        want = getattr(np, op.lower())(-x.astype(np.float64))
    finite = np.isfinite(x)
    assert np.abs(got[finite] - want[finite]).max() < 2e-7
    assert np.isnan(got[~finite]).all()
