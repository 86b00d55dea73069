"""ViT and ConvNeXt from their checkpoints (model_zoo/encoders/vision_graphs.py via converter_lite --fmk=HF): tiny
ViTForImageClassification / ConvNextForImageClassification saved by transformers; the converted graphs' logits and
pooled features equal transformers' within 1e-4 on a batch of two images."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lite
from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from test_generation_graphs import run

MODELS = {
    "vit": ("ViTConfig", "ViTForImageClassification", dict(image_size=32, patch_size=8, hidden_size=48,
                                                            num_hidden_layers=2, num_attention_heads=4,
                                                            intermediate_size=96, num_labels=7), 32),
    "convnext": ("ConvNextConfig", "ConvNextForImageClassification", dict(hidden_sizes=[16, 32, 48, 64],
                                                                         depths=[1, 2, 1, 1], num_labels=5,
                                                                         layer_scale_init_value=0.5), 64),
}


@pytest.mark.parametrize("family", sorted(MODELS))
def test_classifier_matches_transformers(family, tmp_path):
    import transformers
    config_cls, model_cls, kwargs, size = MODELS[family]
    torch.manual_seed(2)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kwargs)).eval()
    model.save_pretrained(str(tmp_path / "ckpt"))
    path = Converter().convert(FmkType.HF, str(tmp_path / "ckpt"), str(tmp_path / family), verify_build=False).output_file
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    pixels = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    out = {o.name: o.get_data_to_numpy() for o in m.predict({"pixel_values": pixels})}
    with torch.no_grad():
        ref = model(torch.from_numpy(pixels), output_hidden_states=True)
        base = getattr(model, family)(torch.from_numpy(pixels))
    want = ref.logits.numpy()
    np.testing.assert_allclose(out["logits"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    pooled = base.pooler_output.numpy() if family == "convnext" else base.last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(out["pooler_output"], pooled, rtol=1e-4, atol=1e-4 * np.abs(pooled).max())


@pytest.mark.parametrize("family,processor,size", [("vit", "ViTImageProcessor", {"height": 32, "width": 32}),
                                                   ("convnext", "ConvNextImageProcessor", {"shortest_edge": 64})],
                         ids=["vit", "convnext"])
def test_image_classifier_pipeline(family, processor, size, tmp_path):
    """The checkpoint's preprocessing (transformers' PIL image processors) and labels, end to end."""
    import transformers
    from PIL import Image

    from lite.encoder_pipelines import ImageClassifier
    config_cls, model_cls, kwargs, _ = MODELS[family]
    labels = {i: f"label_{i}" for i in range(kwargs["num_labels"])}
    torch.manual_seed(3)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**{**kwargs, "id2label": labels})).eval()
    model.save_pretrained(str(tmp_path))
    proc = getattr(transformers, processor)(size=size)
    proc.save_pretrained(str(tmp_path))
    rng = np.random.default_rng(5)
    images = [Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)) for h, w in ((40, 52), (71, 45))]
    classifier = ImageClassifier(str(tmp_path))
    want_pixels = proc(images=images, return_tensors="np")["pixel_values"]
    got_pixels = np.stack([classifier.preprocess(im) for im in images])
    np.testing.assert_allclose(got_pixels, want_pixels, atol=1e-5)
    with torch.no_grad():
        probs = torch.softmax(model(torch.from_numpy(want_pixels)).logits.double(), -1).numpy()
    for got, p in zip(classifier(images, top_k=3), probs):
        best = np.argsort(-p, kind="stable")[:3]
        assert [name for name, _ in got] == [labels[int(i)] for i in best]
        np.testing.assert_allclose([q for _, q in got], p[best], rtol=1e-4)


def test_model_zoo_converts_and_runs_a_classifier(tmp_path, capsys):
    import transformers
    from PIL import Image

    from model_zoo import cli
    _, _, kwargs, _ = MODELS["vit"]
    model = transformers.ViTForImageClassification(transformers.ViTConfig(
        **{**kwargs, "id2label": {i: f"class{i}" for i in range(7)}})).eval()
    model.save_pretrained(str(tmp_path / "ckpt"))
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(str(tmp_path / "ckpt"))
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(tmp_path / "img.png")
    assert cli.main(["convert", "ViT-B/16-224", "--checkpoint", str(tmp_path / "ckpt"), "--output",
                     str(tmp_path / "m"), "--precision", "bf16"]) == 0
    capsys.readouterr()
    assert cli.main(["run", "ViT-B/16-224", "--model", str(tmp_path / "m"), "--prompt", str(tmp_path / "img.png")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5 and all(line.split("\t")[1].startswith("class") for line in lines)


@pytest.mark.parametrize("grid,full", [((1, 12, 20), [1]), ((2, 8, 8), [0])])
def test_qwen2_5_vl_vision_tower_matches_transformers(tmp_path, grid, full):
    """The Qwen2.5-VL vision tower (head "vision") for one patch grid: window attention over windows cut by the
    grid's edges (6 x 10 merge groups in windows of 4 x 4), a full-attention block, 2-D RoPE, the 2 x 2 merger; and a
    two-frame video grid (full attention per frame), against transformers' visual model within 1e-4."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=dict(vocab_size=32, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=24,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=full))).eval()
    with torch.no_grad():
        for p_ in model.model.visual.parameters():
            p_.add_(torch.randn_like(p_) * 0.05)
    model.save_pretrained(str(tmp_path / "vlm"))
    out = str(tmp_path / "vision.ms")
    Converter().convert(FmkType.HF, str(tmp_path / "vlm"), out, verify_build=False,
                        checkpoint_options=CheckpointOptions(head="vision", latent_shape=grid))
    t, h, w = grid
    pixels = np.random.default_rng(1).standard_normal((t * h * w, 3 * 2 * 14 * 14)).astype(np.float32)
    with torch.no_grad():
        res = model.model.visual(torch.from_numpy(pixels), grid_thw=torch.tensor([grid]))
    want = (res.pooler_output if hasattr(res, "pooler_output") else res).numpy()
    got = run(out, {"pixel_values": pixels})[0]
    assert got.shape == want.shape == (t * h * w // 4, 24)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("size", [(50, 70), (300, 200), (1000, 1400)])
def test_qwen2_vl_pixels_match_the_image_processor(size):
    """lite.qwen2_vl_image against transformers' Qwen2VLImageProcessor (PIL backend): smart_resize rounding up, as is
    and down past max_pixels (bicubic), normalisation, the merge-group patch order, the temporal repeat."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from lite.qwen2_vl_image import qwen2_vl_pixels
    h, w = size
    image = Image.fromarray(np.random.default_rng(h).integers(0, 256, (h, w, 3), np.uint8))
    config = {"max_pixels": 28 * 28 * 256} if h > 500 else {}
    ref = Qwen2VLImageProcessorPil(**config)(image, return_tensors="np")
    pixels, grid = qwen2_vl_pixels(image, config)
    assert list(grid) == ref["image_grid_thw"][0].tolist()
    np.testing.assert_allclose(pixels, ref["pixel_values"], atol=1e-5)
