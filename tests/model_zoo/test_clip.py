"""CLIP ViT-B/32's row: a tiny CLIPModel with seeded random weights, saved as a Hugging Face checkpoint with its
tokenizer and image processor, converted by `python -m model_zoo convert` into its two towers and run by
lite.clip.CLIP against transformers: preprocessing equal to CLIPImageProcessor for images of several sizes,
image / text embeddings and logits_per_image within 1e-4, zero-shot probabilities; bf16 weights close; a corrupt
image is a clear error."""
from __future__ import annotations

import json
import os
import string

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from model_zoo.cli import main as model_zoo  # noqa: E402

IMAGE = 32


def tiny_tokenizer():
    from transformers import CLIPTokenizer
    chars = list(string.ascii_lowercase) + list(".,!?'")
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    merges = [("c", "a"), ("ca", "t</w>"), ("d", "o"), ("do", "g</w>"), ("p", "h"), ("o", "t"), ("ph", "ot"),
              ("phot", "o</w>")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=merges)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel
    tokenizer = tiny_tokenizer()
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    config = CLIPConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                         vocab_size=len(tokenizer), max_position_embeddings=24, bos_token_id=bos, eos_token_id=eos,
                         pad_token_id=tokenizer.pad_token_id),
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           patch_size=8, image_size=IMAGE),
        projection_dim=24)
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    with torch.no_grad():
        model.logit_scale.fill_(3.1)
    path = tmp_path_factory.mktemp("clip") / "ckpt"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    CLIPImageProcessorPil(size={"shortest_edge": IMAGE},
                          crop_size={"height": IMAGE, "width": IMAGE}).save_pretrained(path)
    return str(path), model, tokenizer


@pytest.fixture(scope="module")
def converted(checkpoint, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("clip_converted"))
    assert model_zoo(["convert", "CLIP ViT-B/32", "--checkpoint", checkpoint[0], "--output", out]) == 0
    assert {"image_encoder.ms", "text_encoder.ms", "tokenizer.json", "preprocessor_config.json"} <= set(os.listdir(out))
    return out


def images(seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(40, 50), (64, 33), (32, 32), (90, 41)]]


def test_clip_pipeline_equals_transformers(checkpoint, converted):
    from transformers import CLIPImageProcessorPil

    from lite.clip import CLIP
    _, model, tokenizer = checkpoint
    clip = CLIP(converted)
    pictures = images()
    reference = CLIPImageProcessorPil.from_pretrained(converted)(images=pictures, return_tensors="np")["pixel_values"]
    ours = np.stack([clip.preprocess(p) for p in pictures])
    np.testing.assert_allclose(ours, reference, atol=1e-6)

    texts = ["a photo of a cat.", "a dog", "cat", "a photo of a dog, a cat and a dog!"]   # lengths 9, 4, 3, 20
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    np.testing.assert_array_equal(clip.tokenize(texts), enc["input_ids"].numpy())
    with torch.no_grad():
        want = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                     pixel_values=torch.from_numpy(reference))
    np.testing.assert_allclose(clip.embed_images(pictures), want.image_embeds.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(clip.embed_texts(texts), want.text_embeds.numpy(), rtol=1e-4, atol=1e-5)
    assert clip.logit_scale == pytest.approx(np.exp(3.1))
    logits = clip.logits_per_image(pictures, texts)
    np.testing.assert_allclose(logits, want.logits_per_image.numpy(), rtol=1e-4, atol=1e-4)

    ranked = clip.classify(pictures[0], ["cat", "dog"], template="a photo of a {}.")
    with torch.no_grad():
        enc2 = tokenizer(["a photo of a cat.", "a photo of a dog."], padding=True, return_tensors="pt")
        probs = model(**enc2, pixel_values=torch.from_numpy(reference[:1])).logits_per_image.softmax(-1)[0].numpy()
    assert dict(ranked) == pytest.approx({"cat": float(probs[0]), "dog": float(probs[1])}, abs=1e-5)
    assert ranked[0][1] >= ranked[1][1]


def test_clip_cli_zero_shot_and_embeddings(checkpoint, converted, tmp_path, capsys):
    from PIL import Image
    picture = tmp_path / "picture.png"
    Image.fromarray(images(1)[0]).save(picture)
    assert model_zoo(["run", "CLIP ViT-B/32", "--model", converted, "--image", str(picture), "--label", "cat",
                      "--label", "dog"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    probs = {line.split("\t")[1]: float(line.split("\t")[0]) for line in lines}
    assert set(probs) == {"cat", "dog"} and sum(probs.values()) == pytest.approx(1.0, abs=1e-3)
    assert model_zoo(["run", "CLIP ViT-B/32", "--model", converted, "--prompt", "a dog"]) == 0
    vector = json.loads(capsys.readouterr().out)
    assert len(vector) == 24 and np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-4)


def test_clip_bf16_weights_stay_close(checkpoint, tmp_path):
    from lite.clip import CLIP
    out = str(tmp_path / "bf16")
    assert model_zoo(["convert", "CLIP ViT-B/32", "--checkpoint", checkpoint[0], "--output", out,
                      "--precision", "bf16"]) == 0
    fp32 = CLIP(checkpoint[0])   # converted on first use beside the checkpoint
    half = CLIP(out, weight_format="bfloat16")
    pictures, texts = images(2), ["a photo of a cat.", "a dog"]
    for a, b in ((fp32.embed_images(pictures), half.embed_images(pictures)),
                 (fp32.embed_texts(texts), half.embed_texts(texts))):
        assert (a * b).sum(-1).min() > 0.99   # cosine of unit vectors


def test_corrupt_image_is_named(converted, tmp_path):
    from lite.clip import CLIP
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not a picture")
    clip = CLIP(converted)
    with pytest.raises(ValueError, match="broken.png"):
        clip.embed_images([str(bad)])
    with pytest.raises(ValueError, match=r"\[height, width, 3\] uint8"):
        clip.embed_images([np.zeros((4, 4), np.float32)])
