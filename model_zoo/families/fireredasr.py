"""FireRedASR-AED (Xiaohongshu FireRedTeam): an attention encoder-decoder for Mandarin/English ASR. 80-dim Kaldi fbank
with global CMVN, a conv2d front end subsampling 4x, a Conformer encoder (macaron FFNs, relative-position
self-attention,
depthwise conv kernel 33, swish) and a pre-norm Transformer decoder (GELU, tied embedding/output projection) decoded by
beam search over a 7832-token mixed Chinese-character / English-BPE vocabulary. Neither transformers nor diffusers has
it: the original project's FireRedAsrAed (fireredasr package; WeNet carries a port, wenet/firered).

Nothing of it runs in the project yet (issue 38); lite_boost has no ASR support."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="FireRedASR-AED-L", category="audio", family="fireredasr", hub_id="FireRedTeam/FireRedASR-AED-L",
          architecture="FireRedASR's own code: FireRedAsrAed = ConformerEncoder + TransformerDecoder (no transformers "
                       "or diffusers class)",
          config=dict(_parameters="1.1B",
                      idim=80, odim=7832, d_model=1280, n_head=20, d_inner=5120, n_layers_enc=16, n_layers_dec=16,
                      kernel_size=33, pe_maxlen=5000, subsampling=4, sos_id=3, eos_id=4, pad_id=2, blank_id=0),
          config_source=("the `args` Namespace stored in the released model.pth.tar, as printed (with the encoder "
                         "and decoder parameter counts, 710.5M and 429.8M) in k2-fsa sherpa-onnx's FireRedASR-AED "
                         "export scripts; the 4x "
                         "conv2d subsampling and module details from WeNet's convert_FireRed_AED_L_to_wenet_config_"
                         "and_ckpt.py (input_layer firered_conv2d4); 1.1B from the FireRedASR report (arXiv "
                         "2501.14350). The Hub is not reachable from this machine"),
          graphs=("encoder", "decoder_step"), pipeline="transcribe", status="planned",
          missing=("graph builders for its Conformer encoder (conv2d subsampling, relative-position attention, conv "
                   "module) and Transformer decoder step (self-attention KV cache, cross-attention to the encoder "
                   "output) from model.pth.tar, the Kaldi fbank + CMVN front end, the mixed char/BPE tokenizer and the "
                   "transcribe pipeline with beam search (issue 38); lite_boost has no ASR support"),
          ),
]
