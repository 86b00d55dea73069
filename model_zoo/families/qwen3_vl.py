"""Qwen3-VL (dense; Qwen3VLForConditionalGeneration): a ViT with 2D rotary and learned, interpolated position
embeddings (patch 16, temporal patch 2), a 2x2 patch merger into the decoder width, and DeepStack mergers whose
features (from three intermediate ViT blocks) are added to the hidden states of the decoder's first three layers. The
language model is a Qwen3 decoder (q/k RMSNorm, grouped-query attention) with interleaved M-RoPE (time, height,
width sections). Instruct and Thinking checkpoints share one architecture; they differ in weights only."""
from model_zoo.registry import Entry

_SOURCE = ("the checkpoints' config.json (Qwen organisation), as transcribed in public copies found with the search "
           "tools (the Hub is not reachable from this machine): 4B from a verbatim inline copy of "
           "Qwen/Qwen3-VL-4B-Instruct's config.json in a public Rust port and two Python copies; 8B from a public "
           "config.json derived from Qwen3-VL-8B-Instruct and Ollama's GGUF metadata of qwen3-vl:8b; 2B from two "
           "independent public copies of the 2B config.json (text 2048/28 layers, vision 24 blocks -> 2048). The "
           "Thinking entries reuse the Instruct numbers of the same size (same architecture; Hub pages give the same "
           "parameter count), not a separately read config.json")
_MISSING = ("graph builders from the checkpoint for the Qwen3-VL vision tower (2D-rotary ViT, learned position "
            "embeddings interpolated to the grid, 2x2 patch merger, DeepStack mergers) and the caption pipeline "
            "(issue 38); the language model is a Qwen3 decoder that model_zoo.decoder_graph builds, but the step graph "
            "has no interleaved M-RoPE (three position axes, mrope_section [24, 20, 20]) and no DeepStack additions to "
            "the first three layers' hidden states yet")
_COMMON = dict(category="vlm", family="qwen3_vl", model_type="qwen3_vl", graphs=("vision_encoder", "decoder_step"),
               pipeline="caption", status="planned", missing=_MISSING, config_source=_SOURCE,
               architecture="transformers Qwen3VLForConditionalGeneration (Qwen3VLVisionModel + Qwen3VLTextModel)")


def _qwen3_vl(parameters, hidden, layers, heads, kv_heads, intermediate, tied, vision_depth, vision_hidden,
              vision_intermediate, deepstack):
    vision = dict(depth=vision_depth, hidden_size=vision_hidden, intermediate_size=vision_intermediate, num_heads=16,
                  patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304,
                  out_hidden_size=hidden, deepstack_visual_indexes=deepstack, hidden_act="gelu_pytorch_tanh")
    text = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                head_dim=128, intermediate_size=intermediate, vocab_size=151936, tie_word_embeddings=tied,
                max_position_embeddings=262144, rope_theta=5000000.0, rms_norm_eps=1e-6, hidden_act="silu",
                mrope_section=[24, 20, 20], mrope_interleaved=True)
    return dict(_parameters=parameters, model_type="qwen3_vl", vision_config=vision, text_config=text,
                image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                vision_end_token_id=151653)


def _8b():
    return _qwen3_vl("8B", 4096, 36, 32, 8, 12288, False, 27, 1152, 4304, [8, 16, 24])


def _4b():
    return _qwen3_vl("4B", 2560, 36, 32, 8, 9728, True, 24, 1024, 4096, [5, 11, 17])


def _2b():
    return _qwen3_vl("2B", 2048, 28, 16, 8, 6144, True, 24, 1024, 4096, [5, 11, 17])


ENTRIES = [
    Entry(name="Qwen3-VL-8B-Instruct", hub_id="Qwen/Qwen3-VL-8B-Instruct", config=_8b(), **_COMMON),
    Entry(name="Qwen3-VL-8B-Thinking", hub_id="Qwen/Qwen3-VL-8B-Thinking", config=_8b(), **_COMMON),
    Entry(name="Qwen3-VL-4B-Thinking", hub_id="Qwen/Qwen3-VL-4B-Thinking", config=_4b(), **_COMMON),
    Entry(name="Qwen3-VL-4B-Instruct", hub_id="Qwen/Qwen3-VL-4B-Instruct", config=_4b(), **_COMMON),
    Entry(name="Qwen3-VL-2B-Thinking", hub_id="Qwen/Qwen3-VL-2B-Thinking", config=_2b(), **_COMMON),
    Entry(name="Qwen3-VL-2B-Instruct", hub_id="Qwen/Qwen3-VL-2B-Instruct", config=_2b(), **_COMMON),
]
