"""GLM-OCR (transformers model_type "glm_ocr", GlmOcrForConditionalGeneration): a CogViT vision encoder (14-px patches
with temporal patch 2, 2-D rotary, RMSNorm, SwiGLU MLP, 2x2 patch merger into the decoder width) and a GLM-0.5B-class
decoder (grouped-query attention, pairwise-interleaved rotary with M-RoPE sections, GLM-4 sandwich norms: RMSNorm
after attention and after the MLP too, fused gate_up projection) that writes the page as text / Markdown / LaTeX."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="GLM-OCR", category="retrieval_vision", family="glm_ocr", model_type="glm_ocr",
          hub_id="zai-org/GLM-OCR", architecture="transformers GlmOcrForConditionalGeneration",
          config=dict(_parameters="0.9B", model_type="glm_ocr",
                      text_config=dict(model_type="glm_ocr_text", hidden_size=1536, num_hidden_layers=16,
                                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                       intermediate_size=4608, vocab_size=59392, max_position_embeddings=131072,
                                       rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False,
                                       tie_word_embeddings=False, rope_theta=10000.0, partial_rotary_factor=1.0,
                                       mrope_section=[16, 24, 24], num_nextn_predict_layers=1),
                      vision_config=dict(model_type="glm_ocr_vision", depth=24, hidden_size=1024, num_heads=16,
                                         intermediate_size=4096, image_size=336, patch_size=14, temporal_patch_size=2,
                                         spatial_merge_size=2, out_hidden_size=1536, hidden_act="silu",
                                         attention_bias=True, rms_norm_eps=1e-5)),
          config_source=("zai-org/GLM-OCR config.json as mirrored by several public repositories (e.g. "
                         "textagent/GLM-OCR-ONNX, EZCon/GLM-OCR-mlx: identical text_config and vision_config); 0.9B "
                         "from the transformers GLM-OCR documentation. Note transformers 5.24's GlmOcrConfig defaults "
                         "are not this checkpoint (their text hidden size is 1024 and FFN 4096)"),
          graphs=("vision_encoder", "decoder_step"), pipeline="ocr", status="planned",
          missing=("VLM support (issue 38): a graph builder for the CogViT vision encoder (Conv3d 2x14x14 patch "
                   "embedding, 2-D rotary attention with q/k/v biases, RMSNorm, SwiGLU MLP, 2x2 merger to 1536) and "
                   "a glm_ocr_text decoder step (the engine's decoder graph has no post-attention / post-MLP "
                   "sandwich norms outside Gemma 2, no fused gate_up split and no 3-D M-RoPE positions [16, 24, 24] "
                   "for image tokens); the checkpoint frontend (issue 34) has no builder for model_type glm_ocr; and "
                   "the ocr pipeline (the image processor's resize to multiples of 28, the prompt with image "
                   "placeholder tokens, greedy decoding to text). The MTP layer (num_nextn_predict_layers 1) is not "
                   "needed for plain decoding")),
]
