"""Real trained models that PyPI packages ship, converted and run against ONNX Runtime on the same inputs:
Silero VAD (silero-vad: every ONNX variant in the package, streamed chunk by chunk with its state carried over,
the sample rate fed as a scalar and as a one-element array) and PP-OCRv4's detector, recogniser and angle
classifier (rapidocr-onnxruntime), each at two input sizes."""
from __future__ import annotations

import os
from importlib import resources

import numpy as np
import onnx
import pytest

from parity import convert, load, run_ort

rng = np.random.default_rng(7)


def package_models(package: str, folder: str) -> list[str]:
    root = resources.files(package) / folder
    return sorted(str(p) for p in root.iterdir() if p.name.endswith(".onnx"))


SILERO = package_models("silero_vad", "data")
OCR = package_models("rapidocr_onnxruntime", "models")


def test_the_packages_ship_the_models():
    assert len(SILERO) >= 5 and len(OCR) == 3


def _silero_cases() -> list:
    """Each variant; those with a sample-rate input fed it both as a scalar and as a one-element array."""
    cases = []
    for path in SILERO:
        has_sr = any(i.name == "sr" for i in onnx.load(path, load_external_data=False).graph.input)
        for sr_shape in ([(), (1,)] if has_sr else [()]):
            cases.append(pytest.param(path, sr_shape, id=f"{os.path.basename(path)}-sr{list(sr_shape)}"))
    return cases


@pytest.mark.parametrize("path,sr_shape", _silero_cases())
def test_silero_vad_streams_like_onnxruntime(path, sr_shape, tmp_path):
    model = onnx.load(path)
    names = [i.name for i in model.graph.input]
    m = load(convert(path, str(tmp_path)))
    sequence = "sequence" in os.path.basename(path)
    fixed = {d.dim_value for i in model.graph.input if i.name == "input" for d in i.type.tensor_type.shape.dim}
    chunk = 576 if 576 in fixed else 512
    state = {"state": np.zeros((2, 1, 128), np.float32), "h": np.zeros((1, 1, 128), np.float32),
             "c": np.zeros((1, 1, 128), np.float32)}
    t = np.arange(chunk * 4) / 16000.0
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    for step in range(4):   # a stream: each chunk's state output is the next chunk's state input
        x = audio[step * chunk:(step + 1) * chunk].reshape(1, chunk)
        if sequence:
            x = np.concatenate([x, x[:, ::-1], x * 0.5])   # [sequence_length, 576]
        feeds = {"input": x, **{k: v for k, v in state.items() if k in names}}
        if "sr" in names:
            feeds["sr"] = np.full(sr_shape, 16000, np.int64)
        ordered = {n: feeds[n] for n in names}
        got = [t.get_data_to_numpy() for t in m.predict(ordered)]
        want = run_ort(path, {**ordered, **({"sr": np.array(16000, np.int64)} if "sr" in names else {})})
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)
        outs = [o.name for o in model.graph.output]
        for name in ("state", "h", "c"):
            produced = {"state": "stateN", "h": "hn", "c": "cn"}[name]
            if produced in outs:
                state[name] = got[outs.index(produced)]


@pytest.mark.parametrize("path", OCR, ids=os.path.basename)
def test_pp_ocr_models_match_onnxruntime_at_two_sizes(path, tmp_path):
    sizes = {"det": [(1, 3, 96, 128), (1, 3, 160, 224)], "rec": [(1, 3, 48, 160), (2, 3, 48, 320)],
             "cls": [(1, 3, 48, 192), (3, 3, 48, 192)]}
    kind = next(k for k in sizes if f"_{k}_" in os.path.basename(path))
    m = load(convert(path, str(tmp_path)))   # dynamic sizes: one .ms runs both
    for shape in sizes[kind]:
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        got = m.predict({"x": x})[0].get_data_to_numpy()
        want = run_ort(path, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
