"""Qwen3-ASR (Qwen team): a speech LLM. 128-bin Whisper-style log-mel at 16 kHz, an audio encoder (AuT: three stride-2
conv2d layers, 8x downsampling to 12.5 Hz, then a Transformer with sinusoidal positions and chunked block attention, and
a 2-layer projector to the LLM width) whose frames replace the audio placeholder tokens of a ChatML prompt to a Qwen3
decoder (q/k RMSNorm, GQA 16/8, head dim 128) that writes the language tag and the transcript.
transformers (5.x) implements it as Qwen3ASRForConditionalGeneration (model_type qwen3_asr).

Runs on the runtime from a transformers-layout checkpoint (the -hf conversions): head "audio" is the encoder and
projector (model_zoo/multimodal/qwen3_asr_audio_graph.py), the step graph the Qwen3 decoder with the audio rows
replacing the audio placeholder tokens' embeddings, lite.qwen3_asr.Qwen3ASR the transcribe pipeline (log-mel front end,
chat prompt, greedy decoding, "language X<asr_text>" parsing); lite_boost has no ASR support."""
from model_zoo.registry import Entry

_SOURCE = ("a public from-scratch reimplementation's model reference (antirez/qwen-asr MODEL.md, its table of both "
           "sizes' config.json values), agreeing with ivan-digital/qwen3-asr-swift docs/asr-model.md{extra}; "
           "n_window / "
           "n_window_infer and rope settings left out. The Hub is not reachable from this machine")


def _config(parameters, d_model, enc_layers, enc_heads, enc_ffn, output_dim, hidden, intermediate, **text_extra):
    return dict(_parameters=parameters, model_type="qwen3_asr",
                audio_config=dict(model_type="qwen3_asr_encoder", num_mel_bins=128, d_model=d_model,
                                  encoder_layers=enc_layers, encoder_attention_heads=enc_heads,
                                  encoder_ffn_dim=enc_ffn, output_dim=output_dim, downsample_hidden_size=480,
                                  activation_function="gelu"),
                text_config=dict(model_type="qwen3", hidden_size=hidden, num_hidden_layers=28, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, intermediate_size=intermediate,
                                 vocab_size=151936, **text_extra))


_COMMON = dict(category="audio", family="qwen3_asr", model_type="qwen3_asr", graphs=("audio_encoder", "decoder_step"),
               pipeline="transcribe", status="supported",
               converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
               test="tests/model_zoo/test_qwen3_asr.py::test_transcribe_equals_transformers",
               architecture="transformers Qwen3ASRForConditionalGeneration (Qwen3-ASR audio encoder + Qwen3 decoder)")
ENTRIES = [
    Entry(name="Qwen3-ASR-1.7B", hub_id="Qwen/Qwen3-ASR-1.7B",
          config=_config("1.7B", 1024, 24, 16, 4096, 2048, 2048, 6144, max_position_embeddings=65536,
                         tie_word_embeddings=True),
          config_source=_SOURCE.format(extra="; the encoder and text sizes are also transformers' Qwen3ASRConfig "
                                             "defaults (documented as Qwen/Qwen3-ASR-1.7B-hf, the transformers-layout "
                                             "conversion), except output_dim, whose class default 3584 does not match "
                                             "the 2048-wide decoder; max_position_embeddings and tied embeddings from "
                                             "those defaults"),
          **_COMMON),
    Entry(name="Qwen3-ASR-0.6B", hub_id="Qwen/Qwen3-ASR-0.6B",
          config=_config("0.6B", 896, 18, 14, 3584, 1024, 1024, 3072),
          config_source=_SOURCE.format(extra=" and the CrispASR GGUF conversion's card (18-layer encoder, 896 -> 1024 "
                                             "projector, 28-layer Qwen3 0.6B decoder with GQA 16/8)"),
          **_COMMON),
]


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head="logits", **_):
    from model_zoo.language.decoder_graph import build_decoder_graph
    from model_zoo.multimodal.qwen3_asr_audio_graph import build_qwen3_asr_audio_graph
    from model_zoo.language.text_model_view import TextModelView, text_config
    if head == "audio":
        return build_qwen3_asr_audio_graph(config, weights, weight_format, group_size)
    cfg = dict(text_config(config), model_type="qwen3")
    return build_decoder_graph(cfg, TextModelView(weights), block_size, kv_cache_dtype, weight_format, group_size,
                               head, image_rows=head == "logits")


GRAPH_BUILDERS = {"qwen3_asr": _build}
