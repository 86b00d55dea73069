"""Real architectures from `transformers` / `diffusers` at tiny sizes (seeded random weights, no
downloads), exported to ONNX by PyTorch, converted, and run at two dynamic shapes each against ONNX
Runtime. Tolerance: rtol 1e-4, atol 1e-4 x max(1, max|reference|) (relative to output scale)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from parity import convert, load, run_ort

pytest.importorskip("transformers")
from model_zoo.hf_tiny import FULL_ARCHS, TINY_ARCHS, export_onnx  # noqa: E402


@pytest.fixture(scope="module")
def converted(cache_dir, tmp_path_factory):
    out = {}

    def get(name):
        if name not in out:
            if name == "wan_dit":
                pytest.importorskip("diffusers")
            path = export_onnx(name, cache_dir)
            out[name] = (path, convert(path, str(tmp_path_factory.mktemp(name)), name))
        return out[name]
    return get


def check_two_shapes(name, converted, arch):
    path, ms = converted(name)
    model = load(ms, threads=2)
    for i, dims in enumerate(arch.shapes):
        feeds = arch.make_feeds(dims, np.random.default_rng(10 + i))
        got = model.predict(feeds)[0].get_data_to_numpy()
        want = run_ort(path, feeds)[0]
        assert got.shape == want.shape, (dims, got.shape, want.shape)
        # A model whose outputs vanish (bad random init) would pass any comparison: refuse it.
        assert want.std() > 1e-3, f"{name}: degenerate reference output (std {want.std():.1e})"
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{name} at {dims}")


@pytest.mark.parametrize("name", sorted(TINY_ARCHS))
def test_architecture_matches_onnxruntime_at_two_shapes(name, converted):
    check_two_shapes(name, converted, TINY_ARCHS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FULL_ARCHS))
def test_full_size_architecture_matches_onnxruntime(name, converted):
    """Full-size configs with random weights (minutes each): ./build.sh test -m slow."""
    check_two_shapes(name, converted, FULL_ARCHS[name])


def test_exports_are_cached(cache_dir):
    import os
    path = export_onnx("bert", cache_dir)
    mtime = os.path.getmtime(path)
    assert export_onnx("bert", cache_dir) == path and os.path.getmtime(path) == mtime
    assert onnx.load(path).graph.input[0].name == "input_ids"
