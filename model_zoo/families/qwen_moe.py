"""Mixture-of-experts Qwen decoders: Qwen1.5-MoE (model_type qwen2_moe: 60 routed experts, top 4, plus a shared
expert gated by a sigmoid) and Qwen3-MoE (128 experts, top 8, renormalised, q/k norms). One MoE node per layer runs
only the chosen experts."""
from model_zoo.registry import Entry

_SOURCE = ("the model's config.json as published on the Hugging Face Hub (Qwen organisation), transcribed; "
           "the Hub is not reachable from this machine")
_COMMON = dict(family="qwen_moe", graphs=("decoder_step",), pipeline="chat", config_source=_SOURCE, status="supported",
               converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]})

ENTRIES = [
    Entry(name="Qwen3-30B-A3B", category="llm", hub_id="Qwen/Qwen3-30B-A3B", model_type="qwen3_moe",
          architecture="transformers Qwen3MoeForCausalLM -> model_zoo.language.decoder_graph (MoE node)",
          test="tests/model_zoo/test_checkpoint_llm.py::test_family_matches_transformers[qwen3_moe]",
          config=dict(_parameters="30B (3B active)", model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                      moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                      decoder_sparse_step=1, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu"), **_COMMON),
    Entry(name="Qwen1.5-MoE-A2.7B", category="llm", hub_id="Qwen/Qwen1.5-MoE-A2.7B", model_type="qwen2_moe",
          architecture=("transformers Qwen2MoeForCausalLM -> model_zoo.language.decoder_graph (MoE node + shared "
                        "expert)"),
          test="tests/model_zoo/test_checkpoint_llm.py::test_family_matches_transformers[qwen2_moe]",
          config=dict(_parameters="14.3B (2.7B active)", model_type="qwen2_moe", hidden_size=2048,
                      num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16, intermediate_size=5632,
                      moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
                      num_experts_per_tok=4, norm_topk_prob=False, decoder_sparse_step=1, vocab_size=151936,
                      max_position_embeddings=8192, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, hidden_act="silu"), **_COMMON),
]


def _build(config, weights, **options):
    from model_zoo.language.decoder_graph import build_from_checkpoint
    return build_from_checkpoint(config, weights, **options)


GRAPH_BUILDERS = {"qwen2_moe": _build, "qwen3_moe": _build}
