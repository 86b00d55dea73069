"""Text in, text out from a Hugging Face checkpoint directory (config.json, safetensors, tokenizer files with a chat
template), converted on first use: chat prompts give transformers' tokens, streaming adds up to the whole text,
stop strings cut it, seeded sampling repeats."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from tiny_bpe import chat_tokenizer

from lite.llm import SamplingParams
from lite.llm.text_engine import TextEngine

TEMPLATE = ("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    corpus = ["the quick brown fox jumps over the lazy dog", "hello world, how are you today?", "naïve café 🙂 日本"]
    hf_tok = chat_tokenizer(corpus * 20, 300, TEMPLATE)
    tok = hf_tok.backend_tokenizer
    torch.manual_seed(3)
    config = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, eos_token_id=tok.token_to_id("<|im_end|>"))
    model = Qwen2ForCausalLM(config).eval()
    d = str(tmp_path_factory.mktemp("qwen2_dir"))
    model.save_pretrained(d)
    hf_tok.save_pretrained(d)
    return d, model, hf_tok


def hf_greedy(model, ids, n, eos=None):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0, eos_token_id=eos)
    return out[0, len(ids):].tolist()


def test_chat_generation_matches_transformers(model_dir):
    d, model, hf_tok = model_dir
    engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=64)
    assert os.path.isfile(os.path.join(d, "decoder_b8.ms"))   # converted once, cached beside the checkpoint
    chats = [[{"role": "user", "content": "hello world"}],
             [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the quick brown fox?"}]]
    outs = engine.generate(chats, SamplingParams(max_new_tokens=20, temperature=0))
    for chat, out in zip(chats, outs):
        ids = hf_tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        want = hf_greedy(model, list(ids), 20, eos=hf_tok.eos_token_id)
        assert out.token_ids == want and out.prompt_tokens == len(ids)
        assert out.finish_reason == ("stop" if want[-1] == hf_tok.eos_token_id else "length")
        assert out.text == hf_tok.decode(want, skip_special_tokens=True)
        assert out.time_to_first_token is not None and out.time_to_first_token > 0


def test_streaming_adds_up_and_stop_strings_cut(model_dir):
    d, model, hf_tok = model_dir
    engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=64)
    params = SamplingParams(max_new_tokens=30, temperature=0)
    whole = engine.generate(["the lazy dog"], params)[0]
    pieces = list(engine.stream("the lazy dog", params))
    assert "".join(pieces) == whole.text and len(pieces) > 1
    if len(whole.text) >= 8:
        stop = whole.text[4:7]
        cut = engine.generate(["the lazy dog"], SamplingParams(max_new_tokens=30, temperature=0, stop=[stop]))[0]
        assert cut.text == whole.text[:whole.text.index(stop)] and cut.finish_reason == "stop"


def test_seeded_sampling_repeats(model_dir):
    d, _, _ = model_dir
    engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=64)
    params = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.9, seed=42)
    a = engine.generate(["hello"] * 2, params)
    b = engine.generate(["hello"], params)
    assert a[0].token_ids == a[1].token_ids == b[0].token_ids
    c = engine.generate(["hello"], SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.9, seed=7))
    assert c[0].token_ids != a[0].token_ids


def test_int8_weights_convert_beside_the_float_graph(model_dir):
    """weight_format picks how the checkpoint is converted; each format is its own cached file, a quarter the size
    of float32's matrices for int8, and it still chats (greedy text within int8's error of float32's: the first
    tokens agree)."""
    d, _, _ = model_dir
    engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=64, weight_format="int8")
    assert os.path.isfile(os.path.join(d, "decoder_b8_int8.ms"))
    float_engine = TextEngine.from_pretrained(d, block_size=8, num_blocks=64)
    assert os.path.getsize(os.path.join(d, "decoder_b8_int8.ms")) < 0.4 * os.path.getsize(os.path.join(d, "decoder_b8.ms"))
    params = SamplingParams(max_new_tokens=4, temperature=0)
    chat = [{"role": "user", "content": "hello world"}]
    assert engine.generate([chat], params)[0].token_ids[:2] == float_engine.generate([chat], params)[0].token_ids[:2]
    # int8 products on int8 activation codes; attention's products on bf16 operands where the CPU multiplies bf16
    bf16_cpu = "avx512_bf16" in open("/proc/cpuinfo").read()
    assert engine.engine.model.compute_precision == ("bfloat16" if bf16_cpu else "float32")
    assert float_engine.engine.model.compute_precision == "float32"
    with pytest.raises(ValueError, match="weight_format"):
        TextEngine.from_pretrained(d, weight_format="int3")
