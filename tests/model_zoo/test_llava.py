"""LLaVA-1.5's row on the runtime: a tiny LlavaForConditionalGeneration (CLIP tower + Llama decoder) with seeded random
weights, its tokenizer, chat template and LlavaImageProcessor config (pad to square), converted by `python -m
model_zoo convert LLaVA`, then chats with image parts through TextEngine: greedy tokens equal to transformers'
generate on what LlavaProcessor gives (two prompts with images of other sizes and shapes, one with two images, one
continuous batch); the vision graph (tower + projector) equal to transformers' get_image_features; a text-only chat;
a corrupt image is a clear error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

WORDS = "<unk> <pad> USER ASSISTANT : What is in this picture ? Describe the two images and a cat dog".split()
SPECIAL = ["<s>", "</s>", "<image>"]
TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] | upper }}: {% if message['content'] is "
            "string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == "
            "'image' %}<image>\n{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %} "
            "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")


VISION = dict(model_type="clip_vision_model", hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
              intermediate_size=64, patch_size=8, image_size=32, projection_dim=16)


def llava_tokenizer():
    """A word-level fast tokenizer with <s>, </s>, <image> and the chat template; (tokenizer, special ids)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>")
    tokenizer.chat_template = TEMPLATE
    return tokenizer, dict(zip(SPECIAL, tokenizer.convert_tokens_to_ids(SPECIAL)))


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    from transformers import LlavaConfig, LlavaForConditionalGeneration
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil
    root = tmp_path_factory.mktemp("llava")
    tokenizer, ids = llava_tokenizer()
    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config=VISION,
        text_config=dict(model_type="llama", vocab_size=len(WORDS) + len(SPECIAL), hidden_size=32,
                         intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"]),
        image_token_index=ids["<image>"], vision_feature_layer=-2, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", image_seq_length=16)
    model = LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.generation_config.eos_token_id = ids["</s>"]
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = LlavaImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, do_pad=True)
    processor.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", "LLaVA", "--checkpoint", str(root / "ckpt"), "--output", str(root / "lite")]) == 0
    return model, tokenizer, processor, ids, root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def reference(model, tokenizer, processor, messages, images, new_tokens):
    """transformers' generate on LlavaProcessor's inputs (each <image> expanded to the tower's 16 rows)."""
    from transformers import LlavaProcessor
    proc = LlavaProcessor(image_processor=processor, tokenizer=tokenizer, patch_size=8,
                          vision_feature_select_strategy="default", chat_template=TEMPLATE,
                          num_additional_image_tokens=1)   # the class token, dropped again by "default"
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = proc(images=images, text=text, return_tensors="pt", add_special_tokens=False)
    assert int((inputs["input_ids"] == model.config.image_token_index).sum()) == 16 * len(images)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def test_llava_greedy_tokens_equal_transformers(llava):
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    model, tokenizer, processor, ids, root = llava
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=64)
    assert engine.vision is not None and not engine.vision.mrope
    one, two, three = picture(50, 70, 1), picture(90, 40, 2), picture(32, 32, 3)
    chats = [[{"role": "user", "content": [{"type": "image", "image": one},
                                           {"type": "text", "text": "What is in this picture ?"}]}],
             [{"role": "user", "content": [{"type": "text", "text": "Describe the two images"},
                                           {"type": "image", "image": two}, {"type": "image", "image": three}]}],
             [{"role": "user", "content": "a cat and a dog"}]]
    outs = engine.generate(chats, SamplingParams(max_new_tokens=10, temperature=0))
    assert all(o.token_ids for o in outs)
    for chat, images, out in zip(chats, ([one], [two, three], []), outs):
        if images:
            want = reference(model, tokenizer, processor, chat, images, 10)
        else:
            text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            input_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                want = model.generate(input_ids=input_ids, max_new_tokens=10,
                                      do_sample=False)[0, input_ids.shape[1]:].tolist()
        assert out.token_ids == want


def test_llava_vision_graph_equals_transformers(llava):
    from lite.llava_image import LlavaVision
    model, _, processor, _, root = llava
    tower = LlavaVision(str(root / "lite" / "vision.ms"), model.config.to_dict(), processor.to_dict())
    for image in (picture(50, 70, 4), picture(33, 90, 5)):
        rows, _ = tower(image)
        pixels = processor(images=[image], return_tensors="pt")["pixel_values"]
        np.testing.assert_allclose(tower.preprocess(image), pixels[0].numpy(), atol=1e-6)
        with torch.no_grad():
            want = model.get_image_features(pixel_values=pixels)
        want = (want.pooler_output if hasattr(want, "pooler_output") else want)
        want = torch.cat(list(want)) if isinstance(want, (list, tuple)) else want.reshape(-1, want.shape[-1])
        np.testing.assert_allclose(rows, want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_llava_corrupt_image_is_named(llava, tmp_path):
    from lite.llm.text_engine import TextEngine
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff not a jpeg")
    engine = TextEngine.from_pretrained(str(llava[4] / "lite"), num_blocks=16)
    with pytest.raises(ValueError, match="image"):
        engine.add([{"role": "user", "content": [{"type": "image", "image": str(bad)},
                                                 {"type": "text", "text": "What is in this picture ?"}]}])


PINPOINTS = [[32, 64], [64, 32], [64, 64], [96, 32]]


@pytest.fixture(scope="module")
def llava_next(tmp_path_factory):
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
    root = tmp_path_factory.mktemp("llava_next")
    tokenizer, ids = llava_tokenizer()
    torch.manual_seed(1)
    config = LlavaNextConfig(
        vision_config=VISION,
        text_config=dict(model_type="mistral", vocab_size=len(WORDS) + len(SPECIAL), hidden_size=32,
                         intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"]),
        image_token_index=ids["<image>"], vision_feature_layer=-2, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", image_grid_pinpoints=PINPOINTS)
    model = LlavaNextForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.generation_config.eos_token_id = ids["</s>"]
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = LlavaNextImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                           image_grid_pinpoints=PINPOINTS)
    processor.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", "llava-v1.6", "--checkpoint", str(root / "ckpt"), "--output", str(root / "lite")]) == 0
    return model, tokenizer, processor, ids, root


def test_llava_next_anyres_tokens_equal_transformers(llava_next):
    """AnyRes: images of several shapes pick different pinpoints (wide, tall, square, a 3-tile column); the packed
    rows equal transformers' get_image_features and greedy tokens equal generate on LlavaNextProcessor's inputs."""
    from transformers import LlavaNextProcessor

    from lite.llava_image import LlavaVision
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    model, tokenizer, processor, ids, root = llava_next
    proc = LlavaNextProcessor(image_processor=processor, tokenizer=tokenizer, patch_size=8,
                              vision_feature_select_strategy="default", chat_template=TEMPLATE,
                              num_additional_image_tokens=1)
    tower = LlavaVision(str(root / "lite" / "vision.ms"), model.config.to_dict(), processor.to_dict())
    images = [picture(50, 120, 11), picture(130, 45, 12), picture(70, 70, 13), picture(200, 60, 14)]
    for image in images:
        rows, _ = tower(image)
        ref = processor(images=[image], return_tensors="pt")
        pixels, grid, size = tower.tiler.tiles(image)
        np.testing.assert_allclose(pixels, ref["pixel_values"][0].numpy(), atol=1e-6)
        with torch.no_grad():
            want = model.get_image_features(pixel_values=ref["pixel_values"], image_sizes=ref["image_sizes"])
        want = want.pooler_output if hasattr(want, "pooler_output") else want
        want = torch.cat(list(want)) if isinstance(want, (list, tuple)) else want
        np.testing.assert_allclose(rows, want.numpy(), rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=96)
    chats = [[{"role": "user", "content": [{"type": "image", "image": im},
                                           {"type": "text", "text": "What is in this picture ?"}]}] for im in images[:3]]
    outs = engine.generate(chats, SamplingParams(max_new_tokens=8, temperature=0))
    for chat, image, out in zip(chats, images, outs):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        inputs = proc(images=[image], text=text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            want = model.generate(**inputs, max_new_tokens=8, do_sample=False)
        assert out.token_ids == want[0, inputs["input_ids"].shape[1]:].tolist()


def test_llava_n_choices_encode_the_image_once(llava):
    """SamplingParams(n=3) on a chat with an image: the tower runs once for the three choices (seeded sampling:
    each choice its own draws, the greedy ones equal)."""
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    root = llava[4]
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=64)
    calls = []
    tower = engine.vision
    original = tower.__call__
    engine.vision = type("Counting", (), {"mrope": False, "__call__": lambda self, im: calls.append(1) or original(im),
                                          "last_deepstack": None})()
    chat = [{"role": "user", "content": [{"type": "image", "image": picture(40, 50, 9)},
                                         {"type": "text", "text": "What is in this picture ?"}]}]
    out = engine.generate([chat], SamplingParams(max_new_tokens=5, temperature=0, n=3))[0]
    assert len(calls) == 1 and len(out.choices) == 3
    assert out.choices[0].token_ids == out.choices[1].token_ids == out.choices[2].token_ids
