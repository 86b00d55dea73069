"""A byte-level BPE tokenizer (the GPT-2 / Qwen / Llama-3 kind) trained on a tiny corpus, for the LLM tests."""
from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers


def train_byte_bpe(corpus: list[str], vocab_size: int, special_tokens: tuple[str, ...] = ()) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


CHAT_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def chat_tokenizer(corpus: list[str], vocab_size: int, template: str):
    """transformers' PreTrainedTokenizerFast over a trained byte-level BPE, ChatML specials, with a chat template."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=train_byte_bpe(corpus, vocab_size, CHAT_SPECIALS),
                                 eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = template
    return hf
