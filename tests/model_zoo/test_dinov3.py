"""The DINOv3 row: tiny DINOv3ViTModel checkpoints (transformers, seeded random weights) converted from their
safetensors by the checkpoint frontend (model_zoo.encoders.dinov3_graph): last_hidden_state and pooler_output
against transformers within 1e-4 (plain GELU and gated SiLU MLPs, with and without register tokens, key biases on
and off, batch 2), compressed weights by cosine; lite.encoder_pipelines.ImageEmbedder and `python -m model_zoo run
DINOv3 --image` against transformers on the same preprocessing; bad input named."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import lite
from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from model_zoo.cli import main as model_zoo

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, patch_size=8,
            image_size=32, layerscale_value=0.5)
VARIANTS = {"plain": dict(num_register_tokens=0, use_gated_mlp=False, hidden_act="gelu", key_bias=False),
            "gated_registers": dict(num_register_tokens=4, use_gated_mlp=True, hidden_act="silu", key_bias=True)}
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def checkpoint(path, variant: str, seed: int = 0):
    import transformers
    torch.manual_seed(seed)
    model = transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**TINY, **VARIANTS[variant])).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    (path / "preprocessor_config.json").write_text(json.dumps({
        "do_resize": True, "size": {"height": 32, "width": 32}, "resample": 2, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": MEAN, "image_std": STD}))
    return model


def run(path, pixels):
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    return {o.name: o.get_data_to_numpy() for o in m.predict({"pixel_values": pixels})}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_graph_matches_transformers(variant, tmp_path):
    model = checkpoint(tmp_path / "ckpt", variant)
    path = Converter().convert(FmkType.HF, str(tmp_path / "ckpt"), str(tmp_path / "d"), verify_build=False).output_file
    pixels = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    got = run(path, pixels)
    with torch.no_grad():
        want = model(torch.from_numpy(pixels))
    tokens = 1 + VARIANTS[variant]["num_register_tokens"] + 16
    assert got["last_hidden_state"].shape == (2, tokens, 64)
    for name in ("last_hidden_state", "pooler_output"):
        w = getattr(want, name).numpy()
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


def test_compressed_weights_by_cosine(tmp_path):
    checkpoint(tmp_path / "ckpt", "gated_registers")
    pixels = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    full = run(Converter().convert(FmkType.HF, str(tmp_path / "ckpt"), str(tmp_path / "f32"),
                                   verify_build=False).output_file, pixels)["last_hidden_state"].ravel()
    for fmt, floor in (("bfloat16", 0.999), ("int8", 0.999)):
        path = Converter().convert(FmkType.HF, str(tmp_path / "ckpt"), str(tmp_path / fmt), verify_build=False,
                                   checkpoint_options=CheckpointOptions(weight_format=fmt)).output_file
        got = run(path, pixels)["last_hidden_state"].ravel()
        assert got @ full / np.linalg.norm(got) / np.linalg.norm(full) > floor, fmt


def pictures():
    from PIL import Image
    rng = np.random.default_rng(3)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((40, 56), (32, 32))]


def reference_pixels(image) -> np.ndarray:
    x = np.asarray(image.convert("RGB").resize((32, 32), 2), np.float32) / 255.0
    return ((x - np.array(MEAN, np.float32)) / np.array(STD, np.float32)).transpose(2, 0, 1)


def test_image_embedder_pipeline(tmp_path, capsys):
    from lite.encoder_pipelines import ImageEmbedder
    model = checkpoint(tmp_path / "ckpt", "gated_registers")
    assert model_zoo(["convert", "DINOv3", "--checkpoint", str(tmp_path / "ckpt"), "--output", str(tmp_path / "lite")]) == 0
    embedder = ImageEmbedder(str(tmp_path / "lite"))
    images = pictures()
    with torch.no_grad():
        want = model(torch.from_numpy(np.stack([reference_pixels(im) for im in images])))
    pooled = want.pooler_output.numpy()
    np.testing.assert_allclose(embedder.embed(images), pooled, rtol=1e-4, atol=1e-4 * np.abs(pooled).max())
    unit = embedder.embed(images, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
    parts = embedder.features(images)
    hidden = want.last_hidden_state.numpy()
    assert parts["registers"].shape == (2, 4, 64) and parts["patches"].shape == (2, 4, 4, 64)
    np.testing.assert_allclose(parts["patches"], hidden[:, 5:].reshape(2, 4, 4, 64), rtol=1e-4,
                               atol=1e-4 * np.abs(hidden).max())
    np.testing.assert_allclose(parts["cls"], pooled, rtol=1e-4, atol=1e-4 * np.abs(pooled).max())
    images[0].save(tmp_path / "a.png")
    capsys.readouterr()
    assert model_zoo(["run", "DINOv3", "--model", str(tmp_path / "lite"), "--image", str(tmp_path / "a.png")]) == 0
    vector = np.array(json.loads(capsys.readouterr().out))
    np.testing.assert_allclose(vector, pooled[0], rtol=1e-4, atol=1e-4 * np.abs(pooled).max())
    with pytest.raises(SystemExit, match="--image"):
        model_zoo(["run", "DINOv3", "--model", str(tmp_path / "lite")])
    with pytest.raises(ValueError, match="no images"):
        embedder.embed([])


def test_bad_sizes_are_named(tmp_path):
    from converter.ir import ConverterError
    from model_zoo.encoders.dinov3_graph import build_dinov3_graph
    config = dict(TINY, **VARIANTS["plain"])
    with pytest.raises(ConverterError, match="not a multiple of patch_size 8"):
        build_dinov3_graph(config, {}, height=36, width=32)
    with pytest.raises(ConverterError, match="divisible by 4"):
        build_dinov3_graph(dict(config, num_attention_heads=8, hidden_size=48), {})
