"""BLIP's row on the runtime: a tiny BlipForConditionalGeneration with seeded random weights, its tokenizer ([CLS],
[SEP], the decoder's bos) and BlipImageProcessor config, converted by `python -m model_zoo convert BLIP`;
lite.blip.BlipCaptioner against transformers: the image side (embeddings and cross-attention keys / values) within
1e-4, greedy captions token for token with and without a text prompt, for images of several sizes; the CLI; a
corrupt image named."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

WORDS = "[PAD] [UNK] a picture of cat dog on the mat sat two cats sleeping couch".split()
SPECIAL = ["[CLS]", "[SEP]", "[DEC]"]


@pytest.fixture(scope="module")
def blip(tmp_path_factory):
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import BlipConfig, BlipForConditionalGeneration, PreTrainedTokenizerFast
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil
    root = tmp_path_factory.mktemp("blip")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                                ("[SEP]", sep)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]", bos_token="[DEC]")
    bos = tokenizer.convert_tokens_to_ids("[DEC]")
    torch.manual_seed(0)
    config = BlipConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=32, patch_size=8),
        text_config=dict(vocab_size=len(WORDS) + len(SPECIAL), hidden_size=24, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=48, max_position_embeddings=64, bos_token_id=bos,
                         sep_token_id=sep, eos_token_id=sep, pad_token_id=0, encoder_hidden_size=32))
    model = BlipForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = BlipImageProcessorPil(size={"height": 32, "width": 32})
    processor.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", "BLIP", "--checkpoint", str(root / "ckpt"), "--output", str(root / "lite")]) == 0
    return model, tokenizer, processor, root


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def test_blip_captions_equal_transformers(blip):
    from lite.blip import BlipCaptioner
    model, tokenizer, processor, root = blip
    captioner = BlipCaptioner(str(root / "lite"))
    for image in (picture(40, 60, 1), picture(90, 30, 2), picture(32, 32, 3)):
        pixels = processor(images=[image], return_tensors="pt")["pixel_values"]
        np.testing.assert_allclose(captioner.preprocess(image)[None], pixels.numpy(), atol=1e-6)
        outs = {o.name: t.get_data_to_numpy() for o, t in zip(captioner.vision.get_outputs(),
                                                              captioner.vision.predict({"pixel_values":
                                                                                        pixels.numpy()}))}
        with torch.no_grad():
            embeds = model.vision_model(pixel_values=pixels)[0]
            cross = model.text_decoder.bert.encoder.layer[1].crossattention.self.key(embeds)
        np.testing.assert_allclose(outs["image_embeds"], embeds.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(outs["cross_k.1"], cross.numpy(), rtol=1e-4, atol=1e-4)
        for prompt in (None, "a picture of"):
            kwargs = {} if prompt is None else dict(tokenizer(prompt, return_tensors="pt"))
            with torch.no_grad():
                want = model.generate(pixel_values=pixels, max_new_tokens=8, do_sample=False, **kwargs)[0].tolist()
            got = captioner.caption_ids(image, prompt, max_new_tokens=8)
            assert got == want
            assert captioner.caption(image, prompt, max_new_tokens=8) == tokenizer.decode(
                want, skip_special_tokens=True).strip()


def test_blip_cli_and_bad_image(blip, tmp_path, capsys):
    from lite.blip import BlipCaptioner
    root = blip[3]
    path = tmp_path / "picture.png"
    picture(50, 50, 4).save(path)
    assert model_zoo(["run", "BLIP", "--model", str(root / "lite"), "--image", str(path), "--max-new-tokens",
                      "6"]) == 0
    assert capsys.readouterr().out.strip() == BlipCaptioner(str(root / "lite")).caption(str(path), max_new_tokens=6)
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a picture")
    with pytest.raises(ValueError, match="broken.png"):
        BlipCaptioner(str(root / "lite")).caption(str(bad))


def test_blip_image_text_matching_equals_transformers(tmp_path):
    """BlipForImageTextRetrieval: the ITM head's match probability (the bidirectional text encoder cross-attending to
    the image) and the contrastive cosine of the projected class tokens, per text, equal transformers'
    use_itm_head=True / False within 1e-5."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import BlipConfig, BlipForImageTextRetrieval, PreTrainedTokenizerFast
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    from lite.blip import BlipMatcher
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                                ("[SEP]", sep)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]")
    torch.manual_seed(5)
    config = BlipConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=32, patch_size=8),
        text_config=dict(vocab_size=len(WORDS) + len(SPECIAL), hidden_size=24, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=48, max_position_embeddings=64,
                         encoder_hidden_size=32, sep_token_id=sep, pad_token_id=0),
        image_text_hidden_size=16)
    model = BlipForImageTextRetrieval(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(tmp_path))
    tokenizer.save_pretrained(str(tmp_path))
    processor = BlipImageProcessorPil(size={"height": 32, "width": 32})
    processor.save_pretrained(str(tmp_path))
    matcher = BlipMatcher(str(tmp_path))   # converted on first use
    image = picture(48, 70, 6)
    texts = ["a cat on the mat", "two cats sleeping", "dog"]
    match, similarity = matcher.match(image, texts), matcher.similarity(image, texts)
    pixels = processor(images=[image], return_tensors="pt")["pixel_values"]
    for text, m, s in zip(texts, match, similarity):
        ids = tokenizer(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            itm = model(input_ids=ids, pixel_values=pixels, use_itm_head=True).itm_score.softmax(-1)[0, 1]
            cos = model(input_ids=ids, pixel_values=pixels, use_itm_head=False).itm_score[0, 0]
        assert m == pytest.approx(float(itm), abs=1e-5) and s == pytest.approx(float(cos), abs=1e-5)
