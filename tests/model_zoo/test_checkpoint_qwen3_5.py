"""Qwen3.5 / Qwen3.6 (hybrid gated DeltaNet + full attention) through the checkpoint path: a tiny configuration with
seeded random weights saved by transformers (the text model, and the multimodal checkpoint the Hub holds), converted
with --fmk=HF, run by the LLM engine: greedy tokens equal transformers' generate() for three prompts of different
lengths in one continuous batch with chunked prefill (the recurrent state carried across chunks and steps), the
logits of two prompt lengths within 1e-4 of PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lite.llm import SamplingParams
from lite.llm.engine import LLMEngine
from test_checkpoint_llm import convert, hf_greedy

TEXT = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=12, linear_conv_kernel_dim=4, max_position_embeddings=256, rms_norm_eps=1e-6,
            tie_word_embeddings=False)
LAYOUTS = {   # the default (every 4th layer full attention) and one whose last layer is linear attention
    "interval": dict(num_hidden_layers=4),
    "last_linear": dict(num_hidden_layers=3, layer_types=["full_attention", "linear_attention", "linear_attention"]),
}


def randomise(model):
    """Weights far from their initial values (zero-centred norms, unit dt_bias), so every path is exercised."""
    torch.manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "dt_bias")):
                p.normal_(0.0, 0.3)
            elif name.endswith("A_log"):
                p.uniform_(-2.0, 1.0)


def tiny_text_checkpoint(layout: str, directory):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    torch.manual_seed(7)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**TEXT, **LAYOUTS[layout])).eval()
    randomise(model)
    model.save_pretrained(str(directory))
    return model


def prompt_logits_match(engine, model, prompts, forward):
    for i, prompt in enumerate(prompts):
        engine.add_request(f"logits{i}", prompt, SamplingParams(max_new_tokens=1, temperature=0))
        while f"logits{i}" not in engine.last_logits:   # prompts longer than a step's budget take several
            engine.step()
        with torch.no_grad():
            want = forward(torch.tensor([prompt]))[0, -1].numpy()
        np.testing.assert_allclose(engine.last_logits[f"logits{i}"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_qwen3_5_matches_transformers(layout, tmp_path):
    model = tiny_text_checkpoint(layout, tmp_path / "ckpt")
    path = convert(tmp_path / "ckpt", tmp_path / "model")
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, TEXT["vocab_size"], n).tolist() for n in (4, 19, 33)]
    engine = LLMEngine(path, model.config.to_dict(), num_blocks=96, block_size=4, max_num_batched_tokens=24,
                       max_num_seqs=4)
    assert engine.states and len(engine.key_cache) == sum(
        t == "full_attention" for t in model.config.layer_types)
    got = engine.generate(prompts, SamplingParams(max_new_tokens=32, temperature=0))
    for prompt, tokens in zip(prompts, got):
        assert tokens == hf_greedy(model, prompt, 32)
    assert not engine.state_slots and sorted(engine.free_slots) == [0, 1, 2, 3]   # finished requests gave theirs back
    prompt_logits_match(engine, model, prompts[1:], lambda ids: model(ids).logits)


def test_multimodal_checkpoint_text_path(tmp_path):
    """The Hub's checkpoints are Qwen3_5ForConditionalGeneration (text_config nested in config.json, the decoder
    under model.language_model.*, a vision tower beside it): the text path converts from it as it is."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    torch.manual_seed(9)
    config = Qwen3_5Config(text_config={**TEXT, **LAYOUTS["interval"]},
                           vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                                              out_hidden_size=64, patch_size=4, temporal_patch_size=2,
                                              spatial_merge_size=2, num_position_embeddings=16))
    model = Qwen3_5ForConditionalGeneration(config).eval()
    randomise(model)
    model.save_pretrained(str(tmp_path / "ckpt"))
    path = convert(tmp_path / "ckpt", tmp_path / "model")
    engine = LLMEngine(path, config.to_dict(), num_blocks=64, block_size=4, max_num_batched_tokens=16, max_num_seqs=2)
    rng = np.random.default_rng(4)
    prompt_logits_match(engine, model, [rng.integers(1, 160, n).tolist() for n in (7, 30)],
                        lambda ids: model(input_ids=ids).logits)


def test_slots_are_reused_and_state_restarts(tmp_path):
    """More requests than slots, one after another through the same slots, and a prompt run twice: each run equals
    the first (a reused slot starts from zeros, never from the previous sequence's state)."""
    model = tiny_text_checkpoint("interval", tmp_path / "ckpt")
    path = convert(tmp_path / "ckpt", tmp_path / "model")
    engine = LLMEngine(path, model.config.to_dict(), num_blocks=64, block_size=4, max_num_seqs=2,
                       max_num_batched_tokens=16)
    prompts = [list(range(3 + i, 20 + 2 * i)) for i in range(5)]
    first = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0))
    again = engine.generate(prompts[::-1], SamplingParams(max_new_tokens=6, temperature=0))
    assert again[::-1] == first
    assert first[0] == hf_greedy(model, prompts[0], 6)
    assert sorted(engine.free_slots) == [0, 1]


def test_preempted_request_recomputes_its_state(tmp_path):
    """Too few KV blocks for three generations at once: the newest is preempted (its blocks freed, its slot given
    back) and recomputed later from its first token; every request still generates transformers' tokens."""
    model = tiny_text_checkpoint("interval", tmp_path / "ckpt")
    path = convert(tmp_path / "ckpt", tmp_path / "model")
    engine = LLMEngine(path, model.config.to_dict(), num_blocks=14, block_size=4, max_num_seqs=3,
                       max_num_batched_tokens=32, step_buckets=False)
    prompts = [list(range(10 + i, 21 + i)) for i in range(3)]
    requests = [engine.add_request(f"r{i}", p, SamplingParams(max_new_tokens=12, temperature=0))
                for i, p in enumerate(prompts)]
    preempted = 0
    while engine.scheduler.has_work():
        engine.step()
        preempted += len(engine.last_output.preempted)
    assert preempted > 0
    for prompt, r in zip(prompts, requests):
        assert r.output_ids == hf_greedy(model, prompt, 12)


@pytest.mark.parametrize("options,tol", [({"weight_format": "bfloat16"}, 2e-2), ({"weight_format": "int8"}, 3e-2),
                                         ({"weight_format": "int4"}, 2e-1), ({"kv_cache_dtype": "bfloat16"}, 2e-2)])
def test_compressed_conversion_stays_near_pytorch(options, tol, tmp_path):
    """Matrices stored compressed (the q_proj's regrouped query / gate rows included), or the KV cache in bfloat16:
    a prompt's logits move off PyTorch's by the rounding only."""
    model = tiny_text_checkpoint("interval", tmp_path / "ckpt")
    path = convert(tmp_path / "ckpt", tmp_path / "model", **options)
    engine = LLMEngine(path, model.config.to_dict(), num_blocks=32, block_size=4)
    prompt = list(range(5, 40))
    engine.add_request("a", prompt, SamplingParams(max_new_tokens=1, temperature=0))
    engine.step()
    with torch.no_grad():
        want = model(torch.tensor([prompt])).logits[0, -1].numpy()
    err = np.abs(engine.last_logits["a"] - want).max() / np.abs(want).max()
    assert 0 < err < tol


def test_text_engine_chats_with_a_qwen3_5_directory(tmp_path):
    """TextEngine (and so `lite serve`) converts a Qwen3.5 directory through the registry's hybrid builder on first
    use: a chat's greedy reply is transformers' generate() on the same template."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from lite.llm.text_engine import TextEngine
    from llm.tiny_bpe import chat_tokenizer
    template = ("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    hf_tok = chat_tokenizer(["the quick brown fox jumps over the lazy dog", "hello world, how are you?"] * 20, 300,
                            template)
    torch.manual_seed(7)
    config = Qwen3_5TextConfig(**{**TEXT, "vocab_size": len(hf_tok)}, **LAYOUTS["interval"])
    model = Qwen3_5ForCausalLM(config).eval()
    randomise(model)
    model.save_pretrained(str(tmp_path))
    hf_tok.save_pretrained(str(tmp_path))
    engine = TextEngine.from_pretrained(str(tmp_path), block_size=8, num_blocks=64)
    chat = [{"role": "user", "content": "hello world"}]
    out = engine.generate([chat], SamplingParams(max_new_tokens=12, temperature=0))[0]
    ids = hf_tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert out.token_ids == hf_greedy(model, ids, 12)[:len(out.token_ids)] and out.prompt_tokens == len(ids)
