"""WeNet (wenet-e2e): the production ASR toolkit's U2++ model, here its released WenetSpeech (10k h Mandarin) U2++
Conformer. 80-bin fbank with global CMVN, a conv2d front end subsampling 4x, a causal Conformer encoder trained with
dynamic chunks (one model for streaming and full-context decoding), a CTC head for first-pass prefix beam search and a
bidirectional Transformer decoder (left-to-right and right-to-left) that rescores the CTC n-best (attention rescoring).
Neither transformers nor diffusers has it: WeNet's own wenet.transformer.asr_model.ASRModel.

Nothing of it runs in the project yet (issue 38); lite_boost has no ASR support."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="WeNet", category="audio", family="wenet", hub_id="openspeech/wenet-models",
          architecture=("WeNet's own code: wenet ASRModel = ConformerEncoder + BiTransformerDecoder + CTC (no "
                        "transformers or diffusers class)"),
          config=dict(input_dim=80, subsampling=4,
                      encoder=dict(type="conformer", output_size=512, attention_heads=8, linear_units=2048,
                                   num_blocks=12, cnn_module_kernel=15, cnn_module_norm="layer_norm", causal=True,
                                   input_layer="conv2d", pos_enc_layer_type="rel_pos",
                                   selfattention_layer_type="rel_selfattn", activation_type="swish",
                                   normalize_before=True, use_dynamic_chunk=True),
                      decoder=dict(type="bitransformer", attention_heads=8, linear_units=2048, num_blocks=3,
                                   r_num_blocks=3),
                      ctc_weight=0.3, reverse_weight=0.3, tokenizer="char"),
          config_source=("WeNet's examples/wenetspeech/s0/conf/train_u2++_conformer.yaml (the recipe of the released "
                         "wenetspeech_u2pp_conformer_exp checkpoint in the openspeech/wenet-models repo; the "
                         "checkpoint's own train.yaml was not read), transcribed; the output vocabulary size (the "
                         "recipe's lang_char.txt) and the parameter count are left out. 'WeNet' is taken to mean this "
                         "flagship checkpoint. The Hub is not reachable from this machine"),
          graphs=("encoder", "ctc", "decoder_rescore"), pipeline="transcribe", status="planned",
          missing=("graph builders for its chunk-streaming Conformer encoder (with attention / conv caches), CTC head "
                   "and bidirectional attention-rescoring decoder from the WeNet checkpoint, the fbank + CMVN front "
                   "end, CTC prefix beam search and the transcribe pipeline (issue 38); lite_boost has no ASR "
                   "support"),
          ),
]
