"""OpenVLA's row on the runtime: a tiny OpenVLA (fused DINOv2-style + SigLIP-style timm towers, the Prismatic
projector, a Llama decoder with the padded 32064-token vocabulary) built with model_zoo/reference/openvla.py and seeded
random weights, saved in openvla-7b's layout, converted by `python -m model_zoo convert OpenVLA`;
lite.embodied.OpenVLAPolicy against the reference: the vision graph's rows within 1e-4, the greedy action tokens
and the un-normalised actions for several pictures and instructions, the bins' de-tokenisation, the CLI, bad input
named."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

SIZE, VOCAB, PAD = 32, 32064, 64
WORDS = ["<unk>", "<s>", "</s>", "In", ":", "What", "action", "should", "the", "robot", "take", "to", "?", "Out",
         "pick", "up", "spoon", "open", "drawer", "put", "carrot", "on", "plate"]
TOWERS = [dict(dim=32, depth=3, heads=2, mlp=64, patch=8, size=SIZE, class_token=True, registers=4, layer_scale=True),
          dict(dim=24, depth=3, heads=2, mlp=40, patch=8, size=SIZE, class_token=False, registers=0,
               layer_scale=False)]
STATS = {"bridge": {"action": {"q01": [-0.5, -0.4, -0.3, -1.0, -2.0, -3.0, 0.0],
                               "q99": [0.5, 0.6, 0.7, 1.0, 2.5, 3.0, 1.0],
                               "mask": [True, True, True, True, True, True, False]}},
         "fractal": {"action": {"q01": [-1.0] * 7, "q99": [1.0] * 7}}}


def tokenizer():
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(WORDS)}
    for i in range(len(WORDS), 32000):
        vocab["▁" if i == 29871 else f"t{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def openvla(tmp_path_factory):
    from safetensors.torch import save_file
    from model_zoo.reference.openvla import OpenVLAReference
    root = tmp_path_factory.mktemp("openvla")
    text = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    ref = OpenVLAReference(TOWERS, text, PAD, 256, STATS).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "scale_factor" in name else 0.1))
        head = ref.language_model.lm_head.weight
        head[:32000 - 256].zero_()   # the argmax falls on the action tokens, so the bins vary with the input
        head[32000:].zero_()
        head[32000 - 256:32000].mul_(20)
    ckpt = root / "ckpt"
    ckpt.mkdir()
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(ckpt / "model.safetensors"))
    config = {"model_type": "openvla", "architectures": ["OpenVLAForActionPrediction"],
              "vision_backbone_id": "dinosiglip-vit-so-224px", "use_fused_vision_backbone": True,
              "timm_model_ids": ["tiny_dinov2_reg4", "tiny_siglip"], "timm_num_heads": [2, 2],
              "image_sizes": [SIZE, SIZE], "image_resize_strategy": "resize-naive", "llm_backbone_id": "llama2-7b-pure",
              "text_config": {"model_type": "llama", **text}, "pad_to_multiple_of": PAD, "pad_token_id": 32000,
              "n_action_bins": 256, "norm_stats": STATS}
    (ckpt / "config.json").write_text(json.dumps(config))
    tok = tokenizer()
    tok.save_pretrained(str(ckpt))
    assert model_zoo(["convert", "OpenVLA", "--checkpoint", str(ckpt), "--output", str(root / "lite")]) == 0
    from lite.embodied import OpenVLAPolicy
    return ref, tok, OpenVLAPolicy(str(root / "lite")), root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def reference_action(ref, tok, image, task: str, key: str):
    from lite.embodied.openvla import preprocess_fused
    ids = tok(f"In: What action should the robot take to {task.lower()}?\nOut:")["input_ids"] + [29871]
    pixels = torch.from_numpy(preprocess_fused(image, SIZE)[None])
    tokens = ref.generate_action_tokens(torch.tensor([ids]), pixels, 7)
    return tokens, ref.actions_from_tokens(tokens, key)


def test_vision_rows_equal_reference(openvla):
    from lite.embodied.openvla import preprocess_fused
    ref, _, policy, _ = openvla
    for image in (picture(40, 60, 1), picture(SIZE, SIZE, 2)):
        pixels = preprocess_fused(image, SIZE)
        with torch.no_grad():
            want = ref.patch_rows(torch.from_numpy(pixels[None]))[0].numpy()
        got = policy.image_rows(image)
        assert got.shape == want.shape == ((SIZE // 8) ** 2, 32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_actions_equal_reference(openvla):
    ref, tok, policy, _ = openvla
    seen = set()
    for seed, task, key in ((1, "pick up the spoon", "bridge"), (2, "Put the carrot on the plate", "fractal"),
                            (3, "open the drawer", "bridge")):
        image = picture(30 + seed * 7, 50, seed)
        tokens, want = reference_action(ref, tok, image, task, key)
        assert policy.action_tokens(image, task, 7) == tokens
        assert all(32000 - 256 <= t < 32000 for t in tokens)
        got = policy.act(image, task, unnorm_key=key)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        seen.update(tokens)
    assert len(seen) > 3   # the bins vary


def test_detokenisation_and_statistics(openvla):
    _, _, policy, _ = openvla
    centres = (np.linspace(-1, 1, 256)[:-1] + np.linspace(-1, 1, 256)[1:]) / 2
    got = policy.actions_from_tokens([31999, 31744, 100, 32063, 31872, 31900, 31999], "fractal")
    np.testing.assert_allclose(got, centres[[0, 254, 254, 0, 127, 99, 0]])
    # bridge: the gripper (mask False) keeps the normalised value
    raw = policy.actions_from_tokens([31872] * 7, "bridge")
    c = centres[127]
    want = [0.5 * (c + 1) * (hi - lo) + lo for lo, hi in zip(STATS["bridge"]["action"]["q01"],
                                                           STATS["bridge"]["action"]["q99"])]
    want[6] = c
    np.testing.assert_allclose(raw, want)
    assert policy.action_dim("bridge") == 7
    with pytest.raises(ValueError, match="several datasets"):
        policy.act(picture(SIZE, SIZE, 4), "pick up the spoon")
    with pytest.raises(ValueError, match="not one of"):
        policy.act(picture(SIZE, SIZE, 4), "pick up the spoon", unnorm_key="nope")


def test_preprocessing_views():
    from lite.embodied.openvla import preprocess_fused
    image = np.random.default_rng(5).integers(0, 256, (SIZE, SIZE, 3), np.uint8)
    x = preprocess_fused(image, SIZE)
    unit = image.transpose(2, 0, 1).astype(np.float32) / 255
    mean, std = np.array([0.485, 0.456, 0.406])[:, None, None], np.array([0.229, 0.224, 0.225])[:, None, None]
    np.testing.assert_allclose(x[:3], (unit - mean) / std, atol=1e-5)
    np.testing.assert_allclose(x[3:], unit * 2 - 1, atol=1e-6)
    assert preprocess_fused(picture(50, 20, 6), SIZE).shape == (6, SIZE, SIZE)


def test_cli_and_errors(openvla, tmp_path):
    import contextlib
    import io
    ref, tok, policy, root = openvla
    image = picture(36, 36, 7)
    path = str(tmp_path / "frame.png")
    image.save(path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert model_zoo(["run", "OpenVLA", "--model", str(root / "lite"), "--camera", path, "--prompt",
                          "pick up the spoon", "--unnorm-key", "bridge"]) == 0
    _, want = reference_action(ref, tok, image, "pick up the spoon", "bridge")
    np.testing.assert_allclose(json.loads(out.getvalue())["action"], want, atol=1e-6)
    with pytest.raises(SystemExit, match="one --camera"):
        model_zoo(["run", "OpenVLA", "--model", str(root / "lite"), "--camera", path, "--camera", path,
                   "--prompt", "pick up the spoon"])
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"nope")
    with pytest.raises(ValueError, match="cannot read the image"):
        policy.act(str(bad), "pick up the spoon", "bridge")


def test_bf16_weights_stay_close(openvla):
    from lite.embodied import OpenVLAPolicy
    _, _, policy, root = openvla
    out = root / "lite_bf16"
    assert model_zoo(["convert", "OpenVLA", "--checkpoint", str(root / "ckpt"), "--output", str(out), "--precision",
                      "bf16"]) == 0
    small = OpenVLAPolicy(str(out), weight_format="bfloat16")
    image = picture(SIZE, SIZE, 8)
    a, b = policy.image_rows(image).ravel(), small.image_rows(image).ravel()
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) >= 0.999
    action = small.act(image, "pick up the spoon", "fractal")
    assert action.shape == (7,) and np.all(np.abs(action) <= 1)
