"""CosyVoice 2 / 3 (Alibaba FunAudioLLM): zero-shot TTS in three stages. A text-speech language model (a Qwen2 backbone
with 896 hidden units, cosyvoice.llm Qwen2LM / CosyVoice3LM) continues the prompt's 25 Hz speech tokens (6561 FSQ codes,
produced by an ONNX speech tokenizer) from the text; a chunk-causal flow-matching model turns the tokens, the prompt's
mel frames and a CAM++ speaker embedding (ONNX, 192-dim) into 80-bin mel at 50 Hz (CosyVoice 2: an upsampling Conformer
encoder + a U-Net-style CausalConditionalDecoder estimator; CosyVoice 3: a pre-lookahead layer + a 22-block DiT
estimator); a HiFT vocoder (neural source-filter + iSTFT) renders 24 kHz audio. Neither transformers nor diffusers has
it: the original project's cosyvoice package.

The Qwen2 backbone is the kind of decoder model_zoo.language.decoder_graph already builds for the qwen2 family; the rest
runs nowhere in the project yet (issue 38); lite_boost has no TTS support."""
from model_zoo.registry import Entry

_HUB = "The Hub is not reachable from this machine"
_HIFT = dict(in_channels=80, base_channels=512, nb_harmonics=8, sampling_rate=24000, upsample_rates=[8, 5, 3],
             upsample_kernel_sizes=[16, 11, 7], istft_n_fft=16, istft_hop_len=4, resblock_kernel_sizes=[3, 7, 11])
_COMMON = dict(category="audio", family="cosyvoice", pipeline="speak", status="planned")
_MISSING = ("graph builders for its {llm}, {flow}, HiFT vocoder and the ONNX speech tokenizer / CAM++ speaker encoder "
            "it ships, and the speak pipeline (prompt-speech tokenization, streaming token-to-mel chunks) (issue 38); "
            "the Qwen2 backbone itself is what model_zoo.language.decoder_graph builds for the qwen2 family, without "
            "the "
            "speech-token embedding and head; lite_boost has no TTS support")

ENTRIES = [
    Entry(name="CosyVoice2-0.5B", hub_id="FunAudioLLM/CosyVoice2-0.5B",
          architecture=("CosyVoice's own code: cosyvoice.llm.llm.Qwen2LM over transformers Qwen2ForCausalLM "
                        "(CosyVoice-BlankEN) + cosyvoice.flow CausalMaskedDiffWithXvec (UpsampleConformerEncoder, "
                        "CausalConditionalCFM with CausalConditionalDecoder) + cosyvoice.hifigan HiFTGenerator; "
                        "speech_tokenizer_v2 and campplus as ONNX"),
          config=dict(_parameters="0.5B",
                      llm=dict(llm_input_size=896, llm_output_size=896, speech_token_size=6561, token_frame_rate=25,
                               backbone=dict(model_type="qwen2", hidden_size=896, num_hidden_layers=24,
                                             num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                                             vocab_size=151936)),
                      flow=dict(input_size=512, output_size=80, spk_embed_dim=192, vocab_size=6561,
                                token_mel_ratio=2, pre_lookahead_len=3,
                                encoder=dict(output_size=512, attention_heads=8, linear_units=2048, num_blocks=6,
                                             pos_enc_layer_type="rel_pos_espnet", use_cnn_module=False),
                                estimator=dict(in_channels=320, out_channels=80, channels=[256], attention_head_dim=64,
                                               n_blocks=4, num_mid_blocks=12, num_heads=8, act_fn="gelu"),
                                cfm=dict(solver="euler", t_scheduler="cosine", inference_cfg_rate=0.7)),
                      hift=_HIFT, sample_rate=24000),
          config_source=("the CosyVoice repo's examples/libritts/cosyvoice2/conf/cosyvoice2.yaml (the recipe the "
                         "released cosyvoice2.yaml follows; the released file itself not read), transcribed; the LLM "
                         "backbone is Qwen2.5-0.5B per the CosyVoice 2 report, its sizes from Qwen2.5-0.5B's "
                         "config.json (as in model_zoo/families/qwen2.py). " + _HUB),
          graphs=("speech_tokenizer", "speaker_encoder", "llm_step", "flow_encoder", "flow_estimator", "vocoder"),
          missing=_MISSING.format(llm="Qwen2LM text-speech LM step (speech-token embedding and speech-token head "
                                      "around "
                                      "the Qwen2 decoder)",
                                  flow="upsampling Conformer flow encoder and causal CFM estimator"),
          **_COMMON),
    Entry(name="CosyVoice3-0.5B", hub_id="FunAudioLLM/Fun-CosyVoice3-0.5B-2512",
          architecture=("CosyVoice's own code: cosyvoice.llm.llm.CosyVoice3LM over a Qwen2 backbone (Qwen2Encoder) + "
                        "cosyvoice.flow CausalMaskedDiffWithDiT (PreLookaheadLayer, CausalConditionalCFM with "
                        "cosyvoice.flow.DiT.dit.DiT) + cosyvoice.hifigan CausalHiFTGenerator; speech_tokenizer_v3 and "
                        "campplus as ONNX"),
          config=dict(_parameters="0.5B",
                      llm=dict(llm_input_size=896, llm_output_size=896, speech_token_size=6561, token_frame_rate=25),
                      flow=dict(input_size=80, output_size=80, spk_embed_dim=192, vocab_size=6561, token_mel_ratio=2,
                                pre_lookahead_len=3, pre_lookahead_channels=1024,
                                estimator=dict(dim=1024, depth=22, heads=16, dim_head=64, ff_mult=2, mel_dim=80,
                                               mu_dim=80, spk_dim=80, out_channels=80),
                                cfm=dict(solver="euler", t_scheduler="cosine", inference_cfg_rate=0.7)),
                      hift=dict(_HIFT, causal=True, conv_pre_look_right=4), sample_rate=24000, chunk_size=25),
          config_source=("the CosyVoice repo's examples/libritts/cosyvoice3/conf/cosyvoice3.yaml (the released "
                         "cosyvoice3.yaml itself not read), transcribed; the LLM backbone's depth, heads and FFN width "
                         "are left out (the yaml only fixes its 896-wide input/output; it loads the backbone from the "
                         "checkpoint's CosyVoice-BlankEN folder); the hub id is the Fun-CosyVoice3 0.5B release "
                         "(2512). " + _HUB),
          graphs=("speech_tokenizer", "speaker_encoder", "llm_step", "flow_estimator", "vocoder"),
          missing=_MISSING.format(llm="CosyVoice3LM text-speech LM step around its Qwen2 backbone",
                                  flow="pre-lookahead layer and 22-block DiT flow estimator"),
          **_COMMON),
]
