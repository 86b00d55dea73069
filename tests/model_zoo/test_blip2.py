"""BLIP-2's row on the runtime: a tiny Blip2ForConditionalGeneration (EVA-style ViT, Q-Former with cross-attention
every second layer, OPT decoder) with seeded random weights, an OPT-style tokenizer (its bos "</s>" prepended, the
processor's <image> token) and BlipImageProcessor config, converted by `python -m model_zoo convert BLIP-2`; then
lite.blip.Blip2Captioner on the LLM engine against transformers: the image side (ViT + Q-Former + projection)
within 1e-4 of get_image_features' path, the OPT step graph's logits within 1e-4 of OPTForCausalLM on a text prompt,
greedy captions token for token with and without a question prompt (Blip2Processor's inputs), several images in
one batch, the CLI; a corrupt image is named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

WORDS = "<pad> <unk> Question : what is in the picture ? Answer a cat dog on mat sat two cats sleeping couch".split()
SPECIAL = ["</s>", "<image>"]
QUERIES = 4
NOISE = 0.3


def opt_tokenizer():
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    bos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="</s> $A", special_tokens=[("</s>", bos)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="</s>",
                                        eos_token="</s>")
    tokenizer.image_token = AddedToken("<image>", normalized=False, special=True)   # as Blip2Processor reads it
    return tokenizer, bos, tok.token_to_id("<image>")


@pytest.fixture(scope="module")
def blip2(tmp_path_factory):
    from transformers import Blip2Config, Blip2ForConditionalGeneration
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil
    root = tmp_path_factory.mktemp("blip2")
    tokenizer, bos, image_token = opt_tokenizer()
    torch.manual_seed(0)
    config = Blip2Config(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=32, patch_size=8),
        qformer_config=dict(hidden_size=24, num_hidden_layers=3, num_attention_heads=2, intermediate_size=40,
                            encoder_hidden_size=32, cross_attention_frequency=2, vocab_size=50),
        text_config=dict(model_type="opt", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=48,
                         word_embed_proj_dim=32, vocab_size=len(WORDS) + len(SPECIAL), max_position_embeddings=128,
                         bos_token_id=bos, eos_token_id=bos, pad_token_id=0),
        num_query_tokens=QUERIES, image_token_index=image_token)
    model = Blip2ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * NOISE)
    model.generation_config.eos_token_id = bos
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = BlipImageProcessorPil(size={"height": 32, "width": 32})
    processor.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", "BLIP-2", "--checkpoint", str(root / "ckpt"), "--output", str(root / "lite")]) == 0
    return model, tokenizer, processor, root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def reference(model, tokenizer, processor, image, prompt, new_tokens):
    """transformers' generate on Blip2Processor's inputs: the new tokens."""
    from transformers import Blip2Processor
    proc = Blip2Processor(image_processor=processor, tokenizer=tokenizer, num_query_tokens=QUERIES)
    if prompt is None:
        inputs = dict(pixel_values=processor(images=[image], return_tensors="pt")["pixel_values"])
    else:
        inputs = dict(proc(images=[image], text=prompt, return_tensors="pt"))
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)[0].tolist()
    prompt_len = inputs["input_ids"].shape[1] if "input_ids" in inputs else QUERIES + 1
    return out[prompt_len:]


@pytest.fixture(scope="module")
def captioner(blip2):
    from lite.blip import Blip2Captioner
    return Blip2Captioner.from_pretrained(str(blip2[3] / "lite"))


def test_blip2_image_rows_equal_transformers(blip2, captioner):
    model, _, processor, _ = blip2
    for image in (picture(40, 60, 1), picture(90, 30, 2)):
        pixels = processor(images=[image], return_tensors="pt")["pixel_values"]
        np.testing.assert_allclose(captioner.engine.vision.preprocess(image)[None], pixels.numpy(), atol=1e-6)
        with torch.no_grad():
            embeds = model.vision_model(pixel_values=pixels).last_hidden_state
            queries = model.qformer(query_embeds=model.query_tokens, encoder_hidden_states=embeds).last_hidden_state
            want = model.language_projection(queries)[0]
        rows, _ = captioner.engine.vision(image)
        np.testing.assert_allclose(rows, want.numpy(), rtol=1e-4, atol=1e-4)


def test_opt_step_logits_equal_transformers(blip2, tmp_path):
    """The OPT step graph alone (no image rows: a text prompt) against OPTForCausalLM's last-token logits."""
    from converter.frontends.checkpoint import open_checkpoint
    from lite.llm import LLMEngine, SamplingParams
    from converter.writer import write_ms
    from model_zoo.language.opt_decoder_graph import build_opt_decoder_graph
    from model_zoo.language.text_model_view import text_config
    model, tokenizer, _, root = blip2
    weights, config = open_checkpoint(str(root / "ckpt"))
    with weights:
        graph = build_opt_decoder_graph(text_config(config), weights, 16, prefix="language_model.model.decoder.",
                                        lm_head="language_model.lm_head.weight")
        path = write_ms(graph, str(tmp_path / "opt.ms")).path
    engine = LLMEngine(path, text_config(config), num_blocks=16, block_size=16)
    seq = tokenizer("what is on the mat ? a cat sat on")["input_ids"]
    engine.add_request("r", seq, SamplingParams(max_new_tokens=4, temperature=0))
    while engine.scheduler.has_work():   # the prefill, then decode steps reading the cache
        engine.step()
        with torch.no_grad():
            want = model.language_model(torch.tensor([seq])).logits[0, -1].numpy()
        got = engine.last_logits["r"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        seq.append(int(np.argmax(got)))


def test_blip2_captions_equal_transformers(blip2, captioner):
    model, tokenizer, processor, _ = blip2
    images = [picture(40, 60, 1), picture(90, 30, 2), picture(32, 32, 3)]
    for prompt in (None, "Question : what is in the picture ? Answer :"):
        want = [reference(model, tokenizer, processor, im, prompt, 8) for im in images]
        got = captioner.caption_ids(images, prompt, max_new_tokens=8)   # one continuous batch
        assert got == want
        assert captioner.caption(images[:1], prompt, max_new_tokens=8)[0] == tokenizer.decode(
            want[0], skip_special_tokens=True).strip()


def test_blip2_cli_and_bad_image(blip2, captioner, tmp_path, capsys):
    root = blip2[3]
    path = tmp_path / "picture.png"
    picture(50, 50, 4).save(path)
    assert model_zoo(["run", "BLIP-2", "--model", str(root / "lite"), "--image", str(path), "--max-new-tokens",
                      "6"]) == 0
    assert capsys.readouterr().out.strip() == captioner.caption([str(path)], max_new_tokens=6)[0]
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a picture")
    with pytest.raises(ValueError, match="broken.png"):
        captioner.caption([str(bad)])
