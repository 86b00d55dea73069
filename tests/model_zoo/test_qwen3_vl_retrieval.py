"""Qwen3-VL-Embedding / Qwen3-VL-Reranker rows on the runtime: a tiny Qwen3VLForConditionalGeneration with seeded
random weights, a tokenizer that appends <|endoftext|> (as the Embedding checkpoint's does) and a Qwen3-VL-style chat
template, converted by `python -m model_zoo convert`; lite.llm.vl_retrieval against transformers following the
published wrapper's protocol (its conversations, the image resized to multiples of 32 within its pixel bounds, then
the image processor without resizing, last-token state / yes-no logits): embeddings of text, image and image+text
inputs within 1e-4 (Matryoshka cut too), reranker scores within 1e-5; video inputs refused."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>",
           "<|endoftext|>"]
WORDS = ("<unk> <pad> system user assistant Represent the user's input . NULL a cat dog photo of Judge whether "
         "Document meets requirements based on Query and Instruct provided Note that answer can only be yes or no "
         "< > : Given search query , retrieve relevant candidates answer \" '").split()
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
            "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% endif %}")
VISION = dict(depth=3, hidden_size=32, intermediate_size=40, num_heads=2, patch_size=16, temporal_patch_size=2,
              spatial_merge_size=2, num_position_embeddings=16, out_hidden_size=32, deepstack_visual_indexes=[0, 1],
              hidden_act="gelu_pytorch_tanh")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    root = tmp_path_factory.mktemp("qwen3_vl_retrieval")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    eot = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", special_tokens=[("<|endoftext|>",
                                                                                                    eot)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<|im_end|>")
    tokenizer.chat_template = TEMPLATE
    ids = dict(zip(SPECIAL, tokenizer.convert_tokens_to_ids(SPECIAL)))
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(
        text_config=dict(vocab_size=len(WORDS) + len(SPECIAL), hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, head_dim=16,
                         eos_token_id=ids["<|im_end|>"], rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                                          "mrope_section": [4, 2, 2],
                                                                          "mrope_interleaved": True}),
        vision_config=VISION, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = Qwen2VLImageProcessorPil(patch_size=16)
    processor.save_pretrained(str(root / "ckpt"))
    return model, tokenizer, ids, root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def reference_last(model, tokenizer, ids, conversation, images, logits: bool):
    """The wrapper's protocol on transformers: template text, images resized to multiples of 32 within its bounds,
    the image processor without resizing, each image-pad repeated for its merged patches, the tokenizer with its
    special tokens; the last position's final hidden state (or logits)."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    from lite.llm.vl_retrieval import MAX_PIXELS, MIN_PIXELS
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    kwargs = {}
    if images:
        resized = []
        for im in images:
            h, w = smart_resize(im.height, im.width, factor=32, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
            resized.append(im.resize((w, h), Image.BICUBIC))
        pixels = Qwen2VLImageProcessorPil(patch_size=16, do_resize=False)(images=resized, return_tensors="pt")
        for grid in pixels["image_grid_thw"]:
            text = text.replace("<|image_pad|>", "<|placeholder|>" * (int(grid.prod()) // 4), 1)
        text = text.replace("<|placeholder|>", "<|image_pad|>")
        kwargs = dict(pixel_values=pixels["pixel_values"], image_grid_thw=pixels["image_grid_thw"])
    input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert int(input_ids[0, -1]) == ids["<|endoftext|>"]
    with torch.no_grad():
        if logits:
            out = model(input_ids=input_ids, mm_token_type_ids=(input_ids == ids["<|image_pad|>"]).int(), **kwargs)
            return out.logits[0, -1].numpy()
        out = model.model(input_ids=input_ids, mm_token_type_ids=(input_ids == ids["<|image_pad|>"]).int(), **kwargs)
        return out.last_hidden_state[0, -1].numpy()


def test_vl_embedder_equals_the_reference_protocol(checkpoint):
    from lite.llm.vl_retrieval import VLEmbedder
    model, tokenizer, ids, root = checkpoint
    out = str(root / "embed")
    assert model_zoo(["convert", "Qwen3-VL-Embedding-2B", "--checkpoint", str(root / "ckpt"), "--output", out]) == 0
    embedder = VLEmbedder.from_pretrained(out, num_blocks=64)
    cat, dog = picture(50, 70, 1), picture(120, 90, 2)
    inputs = ["a photo of a cat", {"image": cat}, {"image": dog, "text": "a dog"},
              {"text": "a cat", "instruction": "Retrieve relevant candidates"}, {}]
    got = embedder.embed(inputs)
    for row, item in zip(got, inputs):
        item = {"text": item} if isinstance(item, str) else item
        conv = VLEmbedder.conversation(item.get("text"), item.get("image"), item.get("instruction"))
        want = reference_last(model, tokenizer, ids, conv, [item["image"]] if "image" in item else [], False)
        np.testing.assert_allclose(row, want / np.linalg.norm(want), rtol=1e-4, atol=1e-5)
    assert conv[1]["content"] == [{"type": "text", "text": "NULL"}]
    cut = embedder.embed(inputs[:2], dim=16)
    full = got[:2, :16]
    np.testing.assert_allclose(cut, full / np.linalg.norm(full, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="video"):
        embedder.embed([{"video": ["frame.png"]}])


def test_vl_reranker_equals_the_reference_protocol(checkpoint):
    from lite.llm.vl_retrieval import VLReranker
    model, tokenizer, ids, root = checkpoint
    out = str(root / "rerank")
    assert model_zoo(["convert", "Qwen3-VL-Reranker-2B", "--checkpoint", str(root / "ckpt"), "--output", out]) == 0
    reranker = VLReranker.from_pretrained(out, num_blocks=64)
    cat = picture(64, 64, 3)
    query = "a photo of a cat"
    docs = ["a cat", {"image": cat}, {"image": cat, "text": "a dog"}]
    scores = reranker.score(query, docs)
    yes, no = tokenizer.convert_tokens_to_ids(["yes", "no"])
    for score, doc in zip(scores, docs):
        doc_d = {"text": doc} if isinstance(doc, str) else doc
        conv = reranker.conversation(query, doc)
        logits = reference_last(model, tokenizer, ids, conv, [doc_d["image"]] if "image" in doc_d else [], True)
        assert score == pytest.approx(1 / (1 + math.exp(-(float(logits[yes]) - float(logits[no])))), abs=1e-5)
    image_query = reranker.score({"image": cat}, ["a cat"])
    assert 0.0 < image_query[0] < 1.0
