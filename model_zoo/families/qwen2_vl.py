"""Qwen2-VL and Qwen2.5-VL (Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration): a native-resolution
ViT (patch 14, temporal patch 2, 2D rotary) and a 2x2 patch merger into a Qwen2 decoder with multimodal RoPE
(M-RoPE: time / height / width sections [16, 24, 24]). Qwen2-VL's ViT has LayerNorm and QuickGELU MLPs (embed_dim
1280, mlp_ratio 4); Qwen2.5-VL's has RMSNorm, SwiGLU MLPs and windowed attention (window 112) with full attention in
four blocks.

Qwen2.5-VL runs on the runtime (`python -m model_zoo convert Qwen2.5-VL-3B-Instruct`, lite.llm.TextEngine with image
parts in chat messages): the vision tower for any image size (model_zoo/multimodal/qwen2_5_vl_vision_graph.py; the
grid's window order, RoPE tables and masks computed per image by lite.qwen2_vl_image) and the language model's step
graph with 3-D positions and the image rows at the image-pad tokens (lite.llm.multimodal), continuous batching and
prefix caching as for text. Qwen2-VL's ViT (LayerNorm, QuickGELU, whole frames in every block) goes through the same
builder and pipeline."""
from model_zoo.registry import Entry


def _text(hidden, layers, heads, kv_heads, intermediate, **extra):
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                intermediate_size=intermediate, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
                rms_norm_eps=1e-6, hidden_act="silu", mrope_section=[16, 24, 24], **extra)


def _qwen2_vl_2b():
    # vision_config in the checkpoint only overrides hidden_size (1536, the merger's output); the rest is
    # Qwen2VLVisionConfig's defaults, which transformers 5.24 gives as below.
    vision = dict(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, hidden_act="quick_gelu", patch_size=14,
                  temporal_patch_size=2, spatial_merge_size=2, hidden_size=1536)
    return dict(_parameters="2B", model_type="qwen2_vl", vision_config=vision,
                text_config=_text(1536, 28, 12, 2, 8960, max_position_embeddings=32768),
                image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                vision_end_token_id=151653)


def _qwen2_5_vl_3b():
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, hidden_act="silu", patch_size=14,
                  temporal_patch_size=2, spatial_merge_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                  out_hidden_size=2048, tokens_per_second=2)
    return dict(_parameters="3B", model_type="qwen2_5_vl", vision_config=vision,
                text_config=_text(2048, 36, 16, 2, 11008), image_token_id=151655, video_token_id=151656,
                vision_start_token_id=151652, vision_end_token_id=151653)


_Q2_SOURCE = ("Qwen/Qwen2-VL-2B-Instruct's config.json as copied in public repositories (the onnx-community and AWQ "
              "conversions and fine-tunes that name it as their base; the Hub is not reachable from this machine); "
              "its vision_config sets only hidden_size 1536, the other vision numbers are transformers 5.24's "
              "Qwen2VLVisionConfig defaults, which the checkpoint inherits. Qwen2-VL-2B (the base model) is entered "
              "with the Instruct model's numbers (same architecture and parameter count); its own config.json was "
              "not read")
_Q25_SOURCE = ("Qwen/Qwen2.5-VL-3B-Instruct's config.json as copied in public repositories (fine-tunes whose "
               "_name_or_path is that checkpoint, a C++ test fixture 'selected from Qwen2.5VL-3B'); the Hub is not "
               "reachable from this machine. max_position_embeddings is left out: the copies disagree (128000 and "
               "32768)")

ENTRIES = [
    Entry(name="Qwen2.5-VL-3B-Instruct", category="vlm", family="qwen2_vl", hub_id="Qwen/Qwen2.5-VL-3B-Instruct",
          model_type="qwen2_5_vl", config=_qwen2_5_vl_3b(), config_source=_Q25_SOURCE,
          architecture="transformers Qwen2_5_VLForConditionalGeneration (Qwen2_5_VisionTransformerPretrainedModel + "
                       "Qwen2_5_VLTextModel)",
          graphs=("vision_encoder", "decoder_step"), pipeline="caption", status="supported",
          converter=dict(frontend="HF", precision="fp32, bf16, int8 or int4 language-model and vision weights"),
          test="tests/model_zoo/test_qwen2_5_vl_chat.py::test_chat_with_images_generates_as_transformers"),
    Entry(name="Qwen2-VL-2B-Instruct", category="vlm", family="qwen2_vl", hub_id="Qwen/Qwen2-VL-2B-Instruct",
          model_type="qwen2_vl", config=_qwen2_vl_2b(), config_source=_Q2_SOURCE,
          architecture="transformers Qwen2VLForConditionalGeneration (Qwen2VisionTransformerPretrainedModel + "
                       "Qwen2VLTextModel)",
          graphs=("vision_encoder", "decoder_step"), pipeline="caption", status="supported",
          converter=dict(frontend="HF", precision="fp32, bf16, int8 or int4 language-model and vision weights"),
          test="tests/model_zoo/test_qwen2_5_vl_chat.py::test_qwen2_vl_chat_and_vision_tower"),
    Entry(name="Qwen2-VL-2B", category="vlm", family="qwen2_vl", hub_id="Qwen/Qwen2-VL-2B",
          model_type="qwen2_vl", config=_qwen2_vl_2b(), config_source=_Q2_SOURCE,
          architecture="transformers Qwen2VLForConditionalGeneration (Qwen2VisionTransformerPretrainedModel + "
                       "Qwen2VLTextModel)",
          graphs=("vision_encoder", "decoder_step"), pipeline="caption", status="supported",
          converter=dict(frontend="HF", precision="fp32, bf16, int8 or int4 language-model and vision weights"),
          test="tests/model_zoo/test_qwen2_5_vl_chat.py::test_qwen2_vl_chat_and_vision_tower"),
]
