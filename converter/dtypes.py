"""Mapping between NumPy dtypes, ONNX TensorProto types and the .ms schema's DataType."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

# Values of ms_schema.DataType (lite/schema/model.fbs).
MS_DTYPE = {
    np.dtype(np.float32): 1, np.dtype(np.float16): 2, np.dtype(np.int8): 4, np.dtype(np.uint8): 5,
    np.dtype(np.int16): 6, np.dtype(np.int32): 7, np.dtype(np.int64): 8, np.dtype(np.bool_): 9,
    np.dtype(np.float64): 10, np.dtype(np.uint16): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13,
}
MS_BFLOAT16 = 3
# NumPy has no bfloat16: a graph tensor of raw bfloat16 bits (e.g. an LLM's KV-cache input) carries this dtype in
# the IR, and its arrays are uint16.
BFLOAT16 = np.dtype([("bfloat16", "<u2")])
MS_DTYPE[BFLOAT16] = MS_BFLOAT16

ONNX_TO_NUMPY = {
    TensorProto.FLOAT: np.dtype(np.float32), TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.DOUBLE: np.dtype(np.float64), TensorProto.INT8: np.dtype(np.int8),
    TensorProto.UINT8: np.dtype(np.uint8), TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32), TensorProto.INT64: np.dtype(np.int64),
    TensorProto.BOOL: np.dtype(np.bool_), TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32), TensorProto.UINT64: np.dtype(np.uint64),
}


def numpy_from_onnx(elem_type: int, where: str) -> np.dtype:
    try:
        return ONNX_TO_NUMPY[elem_type]
    except KeyError:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise ValueError(f"{where}: ONNX element type {name} is not supported") from None


def ms_from_numpy(dtype: np.dtype) -> int:
    try:
        return MS_DTYPE[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"dtype {dtype} cannot be stored in a .ms file") from None
