"""Test helpers for pipelines that call a Qwen2VLProcessor (Qwen-Image-Edit, Kandinsky 5 I2I): transformers'
processor needs torchvision (its video processor), which does not import beside this machine's torch, so references
get this stand-in, which does what the processor does for text with one image each (transformers' Qwen2-VL image
processor, each image-pad token repeated for the image's merged patches, the tokenizer, the token types the real
processor returns); and a word-level fast tokenizer with the vision special tokens."""
from __future__ import annotations

SPECIAL = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]


class StandInProcessor:
    def __init__(self, image_processor, tokenizer, image_token_id: int):
        self.image_processor, self.tokenizer, self.image_token_id = image_processor, tokenizer, image_token_id

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)

    def __call__(self, text, images=None, videos=None, return_tensors="pt", padding=True, **kwargs):
        from transformers import BatchFeature
        pixels = self.image_processor(images=images, return_tensors="pt")
        n = int(pixels["image_grid_thw"][0].prod()) // 4
        text = [t.replace("<|image_pad|>", "<|image_pad|>" * n) for t in text]
        enc = self.tokenizer(text, padding=padding, return_tensors=return_tensors, **kwargs)
        return BatchFeature({**enc, **pixels, "mm_token_type_ids": (enc["input_ids"] == self.image_token_id).int()})


def word_tokenizer(words: list[str]):
    """(a PreTrainedTokenizerFast over `words` split on whitespace and punctuation with SPECIAL as added tokens, the
    ids of SPECIAL)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    return tokenizer, tokenizer.convert_tokens_to_ids(SPECIAL)
