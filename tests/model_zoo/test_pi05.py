"""openpi pi0.5's row on the runtime: a tiny PI05ForConditionalGeneration (SigLIP + Gemma prefix, adaRMS action
expert) with seeded random weights and a word-level tokenizer, converted by `python -m model_zoo convert`;
lite.embodied.Pi05Policy against transformers: every layer's prefix keys / values within 1e-4, the flow-matching
action chunk of sample_actions within 1e-4 (one and two cameras, right-padded batches of two prompts, the step count
changed), the image preprocessing against PI0ImageProcessor's steps on transformers' PIL backend, the prompt against
PI05Processor.build_prompts; compressed weights close to float32; the CLI; bad inputs named."""
from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

NAME = "openpi π0.5"
WORDS = (["<pad>", "<unk>", "<eos>", "<bos>", "<image>", "Task", "State", "Action", ":", ",", ";", "-", "pick", "up",
          "the", "cup", "open", "drawer"] + [str(i) for i in range(256)])
IMAGE_SIZE, PATCH, CHUNK, DIMS = 32, 8, 6, 5
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH) ** 2


@pytest.fixture(scope="module")
def pi05(tmp_path_factory):
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PI05Config, PI05ForConditionalGeneration, PreTrainedTokenizerFast
    root = tmp_path_factory.mktemp("pi05")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<pad>", "<eos>", "<bos>", "<image>")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                        bos_token="<bos>", eos_token="<eos>")
    text = dict(model_type="gemma", hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, vocab_size=len(WORDS), max_position_embeddings=256)
    vision = dict(model_type="siglip_vision_model", hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=48, patch_size=PATCH, image_size=IMAGE_SIZE, vision_use_head=False)
    config = PI05Config(
        vlm_config=dict(model_type="paligemma", text_config=text, vision_config=vision, projection_dim=32,
                        image_token_id=WORDS.index("<image>")),
        dit_config=dict(model_type="gemma", hidden_size=24, num_hidden_layers=2, intermediate_size=40,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256),
        chunk_size=CHUNK, max_action_dim=DIMS, num_inference_steps=3)
    torch.manual_seed(0)
    model = PI05ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)   # the adaRMS Linears start at zero
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", NAME, "--checkpoint", str(root / "ckpt"), "--output", str(root / "lite")]) == 0
    from lite.embodied import Pi05Policy
    return model, tokenizer, Pi05Policy(str(root / "lite")), root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def reference_inputs(policy, ids_rows: list[np.ndarray], cameras: int, pad_to: int = 0):
    """transformers' input_ids / attention_mask: the image tokens, then the prompt, right-padded to `pad_to`."""
    image = WORDS.index("<image>")
    rows = [np.concatenate([np.full(cameras * TOKENS_PER_IMAGE, image), ids]) for ids in ids_rows]
    width = max(pad_to, max(len(r) for r in rows))
    input_ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        input_ids[i, :len(r)], mask[i, :len(r)] = r, 1
    return input_ids, mask


def reference_actions(model, pixels, input_ids, mask, noise, steps=None):
    with torch.no_grad():
        return model.sample_actions(input_ids=torch.from_numpy(input_ids), pixel_values=torch.from_numpy(pixels),
                                    noise=torch.from_numpy(noise), attention_mask=torch.from_numpy(mask),
                                    pixel_attention_mask=torch.ones(pixels.shape[:2], dtype=torch.bool),
                                    num_steps=steps).numpy()


def test_prefix_cache_equals_transformers(pi05):
    model, _, policy, _ = pi05
    rng = np.random.default_rng(1)
    for cameras in (1, 2):
        pixels = rng.standard_normal((1, cameras, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
        text_ids = policy.prompt_ids("pick up the cup", [0.25, -0.5, 0.99])
        input_ids, mask = reference_inputs(policy, [text_ids], cameras)
        cache, _ = policy.prefix_cache(pixels, text_ids[None], mask)
        with torch.no_grad():
            embeds = model.model.embed_prefix(torch.from_numpy(input_ids), torch.from_numpy(pixels),
                                              torch.ones((1, cameras), dtype=torch.bool))
            want = model.model.vlm(inputs_embeds=embeds, attention_mask=torch.from_numpy(mask),
                                   position_ids=torch.from_numpy(mask.cumsum(-1) - 1),
                                   token_type_ids=torch.zeros(mask.shape, dtype=torch.long), use_cache=True).cache
        for i, layer in enumerate(want.layers):
            for got, ref in ((cache[2 * i], layer.keys), (cache[2 * i + 1], layer.values)):
                ref = ref.numpy().transpose(0, 2, 1, 3).reshape(got.shape)   # [B, kv, T, D] -> [B, T, kv x D]
                np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_policy_actions_equal_transformers(pi05):
    model, _, policy, _ = pi05
    rng = np.random.default_rng(2)
    for cameras, steps in ((1, None), (2, None), (2, 5)):
        pixels = rng.standard_normal((1, cameras, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
        text_ids = policy.prompt_ids("open the drawer", rng.uniform(-1, 1, 4))
        noise = rng.standard_normal((1, CHUNK, DIMS)).astype(np.float32)
        input_ids, mask = reference_inputs(policy, [text_ids], cameras, pad_to=len(text_ids) + 40)
        want = reference_actions(model, pixels, input_ids, mask, noise, steps)
        got = policy.sample_actions(pixels, text_ids[None], noise, steps=steps)   # unpadded: the same actions
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert np.abs(want - noise).max() > 0.1   # the flow moved the noise


def test_padded_batch_equals_transformers(pi05):
    model, _, policy, _ = pi05
    rng = np.random.default_rng(3)
    pixels = rng.standard_normal((2, 2, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    rows = [policy.prompt_ids("pick up the cup", [0.1, 0.2]), policy.prompt_ids("open the drawer", None)]
    assert len(rows[0]) != len(rows[1])
    input_ids, mask = reference_inputs(policy, rows, 2)
    noise = rng.standard_normal((2, CHUNK, DIMS)).astype(np.float32)
    want = reference_actions(model, pixels, input_ids, mask, noise)
    text = input_ids[:, 2 * TOKENS_PER_IMAGE:]
    got = policy.sample_actions(pixels, text, noise, attention_mask=mask)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    alone = policy.sample_actions(pixels[1:], rows[1][None], noise[1:])
    np.testing.assert_allclose(got[1], alone[0], rtol=1e-4, atol=1e-4)


def test_preprocessing_and_prompt_match_the_processor(pi05):
    from transformers.image_processing_backends import PilBackend
    from transformers.image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, PILImageResampling
    from transformers.models.pi05.processing_pi05 import PI05Processor
    from lite.embodied.pi05 import preprocess_image

    class Pi0Pil(PilBackend):   # PI0ImageProcessor's settings on the PIL backend (its own needs torchvision)
        resample = PILImageResampling.BICUBIC
        image_mean, image_std = IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD
        size = {"max_height": IMAGE_SIZE, "max_width": IMAGE_SIZE}
        default_to_square, do_resize, do_rescale, do_normalize, do_convert_rgb = False, True, True, True, True
        pad_size = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
        do_pad = True

    ref = Pi0Pil()
    for h, w in ((48, 80), (90, 30), (32, 32), (20, 24)):
        image = picture(h, w, h + w)
        want = ref(images=[image], return_tensors="np")["pixel_values"][0]
        got = preprocess_image(image, IMAGE_SIZE)
        assert got.shape == want.shape == (3, IMAGE_SIZE, IMAGE_SIZE)
        np.testing.assert_allclose(got, want, atol=2e-2)   # PIL's bicubic on uint8 vs float: a code unit or so
        assert np.mean(np.abs(got - want)) < 2e-3
    model, tokenizer, policy, _ = pi05
    fake = types.SimpleNamespace(image_token="<image>", image_seq_length=TOKENS_PER_IMAGE, tokenizer=tokenizer)
    state = torch.tensor([[-1.5, -1.0, -0.0039, 0.0, 0.5, 0.99, 1.0, 2.0]])
    for task, s in (("pick_up the\ncup ", state), ("open the drawer", None)):
        prompt = PI05Processor.build_prompts(fake, [task], [[None, None]], s)[0]
        assert prompt.startswith("<image>" * 2 * TOKENS_PER_IMAGE)
        want = tokenizer(prompt[len("<image>") * 2 * TOKENS_PER_IMAGE:], add_special_tokens=False)["input_ids"]
        got = policy.prompt_ids(task, None if s is None else s[0].numpy()).tolist()
        assert got == want


def test_act_and_cli(pi05, tmp_path):
    model, _, policy, root = pi05
    paths = []
    for i, (h, w) in enumerate(((40, 56), (32, 32))):
        paths.append(str(tmp_path / f"cam{i}.png"))
        picture(h, w, i).save(paths[-1])
    state = [0.3, -0.7, 0.05]
    actions = policy.act(paths, "pick up the cup", state, seed=4)
    assert actions.shape == (CHUNK, DIMS) and np.all(np.isfinite(actions))
    from lite.embodied.pi05 import preprocess_image
    pixels = np.stack([preprocess_image(p, IMAGE_SIZE) for p in paths])[None]
    text_ids = policy.prompt_ids("pick up the cup", state)
    input_ids, mask = reference_inputs(policy, [text_ids], 2)
    noise = np.random.default_rng(4).standard_normal((1, CHUNK, DIMS)).astype(np.float32)
    np.testing.assert_allclose(actions, reference_actions(model, pixels, input_ids, mask, noise)[0], rtol=1e-4,
                               atol=1e-4)
    assert not np.allclose(policy.act(paths, "open the drawer", state, seed=4), actions, atol=1e-3)

    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert model_zoo(["run", NAME, "--model", str(root / "lite"), "--camera", paths[0], "--camera", paths[1],
                          "--prompt", "pick up the cup", "--state", "0.3,-0.7,0.05", "--seed", "4"]) == 0
    np.testing.assert_allclose(np.array(json.loads(out.getvalue())["actions"]), actions, atol=2e-6)
    with pytest.raises(SystemExit, match="--camera"):
        model_zoo(["run", NAME, "--model", str(root / "lite"), "--prompt", "pick up the cup"])
    with pytest.raises(SystemExit, match="--state"):
        model_zoo(["run", NAME, "--model", str(root / "lite"), "--camera", paths[0], "--state", "a,b"])


def test_bad_inputs_are_named(pi05, tmp_path):
    _, _, policy, _ = pi05
    ids = policy.prompt_ids("pick up the cup")[None]
    with pytest.raises(ValueError, match="pixel_values must be"):
        policy.prefix_cache(np.zeros((1, 3, IMAGE_SIZE, IMAGE_SIZE), np.float32), ids)
    with pytest.raises(ValueError, match="attention_mask must be"):
        policy.prefix_cache(np.zeros((1, 1, 3, IMAGE_SIZE, IMAGE_SIZE), np.float32), ids, np.ones((1, 3), np.int64))
    with pytest.raises(ValueError, match="noise must be"):
        policy.sample_actions(np.zeros((1, 1, 3, IMAGE_SIZE, IMAGE_SIZE), np.float32), ids,
                              np.zeros((1, CHUNK + 1, DIMS), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        policy.prompt_ids("pick up the cup", [0.1, float("nan")])
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a picture")
    with pytest.raises(ValueError, match="cannot read the image"):
        policy.act([str(bad)], "pick up the cup")
    with pytest.raises(ValueError, match="at least one camera"):
        policy.act([], "pick up the cup")


@pytest.mark.parametrize("precision,cosine", [("bf16", 0.999), ("int8", 0.99)])
def test_compressed_weights_stay_close(pi05, precision, cosine):
    from lite.embodied import Pi05Policy
    model, _, policy, root = pi05
    out = root / f"lite_{precision}"
    assert model_zoo(["convert", NAME, "--checkpoint", str(root / "ckpt"), "--output", str(out), "--precision",
                      precision]) == 0
    small = Pi05Policy(str(out), weight_format={"bf16": "bfloat16", "int8": "int8"}[precision])
    rng = np.random.default_rng(5)
    pixels = rng.standard_normal((1, 2, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    ids = policy.prompt_ids("pick up the cup", [0.5])[None]
    noise = rng.standard_normal((1, CHUNK, DIMS)).astype(np.float32)
    a, b = policy.sample_actions(pixels, ids, noise), small.sample_actions(pixels, ids, noise)
    delta_a, delta_b = (a - noise).ravel(), (b - noise).ravel()   # what the model added to the noise
    assert float(delta_a @ delta_b / np.linalg.norm(delta_a) / np.linalg.norm(delta_b)) >= cosine


def test_bf16_products_stay_close(pi05):
    """precision_mode preferred_bf16 (bfloat16 products where the CPU has them, float32 elsewhere)."""
    from lite.embodied import Pi05Policy
    _, _, policy, root = pi05
    fast = Pi05Policy(str(root / "lite"), precision_mode="preferred_bf16")
    rng = np.random.default_rng(6)
    pixels = rng.standard_normal((1, 1, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    ids = policy.prompt_ids("open the drawer", [0.2, -0.4])[None]
    noise = rng.standard_normal((1, CHUNK, DIMS)).astype(np.float32)
    a, b = policy.sample_actions(pixels, ids, noise), fast.sample_actions(pixels, ids, noise)
    delta_a, delta_b = (a - noise).ravel(), (b - noise).ravel()
    assert float(delta_a @ delta_b / np.linalg.norm(delta_a) / np.linalg.norm(delta_b)) >= 0.999
    with pytest.raises(ValueError, match="precision_mode"):
        Pi05Policy(str(root / "lite"), precision_mode="fp8")
