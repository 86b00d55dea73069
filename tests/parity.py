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


def random_depthwise_shapes(seed: int, count: int, kernels: tuple[int, ...], dilations: tuple[int, ...] = (1,)):
    """Seeded depthwise geometries for the kernel tests: (channels, h, w, kh, kw, stride, dilation, pads (top, left,
    bottom, right)) with 8-72 channels, planes of 1-25 x 1-39, filter sides from `kernels` (not 1 x 1), strides 1-2,
    every pad from none to the filter's extent less one, on each side."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        c = int(rng.choice([8, 16, 24, 32, 40, 48, 56, 64, 72]))
        kh, kw = int(rng.choice(kernels)), int(rng.choice(kernels))
        stride, dilation = int(rng.integers(1, 3)), int(rng.choice(dilations))
        h, w = int(rng.integers(1, 26)), int(rng.integers(1, 40))
        eh, ew = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
        pads = tuple(int(rng.integers(0, e)) for e in (eh, ew, eh, ew))
        if kh * kw == 1 or h + pads[0] + pads[2] < eh or w + pads[1] + pads[3] < ew:
            continue
        out.append((c, h, w, kh, kw, stride, dilation, pads))
    return out

