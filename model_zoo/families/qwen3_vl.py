"""Qwen3-VL (dense; Qwen3VLForConditionalGeneration): a ViT with 2D rotary and learned, interpolated position
embeddings (patch 16, temporal patch 2), a 2x2 patch merger into the decoder width, and DeepStack mergers whose
features (from three intermediate ViT blocks) are added to the hidden states of the decoder's first three layers. The
language model is a Qwen3 decoder (q/k RMSNorm, grouped-query attention) with interleaved M-RoPE (time, height,
width sections). Instruct and Thinking checkpoints share one architecture; they differ in weights only.

On the runtime (`python -m model_zoo convert Qwen3-VL-...`, lite.llm.TextEngine with image parts in chat messages):
the vision tower for any image size (model_zoo/multimodal/qwen3_vl_vision_graph.py: the learned position table's
bilinear taps, RoPE tables and masks computed per image by lite.qwen2_vl_image) with its DeepStack features as a second
output, and the language model's step graph with interleaved M-RoPE, the image rows at the image-pad tokens and the
DeepStack features added after its first layers (model_zoo.language.decoder_graph, lite.llm.multimodal)."""
from model_zoo.language.decoder_graph import build_decoder_graph
from model_zoo.multimodal.qwen3_vl_vision_graph import build_qwen3_vl_vision_graph
from model_zoo.registry import Entry
from model_zoo.language.text_model_view import TextModelView, text_config

_SOURCE = ("the checkpoints' config.json (Qwen organisation), as transcribed in public copies found with the search "
           "tools (the Hub is not reachable from this machine): 4B from a verbatim inline copy of "
           "Qwen/Qwen3-VL-4B-Instruct's config.json in a public Rust port and two Python copies; 8B from a public "
           "config.json derived from Qwen3-VL-8B-Instruct and Ollama's GGUF metadata of qwen3-vl:8b; 2B from two "
           "independent public copies of the 2B config.json (text 2048/28 layers, vision 24 blocks -> 2048). The "
           "Thinking entries reuse the Instruct numbers of the same size (same architecture; Hub pages give the same "
           "parameter count), not a separately read config.json")
_COMMON = dict(category="vlm", family="qwen3_vl", model_type="qwen3_vl", graphs=("vision_encoder", "decoder_step"),
               pipeline="caption", status="supported", config_source=_SOURCE,
               converter=dict(frontend="HF", precision="fp32, bf16, int8 or int4 language-model and vision weights"),
               test="tests/model_zoo/test_qwen2_5_vl_chat.py::test_qwen3_vl_chat_and_vision_tower",
               architecture="transformers Qwen3VLForConditionalGeneration (Qwen3VLVisionModel + Qwen3VLTextModel)")


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head="logits", **_):
    """Head "vision": the vision tower for any image size; else the language model's step graph (a Qwen3 decoder
    with interleaved M-RoPE, the image rows and the DeepStack additions)."""
    if head == "vision":
        return build_qwen3_vl_vision_graph(config, weights, weight_format, group_size)
    levels = len((config.get("vision_config") or {}).get("deepstack_visual_indexes") or [])
    cfg = dict(text_config(config), model_type="qwen3")
    return build_decoder_graph(cfg, TextModelView(weights), block_size, kv_cache_dtype, weight_format, group_size,
                               head, deepstack_levels=levels)


GRAPH_BUILDERS = {"qwen3_vl": _build}


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
