"""Qwen2 and Qwen2.5 (dense decoders; Qwen2ForCausalLM): q/k/v with biases, grouped-query attention, SwiGLU, RMSNorm,
RoPE. One step graph (model_zoo.language.decoder_graph) serves prefill and decode."""
from model_zoo.registry import Entry

_SOURCE = ("the model's config.json as published on the Hugging Face Hub (Qwen organisation), transcribed; "
           "the Hub is not reachable from this machine")
_DECODER = dict(graphs=("decoder_step",), pipeline="chat", family="qwen2", model_type="qwen2",
                architecture="transformers Qwen2ForCausalLM -> model_zoo.language.decoder_graph",
                converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
                config_source=_SOURCE, status="supported", test="tests/model_zoo/test_checkpoint_llm.py::test_family_matches_transformers[qwen2]")


def _qwen2(parameters, hidden, layers, heads, kv_heads, intermediate, vocab, tied, max_positions, theta=1000000.0,
           **extra):
    return dict(_parameters=parameters, model_type="qwen2", hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate,
                vocab_size=vocab, tie_word_embeddings=tied, max_position_embeddings=max_positions, rope_theta=theta,
                rms_norm_eps=1e-6, hidden_act="silu", **extra)


ENTRIES = [
    Entry(name="Qwen2-0.5B", category="llm", hub_id="Qwen/Qwen2-0.5B",
          config=_qwen2("0.5B", 896, 24, 14, 2, 4864, 151936, True, 131072), **_DECODER),
    Entry(name="Qwen2-1.5B", category="llm", hub_id="Qwen/Qwen2-1.5B",
          config=_qwen2("1.5B", 1536, 28, 12, 2, 8960, 151936, True, 131072), **_DECODER),
    Entry(name="Qwen2-7B-Instruct", category="llm", hub_id="Qwen/Qwen2-7B-Instruct",
          config=_qwen2("7B", 3584, 28, 28, 4, 18944, 152064, False, 32768), **_DECODER),
    Entry(name="Qwen2.5-0.5B", category="llm", hub_id="Qwen/Qwen2.5-0.5B",
          config=_qwen2("0.5B", 896, 24, 14, 2, 4864, 151936, True, 32768), **_DECODER),
    Entry(name="Qwen2.5-3B-Instruct", category="llm", hub_id="Qwen/Qwen2.5-3B-Instruct",
          config=_qwen2("3B", 2048, 36, 16, 2, 11008, 151936, True, 32768), **_DECODER),
    Entry(name="Qwen2.5-7B-Instruct", category="llm", hub_id="Qwen/Qwen2.5-7B-Instruct",
          config=_qwen2("7B", 3584, 28, 28, 4, 18944, 152064, False, 32768), **_DECODER),
    Entry(name="Qwen2.5-Math-1.5B", category="retrieval_vision", hub_id="Qwen/Qwen2.5-Math-1.5B",
          config=_qwen2("1.5B", 1536, 28, 12, 2, 8960, 151936, True, 4096, theta=10000.0), **_DECODER),
    Entry(name="Qwen2.5-Math-1.5B-Instruct", category="retrieval_vision", hub_id="Qwen/Qwen2.5-Math-1.5B-Instruct",
          config=_qwen2("1.5B", 1536, 28, 12, 2, 8960, 151936, True, 4096, theta=10000.0), **_DECODER),
]


def _build(config, weights, **options):
    from model_zoo.language.decoder_graph import build_from_checkpoint
    return build_from_checkpoint(config, weights, **options)


GRAPH_BUILDERS = {"qwen2": _build}
