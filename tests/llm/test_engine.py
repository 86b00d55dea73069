"""The engine on a tiny Qwen2 (transformers config, seeded random weights): greedy continuous-batched generation of
prompts of different lengths equals transformers' generate() for each prompt alone, token for token, and each
step's logits match PyTorch's."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from lite.llm import SamplingParams
from lite.llm.engine import LLMEngine
from lite.llm.step_shapes import sequence_bucket, token_bucket
from model_zoo.language.decoder_graph import write_decoder

CONFIG = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=False)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**CONFIG)).eval()
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_decoder(model.config.to_dict(), weights, str(tmp_path_factory.mktemp("qwen2") / "decoder"),
                         block_size=8)
    return model, path


def hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                             pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("budget", [512, 16])   # 16: prompts prefilled in chunks beside running decodes
def test_greedy_batch_equals_transformers_generate(qwen2, budget):
    model, path = qwen2
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, CONFIG["vocab_size"], n).tolist() for n in (5, 23, 41)]
    engine = LLMEngine(path, CONFIG, num_blocks=64, block_size=8, max_num_batched_tokens=budget)
    got = engine.generate(prompts, SamplingParams(max_new_tokens=24, temperature=0))
    for prompt, tokens in zip(prompts, got):
        assert tokens == hf_greedy(model, prompt, 24)
    assert engine.status().num_free_blocks == 64


def follow_pytorch(engine, model, prompt, new_tokens, check) -> list[int]:
    """Greedy steps of one request; after each, check(engine's logits, PyTorch's logits for the same sequence).
    Returns the sequence (prompt and the engine's tokens)."""
    engine.add_request("a", prompt, SamplingParams(max_new_tokens=new_tokens, temperature=0))
    seq = list(prompt)
    while engine.scheduler.has_work():
        engine.step()
        with torch.no_grad():
            want = model(torch.tensor([seq])).logits[0, -1].numpy()
        got = engine.last_logits["a"]
        check(got, want)
        seq.append(int(np.argmax(got)))   # the engine's token: PyTorch then runs the same sequence
    return seq


def test_step_logits_match_pytorch(qwen2):
    model, path = qwen2
    engine = LLMEngine(path, CONFIG, num_blocks=16, block_size=8)
    follow_pytorch(engine, model, list(range(3, 40)), 6,
                   lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max()))


def test_shared_prompt_prefix_is_computed_once(qwen2):
    model, path = qwen2
    system = list(range(10, 60))   # 50 tokens: 6 full blocks of 8
    engine = LLMEngine(path, CONFIG, num_blocks=64, block_size=8)
    a = engine.generate([system + [1, 2]], SamplingParams(max_new_tokens=4, temperature=0))[0]
    b = engine.add_request("b", system + [3, 4, 5], SamplingParams(max_new_tokens=4, temperature=0))
    engine.step()
    assert [(c.start, c.num_tokens) for c in engine.last_output.chunks] == [(48, 5)]   # 6 cached blocks skipped
    while engine.scheduler.has_work():
        engine.step()
    assert b.output_ids == hf_greedy(model, system + [3, 4, 5], 4)
    assert a == hf_greedy(model, system + [1, 2], 4)


FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 24}),                       # q/k norms, wide heads
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 8}),            # every layer windowed
    "qwen2_windowed": ("Qwen2Config", "Qwen2ForCausalLM", {"use_sliding_window": True, "sliding_window": 6,
                                                             "max_window_layers": 1}),   # one full, one windowed
    # soft-capped scores and logits, (1 + w) norms, scaled embeddings, GELU gating, alternating windows
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 16, "sliding_window": 6, "query_pre_attn_scalar": 16,
                                                      "attn_logit_softcapping": 0.02, "final_logit_softcapping": 0.5}),
    # routed experts (top 2 of 8) beside a sigmoid-gated shared expert; the second layer dense (mlp_only_layers)
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", {"num_experts": 8, "num_experts_per_tok": 2,
                                                             "moe_intermediate_size": 32,
                                                             "shared_expert_intermediate_size": 96,
                                                             "mlp_only_layers": [1]}),
    # top 3 of 6, renormalised, no shared expert, q/k norms
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {"num_experts": 6, "num_experts_per_tok": 3,
                                                             "moe_intermediate_size": 48, "norm_topk_prob": True,
                                                             "head_dim": 16}),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_families_greedy_equal_transformers(family, tmp_path):
    import transformers

    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(5)
    cfg = getattr(transformers, config_cls)(**{**CONFIG, **extra})
    model = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():   # decisive routing: near-ties between experts would turn on float32 rounding
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 1.0)
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    config = model.config.to_dict()
    path = write_decoder(config, weights, str(tmp_path / family), block_size=4)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(0, CONFIG["vocab_size"], n).tolist() for n in (3, 17, 30)]
    engine = LLMEngine(path, config, num_blocks=96, block_size=4, max_num_batched_tokens=20)
    got = engine.generate(prompts, SamplingParams(max_new_tokens=64, temperature=0))
    for prompt, tokens in zip(prompts, got):
        assert tokens == hf_greedy(model, prompt, 64)
    # and the logits of a prompt step, against PyTorch's
    engine.add_request("logits", prompts[2], SamplingParams(max_new_tokens=1, temperature=0))
    engine.step()
    with torch.no_grad():
        want = model(torch.tensor([prompts[2]])).logits[0, -1].numpy()
    np.testing.assert_allclose(engine.last_logits["logits"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def decoded_compressed_model(weight_format: str, directory: str):
    """A tiny Qwen2 step graph with its matrices stored compressed, and the PyTorch model holding the values the
    runtime decodes from them (the step graph holds each matrix transposed)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from converter.deferred import StoragePlan, stored_values
    from model_zoo.language.decoder_graph import build_decoder_graph

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**CONFIG)).eval()
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_decoder(model.config.to_dict(), weights, directory, block_size=8, weight_format=weight_format)
    graph = build_decoder_graph(model.config.to_dict(), weights, 8, weight_format=weight_format)
    planned = {n: t for n, t in graph.tensors.items() if isinstance(t.stored, StoragePlan)}
    assert len(planned) == 2 + 7 * CONFIG["num_hidden_layers"]

    def decoded(name):
        return stored_values(planned[name].data, planned[name].stored)
    state = model.state_dict()
    for i in range(CONFIG["num_hidden_layers"]):
        for name, hint in (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"),
                           ("self_attn.o_proj", "o"), ("mlp.gate_proj", "gate"), ("mlp.up_proj", "up"),
                           ("mlp.down_proj", "down")):
            state[f"model.layers.{i}.{name}.weight"] = torch.from_numpy(decoded(f"{hint}{i}_w").T.copy())
    state["model.embed_tokens.weight"] = torch.from_numpy(decoded("embed").copy())
    state["lm_head.weight"] = torch.from_numpy(decoded("lm_head").T.copy())
    model.load_state_dict(state)
    return model, path


@pytest.mark.parametrize("weight_format", ["bfloat16", "float16", "int8", "int4"])
def test_compressed_weights_equal_pytorch_on_the_decoded_weights(weight_format, tmp_path):
    """The step graph with its matrices stored compressed (decode steps read the codes; prompt steps decode them
    block by block) computes what PyTorch computes with the decoded weights put back into the model: each step's
    logits within float32 rounding (int4: widened as 1 + code/16, a little more), and greedy tokens equal."""
    model, path = decoded_compressed_model(weight_format, str(tmp_path / "d"))
    prompt = list(range(3, 30))
    engine = LLMEngine(path, CONFIG, num_blocks=16, block_size=8)
    tol = 1e-3 if weight_format == "int4" else 1e-4
    seq = follow_pytorch(engine, model, prompt, 8,
                         lambda got, want: np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max()))
    assert seq[len(prompt):] == hf_greedy(model, prompt, 8)


@pytest.mark.parametrize("weight_format,options,cpu_flag", [
    ("int8", {"dynamic_quant": True}, "avx512_vnni"), ("int4", {"dynamic_quant": True}, "avx512_vnni"),
    ("int8", {"dynamic_quant": True, "precision_mode": "preferred_bf16"}, "avx512_bf16"),
    ("int4", {"dynamic_quant": True, "precision_mode": "preferred_bf16"}, "avx512_bf16"),
    ("bfloat16", {"precision_mode": "preferred_bf16"}, "avx512_bf16")])
def test_reduced_precision_activations_stay_near_pytorch(weight_format, options, cpu_flag, tmp_path):
    """With dynamic_quant the int8/int4 products run on activations rounded to int8 (a scale per block; an int4
    prompt of 32 tokens or more on AMX-BF16 tiles: rounded to bf16); under preferred_bf16 the bf16 products on
    activations rounded to bf16 (with dynamic_quant too: attention's products): every step's logits (a 57-token
    prompt chunk and decodes) move off PyTorch's on the same decoded weights, but only by that rounding (within 2% of
    the largest logit at this tiny size: 0.2% for bf16, 0.7-0.9% for int8 / int4 with or without bf16 attention)."""
    if cpu_flag not in open("/proc/cpuinfo").read():
        pytest.skip(f"needs {cpu_flag}")
    model, path = decoded_compressed_model(weight_format, str(tmp_path / "d"))
    engine = LLMEngine(path, CONFIG, num_blocks=16, block_size=8, **options)
    assert engine.model.dynamic_quant or engine.model.compute_precision == "bfloat16"
    errors = []

    def check(got, want):
        errors.append(np.abs(got - want).max() / np.abs(want).max())
    follow_pytorch(engine, model, list(range(3, 60)), 8, check)
    assert 0 < max(errors) < 2e-2, errors


@pytest.mark.parametrize("kv_cache_dtype,tol,row_bytes", [("bfloat16", 3e-2, 2 * 16), ("float16", 4e-3, 2 * 16),
                                                            ("int8", 3e-2, 16 + 4)])
def test_reduced_precision_kv_cache(qwen2, kv_cache_dtype, tol, row_bytes, tmp_path):
    """A bfloat16 / float16 cache (half the memory of float32's) or an int8 one (codes and a float32 scale per row and
    head: a quarter plus 4 bytes a row): keys and values rounded when written, attention in float32; each step's
    logits stay within the rounding's reach of PyTorch's (float32 throughout)."""
    model, _ = qwen2
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_decoder(model.config.to_dict(), weights, str(tmp_path / "d"), block_size=8,
                         kv_cache_dtype=kv_cache_dtype)
    engine = LLMEngine(path, CONFIG, num_blocks=16, block_size=8)
    assert engine.kv_cache_dtype == kv_cache_dtype
    blocks = 16 + len(engine.scratch_blocks)   # the padding sequences' scratch blocks too
    assert engine.key_cache[0].nbytes == blocks * CONFIG["num_key_value_heads"] * 8 * row_bytes

    def check(got, want):
        assert 0 < np.abs(got - want).max() <= tol * np.abs(want).max()   # rounded, within the rounding's reach
    follow_pytorch(engine, model, list(range(3, 40)), 6, check)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        write_decoder(model.config.to_dict(), weights, str(tmp_path / "e"), kv_cache_dtype="int4")


def test_bucketed_steps_plan_few_shapes_and_change_no_token(qwen2):
    """Requests joining and leaving make steps of every mix of prompt chunks and decodes. Bucketed (the default), each
    step is padded to a bucket shape with padding sequences in scratch blocks: the graph sees a few shapes, not one per
    mix, and every request's tokens and logits are those of exact shapes."""
    model, path = qwen2
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, CONFIG["vocab_size"], n).tolist() for n in (5, 23, 41, 9, 30, 17, 3)]   # no pad id 0
    params = [SamplingParams(max_new_tokens=n, temperature=0) for n in (20, 7, 13, 25, 4, 16, 11)]
    runs = {}
    for buckets in (True, False):
        engine = LLMEngine(path, CONFIG, num_blocks=64, block_size=8, max_num_batched_tokens=24,
                           step_buckets=buckets)
        requests, logits = [], []
        for i, (p, sp) in enumerate(zip(prompts, params)):
            requests.append(engine.add_request(str(i), p, sp))
            for _ in range(3):   # a new request every three steps
                engine.step()
                logits.append(engine.last_logits)
        while engine.scheduler.has_work():
            engine.step()
            logits.append(engine.last_logits)
        runs[buckets] = (engine, [r.output_ids for r in requests], logits)
        assert engine.status().num_free_blocks == 64   # padding took no request's block
    (bucketed, tokens, logits), (exact, exact_tokens, exact_logits) = runs[True], runs[False]
    assert tokens == exact_tokens
    assert len(logits) == len(exact_logits)   # the same schedule, step for step
    for step, want in zip(logits, exact_logits):
        assert step.keys() == want.keys()
        for rid, row in step.items():
            np.testing.assert_allclose(row, want[rid], rtol=1e-5, atol=1e-5 * np.abs(want[rid]).max())
    for prompt, sp, out in zip(prompts, params, tokens):
        assert out == hf_greedy(model, prompt, sp.max_new_tokens)
    for t, s, _ in bucketed.step_shapes:
        assert t == token_bucket(t) and s == sequence_bucket(s)
    assert len({(t, s) for t, s, _ in bucketed.step_shapes}) < len({(t, s) for t, s, _ in exact.step_shapes})


def test_prompt_steps_of_many_short_sequences(qwen2):
    """A step of 128+ tokens whose every sequence is shorter than 128 (the attention's tiles are chosen per run from
    the sequences' lengths; its scratch, sized when the graph is planned, must hold either tiling), and one long prompt
    beside a short one: the same tokens as transformers."""
    model, path = qwen2
    rng = np.random.default_rng(5)
    for lengths in ((64, 64), (40, 40, 40, 40), (150, 3)):
        # (no token 0: hf_greedy's generate() takes it for padding and masks it out of the prompt)
        prompts = [rng.integers(1, CONFIG["vocab_size"], n).tolist() for n in lengths]
        engine = LLMEngine(path, CONFIG, num_blocks=64, block_size=8, max_num_batched_tokens=512)
        got = engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=0))
        for prompt, tokens in zip(prompts, got):
            assert tokens == hf_greedy(model, prompt, 4)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's resident set size")
def test_cache_budget_is_resident_from_the_start(qwen2):
    """The cache's pages are written at construction, not faulted in by the first steps that reach each block."""
    _, path = qwen2

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before = rss()
    engine = LLMEngine(path, CONFIG, num_blocks=12288, block_size=8)
    cache = sum(a.nbytes for a in engine.key_cache + engine.value_cache)
    assert cache >= 48 << 20
    assert rss() - before >= 0.9 * cache
