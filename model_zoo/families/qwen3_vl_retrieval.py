"""Qwen3-VL-Embedding and Qwen3-VL-Reranker (QwenLM/Qwen3-VL-Embedding): Qwen3-VL checkpoints (transformers
model_type "qwen3_vl", Qwen3VLForConditionalGeneration) used for retrieval. A ViT (Conv3d 2x16x16 patches, learned
position embeddings interpolated to the grid, 2-D rotary attention, 2x2 patch merger, DeepStack mergers that feed
three intermediate vision layers into the first decoder layers) and a Qwen3 decoder (q/k RMSNorm, grouped-query
attention, SwiGLU, interleaved M-RoPE). The embedder takes the last token's final hidden state (Matryoshka-truncatable,
L2-normalised); the reranker reads P("yes") from the "yes"/"no" logits at the last position of its judge prompt.
Both run on the runtime through lite.llm.vl_retrieval (VLEmbedder / VLReranker), following the wrapper's protocol."""
from model_zoo.registry import Entry

_ARCH = ("transformers Qwen3VLForConditionalGeneration (Qwen3VLModel: Qwen3VLVisionModel + Qwen3VLTextModel), "
         "wrapped by the project's Qwen3VLEmbedder / Qwen3VLReranker (QwenLM/Qwen3-VL-Embedding)")

_SRC = ("Qwen3-VL-Embedding-{size} config.json as transcribed in a public model-contract document (model_type "
        "qwen3_vl, Qwen3VLForConditionalGeneration, text hidden/heads/layers, vision depth/hidden/out_hidden, patch "
        "16, vocab 151936, max_position_embeddings 262144); the model card's table (QwenLM/Qwen3-VL-Embedding README: "
        "{layers} layers, 32K sequence, embedding dimension {dim}; base_model Qwen3-VL-{size}-Instruct); {base}")
_BASE_2B = ("KV heads, head_dim, tied embeddings, rope_theta 5e6, M-RoPE sections and the vision heads / "
            "intermediate / DeepStack indexes from a public transcription of the base Qwen3-VL-2B-Instruct "
            "config.json. intermediate_size of the text decoder is left out (no reliable transcription found)")
_BASE_8B = ("KV heads, head_dim, intermediate_size, untied embeddings, rope_theta 5e6, M-RoPE sections and "
            "DeepStack indexes from the config.json of a public Qwen3-VL-8B-Instruct fine-tune (same shapes as its "
            "base); the 27-layer 1152-wide tower's 16 heads and 4304 intermediate from a public Qwen3-VL config with "
            "that tower and transformers 5.24's Qwen3VLVisionConfig defaults")
_RERANK_NOTE = (" The reranker's own config.json was not seen: the card lists the same sizes and layer counts, "
                "built on the same Qwen3-VL-{size}-Instruct, so these are that base model's numbers.")


def _config(parameters, text, vision, **extra):
    return dict(_parameters=parameters, model_type="qwen3_vl", text_config=text, vision_config=vision, **extra)


_TEXT_2B = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                vocab_size=151936, max_position_embeddings=262144, tie_word_embeddings=True, rope_theta=5000000.0,
                mrope_section=[24, 20, 20], mrope_interleaved=True)
_VISION_2B = dict(depth=24, hidden_size=1024, num_heads=16, intermediate_size=4096, patch_size=16,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=2048, num_position_embeddings=2304,
                  deepstack_visual_indexes=[5, 11, 17])
_TEXT_8B = dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                intermediate_size=12288, vocab_size=151936, max_position_embeddings=262144, tie_word_embeddings=False,
                rms_norm_eps=1e-6, hidden_act="silu", rope_theta=5000000.0, mrope_section=[24, 20, 20],
                mrope_interleaved=True)
_VISION_8B = dict(depth=27, hidden_size=1152, num_heads=16, intermediate_size=4304, patch_size=16,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=4096, num_position_embeddings=2304,
                  deepstack_visual_indexes=[8, 16, 24])

_TEST = "tests/model_zoo/test_qwen3_vl_retrieval.py::test_vl_{}_equals_the_reference_protocol"
_COMMON = dict(category="retrieval_vision", family="qwen3_vl_retrieval", model_type="qwen3_vl", architecture=_ARCH,
               graphs=("vision_encoder", "decoder_step"), status="supported",
               converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]})

ENTRIES = [
    Entry(name="Qwen3-VL-Reranker-8B", hub_id="Qwen/Qwen3-VL-Reranker-8B", pipeline="rerank",
          config=_config("8B", _TEXT_8B, _VISION_8B, max_sequence_length=32768),
          config_source=_SRC.format(size="8B", layers=36, dim=4096, base=_BASE_8B) + _RERANK_NOTE.format(size="8B"),
          test=_TEST.format("reranker"), **_COMMON),
    Entry(name="Qwen3-VL-Reranker-2B", hub_id="Qwen/Qwen3-VL-Reranker-2B", pipeline="rerank",
          config=_config("2B", _TEXT_2B, _VISION_2B, max_sequence_length=32768),
          config_source=_SRC.format(size="2B", layers=28, dim=2048, base=_BASE_2B) + _RERANK_NOTE.format(size="2B"),
          test=_TEST.format("reranker"), **_COMMON),
    Entry(name="Qwen3-VL-Embedding-2B", hub_id="Qwen/Qwen3-VL-Embedding-2B", pipeline="embed",
          config=_config("2B", _TEXT_2B, _VISION_2B, embedding_dim=2048, max_sequence_length=32768),
          config_source=_SRC.format(size="2B", layers=28, dim=2048, base=_BASE_2B),
          test=_TEST.format("embedder"), **_COMMON),
    Entry(name="Qwen3-VL-Embedding-8B", hub_id="Qwen/Qwen3-VL-Embedding-8B", pipeline="embed",
          config=_config("8B", _TEXT_8B, _VISION_8B, embedding_dim=4096, max_sequence_length=32768),
          config_source=_SRC.format(size="8B", layers=36, dim=4096, base=_BASE_8B),
          test=_TEST.format("embedder"), **_COMMON),
]
