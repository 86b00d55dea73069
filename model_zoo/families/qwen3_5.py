"""Qwen3.5 and Qwen3.6 dense models (transformers model_type "qwen3_5"; checkpoints are
Qwen3_5ForConditionalGeneration, whose text path is Qwen3_5ForCausalLM): a hybrid decoder in which three of every four
layers are gated DeltaNet linear attention (a causal depthwise conv1d over the fused q/k/v projection, then the gated
delta rule on a recurrent state per sequence, then a gated RMSNorm) and every fourth is full softmax attention with an
output gate, q/k RMSNorm, grouped-query heads of 256 and partial (25%) M-RoPE. RMSNorm weights are zero-centred
(scale 1 + w); SwiGLU MLP. The checkpoint also carries a vision tower and one MTP layer, which these text-chat
entries do not use."""
from model_zoo.registry import Entry

_ARCH = ("transformers Qwen3_5ForConditionalGeneration (the checkpoint); text path Qwen3_5ForCausalLM / "
         "Qwen3_5TextModel: Qwen3_5GatedDeltaNet (linear_attention) and Qwen3_5Attention (full_attention) layers "
         "-> model_zoo.language.hybrid_decoder_graph (CausalConv1D + GatedDeltaRule with per-sequence state, paged "
         "Attention)")

_TEST = "tests/model_zoo/test_checkpoint_qwen3_5.py::test_qwen3_5_matches_transformers"

_COMMON = dict(category="llm", family="qwen3_5", model_type="qwen3_5", architecture=_ARCH, graphs=("decoder_step",),
               pipeline="chat", status="supported", test=_TEST,
               converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"],
                          "note": "text path only: the vision tower and the MTP layer are not converted"})


def _text(parameters, hidden, layers, heads, kv_heads, intermediate, **known):
    """The text config (config.json text_config) of one size; values not confirmed by a source are left out."""
    cfg = dict(_parameters=parameters, model_type="qwen3_5", hidden_size=hidden, num_hidden_layers=layers,
               num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate)
    cfg.update({k: v for k, v in known.items() if v is not None})
    return cfg


# Fields shared by every size whose values a source confirms for that size.
_GDN = dict(linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4)
_ROPE = dict(rope_theta=10000000.0, partial_rotary_factor=0.25)

_SRC_27B = ("Qwen/Qwen3.5-27B config.json as transcribed in public code (a Qwen3_5Config built with the full "
            "text_config and vision_config of the checkpoint), cross-checked with THUDM/slime's "
            "scripts/models/qwen3.5-27B.sh (64 layers, hidden 5120, FFN 17408, 24 heads / 4 KV groups, kv-channels "
            "256, rotary 25%, base 1e7, vocab 248320, untied) and a public 4B-vs-27B config comparison; the Hub is not "
            "reachable from this machine")
_SRC_9B = ("transformers 5.24 Qwen3_5TextConfig defaults, which its docstring calls the Qwen3.5-9B style "
           "configuration (hidden 4096, 32 layers, 16 heads / 4 KV, head_dim 256, FFN 12288, linear 16 key / 32 "
           "value heads of 128, conv 4, vocab 248320), corroborated by the GGUF metadata of the 9B quoted in a public "
           "review (32 layers, 4096, FFN 12288, 16 heads, 4 KV, d_state 128, d_conv 4, dt_rank 32, 16 groups, rope "
           "base 1e7, 64 rope dims, vocab 248320, 262144 context) and a public model record (262144 "
           "max_position_embeddings); tie_word_embeddings and rms_norm_eps are left out (not confirmed for this "
           "checkpoint)")
_SRC_4B = ("Qwen/Qwen3.5-4B config.json values as tabulated in a public 4B-vs-27B config comparison (32 layers, "
           "hidden 2560, FFN 9216, 16 heads / 4 KV, head_dim 256, linear 16 key / 32 value heads, "
           "full_attention_interval 4, 262144 positions, vocab 248320, vision tower 24 layers x 1024) and a public "
           "model preset citing that config.json; linear head dims, conv kernel, rope and norm settings and "
           "tie_word_embeddings are left out (not seen for this size)")
_SRC_2B = ("Qwen/Qwen3.5-2B config.json values as quoted in public code and notes citing it (hidden 2048, 24 layers "
           "of which 6 full attention, 8 heads / 2 KV of head_dim 256, FFN 6144, 262144 positions; vision tower 24 "
           "layers x 1024 projected to 2048); the linear-attention head counts and dims, vocab, rope and norm "
           "settings and tie_word_embeddings are left out (no transcription of them was found)")
_SRC_08B = ("Qwen/Qwen3.5-0.8B config.json as transcribed in public code (a C++ test's copy of the config and an "
            "MLX 4-bit conversion's text_config), cross-checked with THUDM/slime's scripts/models/qwen3.5-0.8B.sh "
            "(24 layers, hidden 1024, FFN 3584, 8 heads / 2 KV groups, kv-channels 256, rotary 25%, base 1e7, "
            "vocab 248320)")
_SRC_36 = ("Qwen/Qwen3.6-27B config.json values as transcribed in public code (a model preset and a layout "
           "definition both citing it: 64 layers as 16 x [DeltaNet x3, attention], hidden 5120, FFN 17408, 24 "
           "heads / 4 KV of head_dim 256, linear 16 key / 48 value heads of 128, conv 4, vocab 248320, 262144 "
           "context, float32 SSM state) and public notes on it (model_type qwen3_5 / Qwen3_5ForConditionalGeneration, "
           "rope_theta 1e7, partial_rotary_factor 0.25, one MTP layer, vision tower 27 layers x 1152 with 16-px "
           "patches); rms_norm_eps and tie_word_embeddings are left out (not seen)")

ENTRIES = [
    Entry(name="Qwen3.6-27B", hub_id="Qwen/Qwen3.6-27B", config_source=_SRC_36,
          config=_text("27B", 5120, 64, 24, 4, 17408, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
                       linear_num_value_heads=48, full_attention_interval=4, max_position_embeddings=262144,
                       mtp_num_hidden_layers=1, **_GDN, **_ROPE,
                       vision_config=dict(depth=27, hidden_size=1152, patch_size=16)),
          **_COMMON),
    Entry(name="Qwen3.5-27B", hub_id="Qwen/Qwen3.5-27B", config_source=_SRC_27B,
          config=_text("27B", 5120, 64, 24, 4, 17408, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
                       linear_num_value_heads=48, full_attention_interval=4, max_position_embeddings=262144,
                       tie_word_embeddings=False, rms_norm_eps=1e-6, hidden_act="silu", attn_output_gate=True,
                       mtp_num_hidden_layers=1, mrope_section=[11, 11, 10], **_GDN, **_ROPE,
                       vision_config=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                                          patch_size=16, temporal_patch_size=2, spatial_merge_size=2,
                                          out_hidden_size=5120, num_position_embeddings=2304)),
          **_COMMON),
    Entry(name="Qwen3.5-9B", hub_id="Qwen/Qwen3.5-9B", config_source=_SRC_9B,
          config=_text("9B", 4096, 32, 16, 4, 12288, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
                       linear_num_value_heads=32, full_attention_interval=4, max_position_embeddings=262144,
                       hidden_act="silu", **_GDN, **_ROPE),
          **_COMMON),
    Entry(name="Qwen3.5-4B", hub_id="Qwen/Qwen3.5-4B", config_source=_SRC_4B,
          config=_text("4B", 2560, 32, 16, 4, 9216, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
                       linear_num_value_heads=32, full_attention_interval=4, max_position_embeddings=262144,
                       vision_config=dict(depth=24, hidden_size=1024)),
          **_COMMON),
    Entry(name="Qwen3.5-2B", hub_id="Qwen/Qwen3.5-2B", config_source=_SRC_2B,
          config=_text("2B", 2048, 24, 8, 2, 6144, head_dim=256, full_attention_interval=4,
                       max_position_embeddings=262144,
                       vision_config=dict(depth=24, hidden_size=1024, out_hidden_size=2048)),
          **_COMMON),
    Entry(name="Qwen3.5-0.8B", hub_id="Qwen/Qwen3.5-0.8B", config_source=_SRC_08B,
          config=_text("0.8B", 1024, 24, 8, 2, 3584, head_dim=256, vocab_size=248320, linear_num_key_heads=16,
                       linear_num_value_heads=16, full_attention_interval=4, max_position_embeddings=262144,
                       tie_word_embeddings=True, rms_norm_eps=1e-6, hidden_act="silu", attn_output_gate=True,
                       mtp_num_hidden_layers=1, mrope_section=[11, 11, 10], **_GDN, **_ROPE,
                       vision_config=dict(depth=12, hidden_size=768)),
          **_COMMON),
]


def _build(config, weights, **options):
    from model_zoo.language.hybrid_decoder_graph import build_from_checkpoint
    return build_from_checkpoint(config, weights, **options)


GRAPH_BUILDERS = {"qwen3_5": _build, "qwen3_5_text": _build}
