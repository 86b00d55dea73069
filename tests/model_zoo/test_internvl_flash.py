"""InternVL3.5-Flash's rows on the runtime: a tiny InternVLChatModel-layout checkpoint (model_zoo.reference.
internvl_flash, the PyTorch reference: InternViT with a fused qkv and q / k norms, mlp1, mlp2, the Visual Resolution
Router; a Qwen3 language model) with seeded random weights, saved as the original project lays it out (config.json
with llm_config, model_type internvl_chat, flash thresholds) and converted by `python -m model_zoo convert`; then
TextEngine chats with images of several shapes: both views and the router's probabilities within 1e-4, the tiles the
router compresses, and greedy tokens equal to the reference's flash generate (one image, and two images routed
together)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

from tests.model_zoo.test_internvl import SPECIAL, WORDS, internvl_tokenizer, picture   # the same ones

TILE, PATCH = 32, 4
VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=TILE,
              patch_size=PATCH, qkv_bias=True, qk_normalization=True, norm_type="layer_norm", layer_norm_eps=1e-6,
              hidden_act="gelu", use_mean_pooling=True)


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    from safetensors.torch import save_file
    from transformers import Qwen3Config

    from model_zoo.reference.internvl_flash import InternVLFlash
    root = tmp_path_factory.mktemp("internvl_flash")
    tokenizer, ids = internvl_tokenizer()
    llm = Qwen3Config(vocab_size=len(WORDS) + len(SPECIAL), hidden_size=32, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      max_position_embeddings=512, eos_token_id=ids["<|im_end|>"], tie_word_embeddings=False)
    torch.manual_seed(5)
    model = InternVLFlash(VISION, llm, flash_relative_threshold=0.5, flash_absolute_threshold=0.0).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "gating" in name or "pooling" in name else 0.05))
    model.language_model.generation_config.eos_token_id = ids["<|im_end|>"]
    ckpt = root / "ckpt"
    ckpt.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(ckpt / "model.safetensors"))
    config = dict(model_type="internvl_chat", architectures=["InternVLChatModel"], vision_config=VISION,
                  llm_config=llm.to_dict(), downsample_ratio=0.5, select_layer=-1, ps_version="v2",
                  template="internvl2_5", force_image_size=TILE, flash_mode=True, flash_relative_threshold=0.5,
                  flash_absolute_threshold=0.0)
    (ckpt / "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(str(ckpt))
    assert model_zoo(["convert", "InternVL3_5-1B-Flash", "--checkpoint", str(ckpt), "--output",
                      str(root / "lite")]) == 0
    return model, tokenizer, ids, root


def test_internvl_flash_views_and_router_equal_reference(flash):
    from lite.internvl_image import InternVLFlashVision
    model, _, _, root = flash
    tower = InternVLFlashVision.from_dir(str(root / "lite" / "vision.ms"), str(root / "lite"))
    assert tower.flash
    compressed = []
    for image in (picture(40, 90, 1), picture(100, 30, 2), picture(64, 70, 4)):
        pixels = tower.tiles(image)
        large, small, gate = tower.views(image)
        want_large, want_small, want_gate = model.image_views(torch.from_numpy(pixels))
        for got, want in ((large, want_large), (small, want_small), (gate, want_gate)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4 * max(1.0, float(want.abs().max())))
        picks = tower.small_tiles(gate)
        assert picks.tolist() == model.compress(want_gate).tolist()
        compressed.append(picks)
        rows, _ = tower(image)
        assert rows.shape[0] == sum(small.shape[1] if p else large.shape[1] for p in picks)
    assert any(p.any() for p in compressed) and any((~p).any() for p in compressed)   # both views in use


def test_internvl_flash_tokens_equal_reference(flash):
    from lite.internvl_image import InternVLFlashVision
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    model, tokenizer, ids, root = flash
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=128)
    assert isinstance(engine.vision, InternVLFlashVision)
    images = [picture(40, 90, 1), picture(100, 30, 2), picture(33, 33, 3), picture(64, 70, 4)]
    chats = [[{"role": "user", "content": [{"type": "image", "image": im},
                                           {"type": "text",
                                            "text": "What is in this picture ?"}]}] for im in images[:2]]
    chats.append([{"role": "user", "content": [{"type": "text", "text": "Describe the two images"},
                                               {"type": "image", "image": images[2]},
                                               {"type": "image", "image": images[3]}]}])
    outs = engine.generate(chats, SamplingParams(max_new_tokens=8, temperature=0))
    per_tile = (TILE // PATCH // 2) ** 2
    for chat, out, pics in zip(chats, outs, ([images[0]], [images[1]], images[2:])):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        tiles = [engine.vision.tiles(p) for p in pics]
        for t in tiles:   # the project's chat: <img>, a full run of context tokens per tile, </img>
            text = text.replace("<IMG_CONTEXT>", "<img>" + "<CTX>" * (per_tile * len(t)) + "</img>", 1)
        input_ids = tokenizer(text.replace("<CTX>", "<IMG_CONTEXT>"), return_tensors="pt")["input_ids"]
        want = model.generate(torch.from_numpy(np.concatenate(tiles)), input_ids, ids["<IMG_CONTEXT>"], 8)
        assert out.token_ids == want
        assert out.prompt_tokens < input_ids.shape[1] or not model.compress(
            model.image_views(torch.from_numpy(np.concatenate(tiles)))[2]).any()
