"""The checkpoint path (converter_lite --fmk=HF) for the registry's decoder families: a tiny configuration with
seeded random weights saved by transformers as a real checkpoint directory (config.json + safetensors, the Hub's
layout: per-expert tensors for the MoE families), converted without torch or ONNX, then run by the LLM engine:
greedy tokens equal transformers' generate() for three prompts of different lengths batched together, and the
logits of two prompt lengths within 1e-4 of PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from lite.llm import SamplingParams
from lite.llm.engine import LLMEngine

BASE = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
            tie_word_embeddings=False)
FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16, "tie_word_embeddings": True}),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {"num_experts": 8, "num_experts_per_tok": 2,
                                                             "moe_intermediate_size": 32,
                                                             "shared_expert_intermediate_size": 96}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {"num_experts": 6, "num_experts_per_tok": 3,
                                                             "moe_intermediate_size": 48, "norm_topk_prob": True,
                                                             "head_dim": 16}),
}


def tiny_checkpoint(family: str, directory) -> torch.nn.Module:
    import transformers
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(7)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**{**BASE, **extra})).eval()
    with torch.no_grad():   # decisive routing: near-ties between experts would turn on float32 rounding
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 1.0)
    model.save_pretrained(str(directory))
    return model


def hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                             pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def convert(checkpoint, output, **options) -> str:
    return Converter().convert(FmkType.HF, str(checkpoint), str(output), verify_build=False,
                               checkpoint_options=CheckpointOptions(block_size=4, **options)).output_file


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_transformers(family, tmp_path):
    model = tiny_checkpoint(family, tmp_path / "ckpt")
    path = convert(tmp_path / "ckpt", tmp_path / "model")
    config = model.config.to_dict()
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, BASE["vocab_size"], n).tolist() for n in (4, 19, 33)]
    engine = LLMEngine(path, config, num_blocks=96, block_size=4, max_num_batched_tokens=24)
    got = engine.generate(prompts, SamplingParams(max_new_tokens=32, temperature=0))
    for prompt, tokens in zip(prompts, got):
        assert tokens == hf_greedy(model, prompt, 32)
    for i, prompt in enumerate(prompts[1:]):   # two input lengths: a prompt step's logits against PyTorch's
        engine.add_request(f"logits{i}", prompt, SamplingParams(max_new_tokens=1, temperature=0))
        engine.step()
        with torch.no_grad():
            want = model(torch.tensor([prompt])).logits[0, -1].numpy()
        np.testing.assert_allclose(engine.last_logits[f"logits{i}"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("precision,tol", [("bfloat16", 2e-2), ("int8", 3e-2), ("int4", 2e-1)])
def test_compressed_checkpoint_conversion_stays_near_pytorch(precision, tol, tmp_path):
    """Weights stored compressed on the way (no float32 copy of the model is made): a prompt's logits move off
    PyTorch's by the rounding only."""
    model = tiny_checkpoint("qwen2", tmp_path / "ckpt")
    path = convert(tmp_path / "ckpt", tmp_path / "model", weight_format=precision)
    engine = LLMEngine(path, model.config.to_dict(), num_blocks=32, block_size=4)
    prompt = list(range(5, 40))
    engine.add_request("a", prompt, SamplingParams(max_new_tokens=1, temperature=0))
    engine.step()
    with torch.no_grad():
        want = model(torch.tensor([prompt])).logits[0, -1].numpy()
    err = np.abs(engine.last_logits["a"] - want).max() / np.abs(want).max()
    assert 0 < err < tol
