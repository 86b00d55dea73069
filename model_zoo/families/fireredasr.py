"""FireRedASR-AED (Xiaohongshu FireRedTeam): an attention encoder-decoder for Mandarin/English ASR. 80-dim Kaldi fbank
with global CMVN, a conv2d front end subsampling 4x, a Conformer encoder (macaron FFNs, relative-position
self-attention,
depthwise conv kernel 33, swish) and a pre-norm Transformer decoder (GELU, tied embedding/output projection) decoded by
beam search over a 7832-token mixed Chinese-character / English-BPE vocabulary. Neither transformers nor diffusers has
it: the original project's FireRedAsrAed (fireredasr package; WeNet carries a port, wenet/firered).

It runs on the runtime: `open_fireredasr` reads the released directory (model.pth.tar: the `args` Namespace and the
model_state_dict), head "encoder" (Conformer, with every decoder layer's cross keys / values) and head "decoder" (a
lock-step step on the paged KV cache) come from model_zoo/multimodal/fireredasr_graphs.py, `convert_fireredasr`
writes them beside config.json, cmvn.ark and dict.txt, and lite.fireredasr.FireRedASR transcribes (Kaldi fbank +
CMVN, beam search as the project's). model_zoo.reference.fireredasr_aed is the PyTorch reference the tests use.
lite_boost has no ASR support."""
import os

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
          graphs=("encoder", "decoder_step"), pipeline="transcribe", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_fireredasr.py::test_fireredasr_transcripts_equal_reference",
          ),
]


SIDE_FILES = ("cmvn.ark", "dict.txt", "train_bpe1000.model")


def open_fireredasr(model_dir: str) -> tuple[dict, dict]:
    """(tensors by name as float32 arrays, config) of a released FireRedASR-AED directory: model.pth.tar holds
    {"args": argparse.Namespace, "model_state_dict": ...}, read with weights_only=True (the Namespace allowed: plain
    attributes, no code)."""
    import argparse

    import torch
    from converter.ir import ConverterError
    path = os.path.join(model_dir, "model.pth.tar")
    if not os.path.isfile(path):
        raise ConverterError(f"{model_dir}: no model.pth.tar (a FireRedASR-AED release directory)")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            package = torch.load(path, map_location="cpu", weights_only=True)
        args, state = package["args"], package["model_state_dict"]
    except Exception as e:   # weights_only refuses anything else pickled; a truncated file fails to open
        raise ConverterError(f"{path}: not a FireRedASR-AED checkpoint ({type(e).__name__}: {e})") from None
    config = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
    config["model_type"] = "fireredasr_aed"
    return {k: v.float().numpy() for k, v in state.items()}, config


def convert_fireredasr(checkpoint: str, output: str, weight_format: str = "float32", block_size: int = 16) -> str:
    """encoder[_fmt].ms and decoder[_fmt].ms in `output`, with config.json (the args) and the front end's and
    tokenizer's files; returns the encoder's path."""
    from model_zoo.multimodal.fireredasr_graphs import (build_fireredasr_decoder_graph,
                                                        build_fireredasr_encoder_graph)
    from model_zoo.release_dir import write_release
    weights, config = open_fireredasr(checkpoint)
    graphs = [("encoder", lambda: build_fireredasr_encoder_graph(config, weights, weight_format)),
              ("decoder", lambda: build_fireredasr_decoder_graph(config, weights, block_size,
                                                                 weight_format=weight_format))]
    return write_release(output, config, graphs, checkpoint, SIDE_FILES, weight_format)[0]
