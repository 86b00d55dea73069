"""Shared helpers: convert an ONNX model, run it in lite and in ONNX Runtime, compare."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

import converter
import lite

RTOL, ATOL = 1e-4, 1e-5   # float32 parity with ONNX Runtime


def convert(model: onnx.ModelProto | str, workdir: str, name: str = "model", **kwargs) -> str:
    path = model if isinstance(model, str) else os.path.join(workdir, f"{name}.onnx")
    if not isinstance(model, str):
        onnx.save(model, path)
    return converter.Converter().convert(converter.FmkType.ONNX, path, os.path.join(workdir, name), **kwargs).output_file


def load(ms_path: str, threads: int = 1) -> lite.Model:
    ctx = lite.Context()
    ctx.cpu.thread_num = threads
    m = lite.Model()
    m.build_from_file(ms_path, lite.ModelType.MINDIR_LITE, ctx)
    return m


def run_ort(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    data = model if isinstance(model, str) else model.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_parity(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1, rtol: float = RTOL,
                  atol: float = ATOL, workdir: str | None = None, **convert_kwargs) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        ms = convert(model, workdir or tmp, **convert_kwargs)
        m = load(ms, threads)
        got = [t.get_data_to_numpy() for t in m.predict(feeds)]
    want = run_ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
    return got
