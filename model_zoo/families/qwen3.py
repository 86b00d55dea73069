"""Qwen3 (dense decoders; Qwen3ForCausalLM): Qwen2's layout without q/k/v biases, with an RMSNorm of each head's
queries and keys before the rotation, head_dim 128 independent of the width. The Guard, Embedding and Reranker models
are Qwen3 networks with another head on the same step graph."""
from model_zoo.registry import Entry

_SOURCE = ("the model's config.json as published on the Hugging Face Hub (Qwen organisation), transcribed; "
           "the Hub is not reachable from this machine")
_TEST = "tests/model_zoo/test_checkpoint_llm.py::test_family_matches_transformers[qwen3]"
_COMMON = dict(family="qwen3", model_type="qwen3", config_source=_SOURCE,
               architecture="transformers Qwen3ForCausalLM -> model_zoo.language.decoder_graph",
               converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]})
_CHAT = dict(graphs=("decoder_step",), pipeline="chat", status="supported", test=_TEST, **_COMMON)


def _qwen3(parameters, hidden, layers, heads, kv_heads, intermediate, tied, max_positions=40960, **extra):
    return dict(_parameters=parameters, model_type="qwen3", hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=128, intermediate_size=intermediate,
                vocab_size=151936, tie_word_embeddings=tied, max_position_embeddings=max_positions,
                rope_theta=1000000.0, rms_norm_eps=1e-6, hidden_act="silu", **extra)


# Embedding: the last token's final hidden state, L2-normalised (lite.llm.retrieval.TextEmbedder); reranking: P(yes)
# of the yes/no judgement at the last token (lite.llm.retrieval.Reranker).
_EMBED_TEST = "tests/model_zoo/test_retrieval.py::test_embeddings_equal_transformers_last_token_state"
_RERANK_TEST = "tests/model_zoo/test_retrieval.py::test_reranker_scores_equal_transformers"

ENTRIES = [
    Entry(name="Qwen3-8B", category="llm", hub_id="Qwen/Qwen3-8B",
          config=_qwen3("8B", 4096, 36, 32, 8, 12288, False), **_CHAT),
    Entry(name="Qwen3-4B", category="llm", hub_id="Qwen/Qwen3-4B",
          config=_qwen3("4B", 2560, 36, 32, 8, 9728, True), **_CHAT),
    Entry(name="Qwen3-1.7B", category="llm", hub_id="Qwen/Qwen3-1.7B",
          config=_qwen3("1.7B", 2048, 28, 16, 8, 6144, True), **_CHAT),
    Entry(name="Qwen3-0.6B", category="llm", hub_id="Qwen/Qwen3-0.6B",
          config=_qwen3("0.6B", 1024, 28, 16, 8, 3072, True), **_CHAT),
    Entry(name="Qwen3Guard-Gen-0.6B", category="retrieval_vision", hub_id="Qwen/Qwen3Guard-Gen-0.6B",
          config=_qwen3("0.6B", 1024, 28, 16, 8, 3072, True), **_CHAT),
    Entry(name="Qwen3-Embedding-0.6B", category="retrieval_vision", hub_id="Qwen/Qwen3-Embedding-0.6B",
          config=_qwen3("0.6B", 1024, 28, 16, 8, 3072, True, max_positions=32768),
          graphs=("decoder_hidden",), pipeline="embed", status="supported", test=_EMBED_TEST, **_COMMON),
    Entry(name="Qwen3-Embedding-4B", category="retrieval_vision", hub_id="Qwen/Qwen3-Embedding-4B",
          config=_qwen3("4B", 2560, 36, 32, 8, 9728, True, max_positions=32768),
          graphs=("decoder_hidden",), pipeline="embed", status="supported", test=_EMBED_TEST, **_COMMON),
    Entry(name="Qwen3-Reranker-0.6B", category="retrieval_vision", hub_id="Qwen/Qwen3-Reranker-0.6B",
          config=_qwen3("0.6B", 1024, 28, 16, 8, 3072, True), graphs=("decoder_step",), pipeline="rerank",
          status="supported", test=_RERANK_TEST, **_COMMON),
    Entry(name="Qwen3-Reranker-4B", category="retrieval_vision", hub_id="Qwen/Qwen3-Reranker-4B",
          config=_qwen3("4B", 2560, 36, 32, 8, 9728, True), graphs=("decoder_step",), pipeline="rerank",
          status="supported", test=_RERANK_TEST, **_COMMON),
]


def _build(config, weights, **options):
    from model_zoo.language.decoder_graph import build_from_checkpoint
    if "JinaForRanking" in (config.get("architectures") or []) and options.get("head") in (None, "logits"):
        options["head"] = "projector"   # jina-reranker-v3: no language-model head, its projector instead
    return build_from_checkpoint(config, weights, **options)


GRAPH_BUILDERS = {"qwen3": _build}
