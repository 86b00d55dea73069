"""InternVL3's rows on the runtime: a tiny InternVLForConditionalGeneration (InternViT with q/k norms and layer scale,
pixel shuffle, projector, a Qwen2 decoder with dynamic NTK RoPE) with seeded random weights, its tokenizer, chat
template and GotOcr2 image processor config (tiling on), converted by `python -m model_zoo convert InternVL3-1B`;
TextEngine chats with images of several aspect ratios (other tile grids, a thumbnail) against transformers: the
tiles equal the image processor's, the vision graph equals get_image_features, greedy tokens equal generate on
InternVLProcessor's expansion (<img>, 4 rows a tile, </img>)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

SPECIAL = ["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>"]
WORDS = "<unk> <pad> system user assistant What is in this picture ? Describe the two images".split()
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
            "<IMG_CONTEXT>\n{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TILE = 32


def internvl_tokenizer():
    """A word-level fast tokenizer with <img>, </img>, <IMG_CONTEXT> and the chat template; (tokenizer, ids)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<|im_end|>")
    tokenizer.chat_template = TEMPLATE
    return tokenizer, dict(zip(SPECIAL, tokenizer.convert_tokens_to_ids(SPECIAL)))


@pytest.fixture(scope="module")
def internvl(tmp_path_factory):
    from transformers import InternVLConfig, InternVLForConditionalGeneration
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    root = tmp_path_factory.mktemp("internvl")
    tokenizer, ids = internvl_tokenizer()
    torch.manual_seed(2)
    config = InternVLConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=[TILE, TILE], patch_size=[8, 8], use_qk_norm=True, use_mean_pooling=False,
                           layer_scale_init_value=0.5, attention_bias=True),
        text_config=dict(model_type="qwen2", vocab_size=len(WORDS) + len(SPECIAL), hidden_size=32,
                         intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rope_theta=1000000.0,
                         rope_scaling={"rope_type": "dynamic", "factor": 2.0}, eos_token_id=ids["<|im_end|>"]),
        image_token_id=ids["<IMG_CONTEXT>"], image_seq_length=4, downsample_ratio=0.5, projector_hidden_act="gelu",
        vision_feature_layer=-1, vision_feature_select_strategy="default")
    model = InternVLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = GotOcr2ImageProcessorPil(size={"height": TILE, "width": TILE}, crop_to_patches=True, min_patches=1,
                                         max_patches=6, image_mean=[0.485, 0.456, 0.406],
                                         image_std=[0.229, 0.224, 0.225])
    processor.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", "InternVL3-1B", "--checkpoint", str(root / "ckpt"), "--output",
                      str(root / "lite")]) == 0
    return model, tokenizer, processor, ids, root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def test_internvl_tokens_equal_transformers(internvl):
    from lite.internvl_image import InternVLVision
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    model, tokenizer, processor, ids, root = internvl
    tower = InternVLVision.from_dir(str(root / "lite" / "vision.ms"), str(root / "lite"))
    images = [picture(40, 90, 1), picture(100, 30, 2), picture(33, 33, 3), picture(64, 70, 4)]
    counts = []
    for image in images:
        ref = processor(images=[image], return_tensors="pt")
        tiles = tower.tiles(image)
        counts.append(int(ref["num_patches"][0]))
        np.testing.assert_allclose(tiles, ref["pixel_values"].numpy(), atol=1e-6)
        rows, _ = tower(image)
        with torch.no_grad():
            want = model.get_image_features(pixel_values=ref["pixel_values"])
        want = (want.pooler_output if hasattr(want, "pooler_output") else want).reshape(-1, rows.shape[1])
        np.testing.assert_allclose(rows, want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    assert len(set(counts)) > 2   # the shapes picked different grids (with thumbnails)

    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=96)
    chats = [[{"role": "user", "content": [{"type": "image", "image": im},
                                           {"type": "text", "text": "What is in this picture ?"}]}] for im in images[:2]]
    chats.append([{"role": "user", "content": [{"type": "text", "text": "Describe the two images"},
                                               {"type": "image", "image": images[2]},
                                               {"type": "image", "image": images[3]}]}])
    outs = engine.generate(chats, SamplingParams(max_new_tokens=8, temperature=0))
    for chat, out, pics in zip(chats, outs, ([images[0]], [images[1]], images[2:])):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        ref = processor(images=pics, return_tensors="pt")
        for n in ref["num_patches"].tolist():   # InternVLProcessor's expansion
            text = text.replace("<IMG_CONTEXT>", "<img>" + "<CTX>" * (4 * n) + "</img>", 1)
        input_ids = tokenizer(text.replace("<CTX>", "<IMG_CONTEXT>"), return_tensors="pt")["input_ids"]
        with torch.no_grad():
            want = model.generate(input_ids=input_ids, pixel_values=ref["pixel_values"], max_new_tokens=8,
                                  do_sample=False)
        assert out.token_ids == want[0, input_ids.shape[1]:].tolist()


def test_internvl_vision_graph_with_default_internvit_options(tmp_path):
    """InternViT-300M's own options (no q/k norms, no q/k/v biases, mean pooling: no final norm) through the same
    builder, against get_image_features on two tiles."""
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    from lite import Context, Model, ModelType
    torch.manual_seed(3)
    config = InternVLConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                           image_size=[TILE, TILE], patch_size=[8, 8]),
        text_config=dict(model_type="qwen2", vocab_size=32, hidden_size=24, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1),
        image_token_id=5, image_seq_length=4)
    model = InternVLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(str(tmp_path / "ckpt"))
    out = str(tmp_path / "vision.ms")
    Converter().convert(FmkType.HF, str(tmp_path / "ckpt"), out, verify_build=False,
                        checkpoint_options=CheckpointOptions(head="vision"))
    graph = Model()
    graph.build_from_file(out, ModelType.MINDIR_LITE, Context())
    pixels = np.random.default_rng(4).standard_normal((2, 3, TILE, TILE)).astype(np.float32)
    got = graph.predict({"pixel_values": pixels})[0].get_data_to_numpy()
    with torch.no_grad():
        want = model.get_image_features(pixel_values=torch.from_numpy(pixels))
    want = (want.pooler_output if hasattr(want, "pooler_output") else want).reshape(-1, got.shape[1])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))
