"""WeNet (wenet-e2e): the production ASR toolkit's U2++ model, here its released WenetSpeech (10k h Mandarin) U2++
Conformer. 80-bin fbank with global CMVN, a conv2d front end subsampling 4x, a causal Conformer encoder trained with
dynamic chunks (one model for streaming and full-context decoding), a CTC head for first-pass prefix beam search and a
bidirectional Transformer decoder (left-to-right and right-to-left) that rescores the CTC n-best (attention rescoring).
Neither transformers nor diffusers has it: WeNet's own wenet.transformer.asr_model.ASRModel.

It runs on the runtime, full-context and chunk-streaming: `open_wenet` reads the release directory (final.pt, a plain
state dict, and train.yaml), head "encoder" (CMVN, subsampling, Conformer, CTC log-probabilities) and head "decoder"
(the left-to-right and right-to-left decoders over N hypotheses at once) come from model_zoo/multimodal/wenet_graphs.py,
`convert_wenet` writes them beside config.json and units.txt, and lite.wenet.WeNet transcribes (Kaldi fbank, CTC
greedy or prefix beam search, attention rescoring). A causal model (U2++) also gets head "encoder_chunk", one chunk
with the attention and convolution caches, for lite.wenet's chunk streaming. model_zoo.reference.wenet_u2 is the PyTorch
reference the tests use. lite_boost has no ASR support."""
import os

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
          graphs=("encoder", "ctc", "decoder_rescore"), pipeline="transcribe", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_wenet.py::test_wenet_transcripts_equal_reference",
          ),
]


def open_wenet(model_dir: str) -> tuple[dict, dict]:
    """(tensors by name as float32 arrays, config) of a WeNet release directory: final.pt (a state dict, read with
    weights_only=True) and train.yaml (input_dim, output_dim, encoder / decoder and their _conf)."""
    import torch
    import yaml
    from converter.ir import ConverterError
    path, conf = os.path.join(model_dir, "final.pt"), os.path.join(model_dir, "train.yaml")
    for p in (path, conf):
        if not os.path.isfile(p):
            raise ConverterError(f"{model_dir}: no {os.path.basename(p)} (a WeNet release directory)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:   # weights_only refuses pickled code; a truncated file fails to open
        raise ConverterError(f"{path}: not a WeNet checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConverterError(f"{path}: not a state dict of tensors")
    try:
        with open(conf) as f:
            train = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConverterError(f"{conf}: not valid YAML ({e})") from None
    keys = ("input_dim", "output_dim", "encoder", "encoder_conf", "decoder", "decoder_conf", "model_conf")
    config = {k: train[k] for k in keys if k in train}
    if "input_dim" not in config or "output_dim" not in config:
        raise ConverterError(f"{conf}: no input_dim / output_dim (the exp directory's train.yaml has them)")
    config["model_type"] = "wenet_u2"
    weights = {k: v.float().numpy() for k, v in state.items() if v.is_floating_point()}
    return weights, config


def convert_wenet(checkpoint: str, output: str, weight_format: str = "float32") -> str:
    """encoder[_fmt].ms, decoder[_fmt].ms (and a causal model's encoder_chunk[_fmt].ms) in `output`, with config.json
    and units.txt; returns the encoder's path."""
    from model_zoo.multimodal.wenet_graphs import WenetConfig, build_wenet_decoder_graph, build_wenet_encoder_graph
    from model_zoo.release_dir import write_release
    weights, config = open_wenet(checkpoint)
    graphs = [("encoder", lambda: build_wenet_encoder_graph(config, weights, weight_format)),
              ("decoder", lambda: build_wenet_decoder_graph(config, weights, weight_format))]
    if WenetConfig(config).causal:   # chunk streaming: the encoder once more, with its caches
        graphs.append(("encoder_chunk", lambda: build_wenet_encoder_graph(config, weights, weight_format,
                                                                          streaming=True)))
    return write_release(output, config, graphs, checkpoint, ("units.txt",), weight_format)[0]
