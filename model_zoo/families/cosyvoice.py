"""CosyVoice 2 / 3 (Alibaba FunAudioLLM): zero-shot TTS in three stages. A text-speech language model (a Qwen2 backbone
with 896 hidden units, cosyvoice.llm Qwen2LM / CosyVoice3LM) continues the prompt's 25 Hz speech tokens (6561 FSQ codes,
produced by an ONNX speech tokenizer) from the text; a chunk-causal flow-matching model turns the tokens, the prompt's
mel frames and a CAM++ speaker embedding (ONNX, 192-dim) into 80-bin mel at 50 Hz (CosyVoice 2: an upsampling Conformer
encoder + a U-Net-style CausalConditionalDecoder estimator; CosyVoice 3: a pre-lookahead layer + a 22-block DiT
estimator); a HiFT vocoder (neural source-filter + iSTFT) renders 24 kHz audio. Neither transformers nor diffusers has
it: the original project's cosyvoice package.

CosyVoice 2 runs on the runtime from its release directory (cosyvoice2.yaml, llm.pt, flow.pt, hift.pt,
CosyVoice-BlankEN/ and the two ONNX front-end models): `convert_cosyvoice` writes the LLM step graph (the Qwen2 layers
on the paged KV cache with the speech-token table as the graph's token table and llm_decoder as its head), the flow's
encoder and estimator graphs (model_zoo.multimodal.cosyvoice_flow_graph) with the CFM's fixed noise table, the HiFT
vocoder graph (model_zoo.multimodal.cosyvoice_hift_graph), the speech tokenizer and CAM++ converted from their ONNX
files, and a tokenizer.json with CosyVoice's special tokens; lite.cosyvoice.CosyVoice runs zero-shot, cross-lingual
and instruct synthesis. CosyVoice 3 the same way from cosyvoice3.yaml: CosyVoice3LM (sos / task_id rows in the speech
table, no head bias, 200 special ids), the pre-lookahead + DiT flow (model_zoo.multimodal.cosyvoice3_flow_graph), the
causal HiFT, CosyVoice3Tokenizer's phone tokens. lite_boost has no TTS support."""
from model_zoo.registry import Entry

_HUB = "The Hub is not reachable from this machine"

# CosyVoice 2's released flow / hift arguments, yaml-shaped (the recipe's cosyvoice2.yaml, tags stripped): what the
# graph builders take; for the benchmark and the full-size builder tests
RELEASE_FLOW_V2 = dict(
    input_size=512, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561, input_frame_rate=25,
    only_mask_loss=True, token_mel_ratio=2, pre_lookahead_len=3,
    encoder=dict(output_size=512, attention_heads=8, linear_units=2048, num_blocks=6, dropout_rate=0.1,
                 positional_dropout_rate=0.1, attention_dropout_rate=0.1, normalize_before=True, input_layer="linear",
                 pos_enc_layer_type="rel_pos_espnet", selfattention_layer_type="rel_selfattn", input_size=512,
                 use_cnn_module=False, macaron_style=False, use_dynamic_chunk=True),
    decoder=dict(in_channels=240, n_spks=1, spk_emb_dim=80,
                 cfm_params=dict(sigma_min=1e-06, solver="euler", t_scheduler="cosine", training_cfg_rate=0.2,
                                 inference_cfg_rate=0.7, reg_loss_type="l1"),
                 estimator=dict(in_channels=320, out_channels=80, channels=[256], dropout=0.0, attention_head_dim=64,
                                n_blocks=4, num_mid_blocks=12, num_heads=8, act_fn="gelu", static_chunk_size=50,
                                num_decoding_left_chunks=2)))
RELEASE_HIFT_V2 = dict(
    in_channels=80, base_channels=512, nb_harmonics=8, sampling_rate=24000, nsf_alpha=0.1, nsf_sigma=0.003,
    nsf_voiced_threshold=10, upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
    istft_params=dict(n_fft=16, hop_len=4), resblock_kernel_sizes=[3, 7, 11],
    resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]], source_resblock_kernel_sizes=[7, 7, 11],
    source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]], lrelu_slope=0.1, audio_limit=0.99,
    f0_predictor=dict(num_class=1, in_channels=80, cond_channels=512))
_COMMON = dict(category="audio", family="cosyvoice", pipeline="speak", status="planned")
_SUPPORTED = dict(_COMMON, status="supported",
                  converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]})
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
                      hift=RELEASE_HIFT_V2, sample_rate=24000),
          config_source=("the CosyVoice repo's examples/libritts/cosyvoice2/conf/cosyvoice2.yaml (the recipe the "
                         "released cosyvoice2.yaml follows; the released file itself not read), transcribed; the LLM "
                         "backbone is Qwen2.5-0.5B per the CosyVoice 2 report, its sizes from Qwen2.5-0.5B's "
                         "config.json (as in model_zoo/families/qwen2.py). " + _HUB),
          graphs=("speech_tokenizer", "speaker_encoder", "llm_step", "flow_encoder", "flow_estimator", "vocoder"),
          test="tests/model_zoo/test_cosyvoice.py::test_zero_shot_waveform_equals_reference_pipeline[v2]",
          **_SUPPORTED),
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
                      hift=dict(RELEASE_HIFT_V2, causal=True, conv_pre_look_right=4), sample_rate=24000, chunk_size=25),
          config_source=("the CosyVoice repo's examples/libritts/cosyvoice3/conf/cosyvoice3.yaml (the released "
                         "cosyvoice3.yaml itself not read), transcribed; the LLM backbone's depth, heads and FFN width "
                         "are left out (the yaml only fixes its 896-wide input/output; it loads the backbone from the "
                         "checkpoint's CosyVoice-BlankEN folder); the hub id is the Fun-CosyVoice3 0.5B release "
                         "(2512). " + _HUB),
          graphs=("speech_tokenizer", "speaker_encoder", "llm_step", "flow_encoder", "flow_estimator", "vocoder"),
          test="tests/model_zoo/test_cosyvoice.py::test_zero_shot_waveform_equals_reference_pipeline[v3]",
          **_SUPPORTED),
]


# The special tokens CosyVoice's tokenizers add to CosyVoice-BlankEN's, in their order (the ids follow it): CosyVoice
# 2's QwenTokenizer; CosyVoice 3's adds <|endofsystem|>, the CMU phones (with stress marks) and pinyin finals / initials
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>", "[noise]",
                  "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>",
                  "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]")
_CMU_VOWELS = ("AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW")
_CMU_CONSONANTS = ("B", "CH", "D", "DH", "F", "G", "HH", "JH", "K", "L", "M", "N", "NG", "P", "R", "S", "SH", "T", "TH",
                   "V", "W", "Y", "Z", "ZH")
_PINYIN = ("a ai an ang ao b c ch d e ei en eng f g h i ian in ing iu ià iàn iàng iào iá ián iáng iáo iè ié iòng "
           "ióng iù iú iā iān iāng iāo iē iě iōng iū iǎ iǎn iǎng iǎo iǒng iǔ j k l m n o ong ou p q r s sh t u "
           "uang ue un uo uà uài uàn uàng uá uái uán uáng uè ué uì uí uò uó uā uāi uān uāng uē uě uī uō uǎ uǎi "
           "uǎn uǎng uǐ uǒ vè w x y z zh à ài àn àng ào á ái án áng áo è èi èn èng èr é éi én éng ér ì ìn ìng í "
           "ín íng ò òng òu ó óng óu ù ùn ú ún ā āi ān āng āo ē ēi ēn ēng ě ěi ěn ěng ěr ī īn īng ō ōng ōu ū ūn "
           "ǎ ǎi ǎn ǎng ǎo ǐ ǐn ǐng ǒ ǒng ǒu ǔ ǔn ǘ ǚ ǜ")
SPECIAL_TOKENS_V3 = SPECIAL_TOKENS + ("<|endofsystem|>",) + tuple(
    f"[{p}]" for p in sorted([v + s for v in _CMU_VOWELS for s in ("", "0", "1", "2")] + list(_CMU_CONSONANTS))) + \
    tuple(f"[{p}]" for p in _PINYIN.split())
# per version: the yaml, the LM / flow / vocoder classes it names, the speech tokenizer's ONNX file
VERSIONS = {2: dict(yaml="cosyvoice2.yaml", llm="Qwen2LM", flow="CausalMaskedDiffWithXvec", hift="HiFTGenerator",
                    speech_tokenizer="speech_tokenizer_v2.onnx", special=SPECIAL_TOKENS),
            3: dict(yaml="cosyvoice3.yaml", llm="CosyVoice3LM", flow="CausalMaskedDiffWithDiT",
                    hift="CausalHiFTGenerator", speech_tokenizer="speech_tokenizer_v3.onnx", special=SPECIAL_TOKENS_V3)}


def open_cosyvoice(model_dir: str) -> dict:
    """The converted directory's config from a CosyVoice 2 or 3 release: the yaml's llm / flow / hift arguments
    (`__target__`: the class each names) and its mel feature extractor's, and the Qwen2 backbone's config.json
    (CosyVoice-BlankEN/)."""
    import json
    import os

    from converter.ir import ConverterError

    from .cosyvoice_yaml import plain, read_hyperpyyaml
    version = next((v for v, d in VERSIONS.items() if os.path.isfile(os.path.join(model_dir, d["yaml"]))), None)
    if version is None:
        raise ConverterError(f"{model_dir}: no cosyvoice2.yaml or cosyvoice3.yaml (a CosyVoice release directory)")
    spec = VERSIONS[version]
    path = os.path.join(model_dir, spec["yaml"])
    try:
        raw = read_hyperpyyaml(path)
    except ValueError as e:
        raise ConverterError(str(e)) from None
    for key in ("llm", "flow", "hift"):
        if not isinstance(raw.get(key), dict):
            raise ConverterError(f"{path}: no '{key}' section")
        target = str(raw[key].get("__target__", "")).rsplit(".", 1)[-1]
        if target != spec[key]:
            raise ConverterError(f"{path}: its {key} is {target or 'not named'}, not CosyVoice {version}'s "
                                 f"{spec[key]}")
    backbone = os.path.join(model_dir, "CosyVoice-BlankEN", "config.json")
    if not os.path.isfile(backbone):
        raise ConverterError(f"{model_dir}: no CosyVoice-BlankEN/config.json (the LLM's Qwen2 backbone)")
    with open(backbone) as f:
        qwen = json.load(f)
    llm = plain(raw["llm"])
    sampling = llm.pop("sampling", {}) or {}
    llm.pop("llm", None)
    hift = plain(raw["hift"])
    if version == 3:
        hift["causal"] = True
        llm.update(sos_id=int(llm["speech_token_size"]), task_id=int(llm["speech_token_size"]) + 2)
    return {"model_type": f"cosyvoice{version}", "version": version, "sample_rate": int(raw.get("sample_rate", 24000)),
            "token_frame_rate": int(raw.get("token_frame_rate", 25)),
            "token_mel_ratio": int(raw.get("token_mel_ratio", 2)),
            "llm": {**llm, "sampling": sampling}, "qwen": qwen, "flow": plain(raw["flow"]), "hift": hift,
            "feat_extractor": plain(raw.get("feat_extractor") or {})}


def _state_dict(path: str):
    from converter.frontends.checkpoint.state_dict import open_state_dict
    from converter.ir import ConverterError
    import os
    if not os.path.isfile(path):
        raise ConverterError(f"{os.path.dirname(path)}: no {os.path.basename(path)}")
    return open_state_dict([path])


class _SpeechLMView:
    """llm.pt under the names model_zoo.language.decoder_graph reads: the Qwen2 layers (llm.model.model.*), the
    speech-token table as the graph's token table (decode steps feed speech tokens by id; the prompt's text, sos and
    task rows come in as embedding rows) and llm_decoder as the head, with its bias."""
    _RENAMED = {"model.embed_tokens.weight": "speech_embedding.weight", "lm_head.weight": "llm_decoder.weight",
                "lm_head.bias": "llm_decoder.bias"}

    def __init__(self, weights):
        from model_zoo.language.text_model_view import TextModelView
        self.view = TextModelView(weights, "llm.model.model.")
        self.w, self.description = weights, getattr(weights, "description", "llm.pt")

    def _name(self, name: str) -> str:
        return self._RENAMED.get(name) or self.view._name(name)

    def __contains__(self, name) -> bool:
        return self._name(name) in self.w

    def __getitem__(self, name: str):
        return self.w[self._name(name)]

    def info(self, name: str):
        from model_zoo.language.text_model_view import _info
        return _info(self.w, self._name(name))

    def deferred(self, name: str, index: int | None = None):
        from model_zoo.language.text_model_view import _deferred
        return _deferred(self.w, self._name(name), index)


def llm_step_config(config: dict, speech_rows: int) -> dict:
    """The step graph's decoder config: the backbone's Qwen2 sizes, the speech table's rows (the codes and the
    specials: 3 in CosyVoice 2, 200 in CosyVoice 3) as its vocabulary."""
    qwen = config["qwen"]
    keep = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            "rms_norm_eps", "max_position_embeddings", "hidden_act", "rope_theta", "rope_scaling", "rope_parameters",
            "sliding_window", "use_sliding_window", "max_window_layers")
    out = {k: qwen[k] for k in keep if k in qwen}
    out.update(model_type="qwen2", vocab_size=int(speech_rows), tie_word_embeddings=False)
    return out


def build_llm_graph(config: dict, weights, block_size: int = 16, weight_format: str = "float32",
                    kv_cache_dtype: str = "float32"):
    from converter.ir import ConverterError
    from model_zoo.language.decoder_graph import build_decoder_graph
    view = _SpeechLMView(weights)
    for name in ("model.norm.weight", "lm_head.weight", "model.embed_tokens.weight"):
        if name not in view:
            raise ConverterError(f"llm.pt is not a CosyVoice text-speech LM: no {view._name(name)}")
    rows = view.info("model.embed_tokens.weight").shape[0]
    if rows <= int(config["llm"]["speech_token_size"]):
        raise ConverterError(f"llm.pt's speech table has {rows} rows, not more than speech_token_size "
                             f"{config['llm']['speech_token_size']}")
    graph = build_decoder_graph(llm_step_config(config, rows), view, block_size, kv_cache_dtype, weight_format,
                                image_rows=True)
    graph.metadata.update({"architecture": f"CosyVoice {config.get('version', 2)} text-speech LM step (paged)"})
    return graph


def _write_tokenizer(checkpoint: str, output: str, special: tuple[str, ...]) -> None:
    """tokenizer.json: CosyVoice-BlankEN's tokenizer with the version's special tokens added as its tokenizer class
    adds them (transformers' add_special_tokens), so the ids are the same."""
    import os
    import shutil
    import tempfile

    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.join(checkpoint, "CosyVoice-BlankEN"))
    tok.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                            "additional_special_tokens": list(special)})
    with tempfile.TemporaryDirectory(dir=output) as tmp:
        tok.save_pretrained(tmp)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(tmp, name), os.path.join(tmp, name + ".part"))
            os.replace(os.path.join(tmp, name + ".part"), os.path.join(output, name))


def _flow_builders(version: int):
    if version == 3:
        from model_zoo.multimodal.cosyvoice3_flow_graph import (build_cosyvoice3_flow_encoder_graph as encoder,
                                                                 build_cosyvoice3_flow_estimator_graph as estimator)
    else:
        from model_zoo.multimodal.cosyvoice_flow_graph import (build_cosyvoice_flow_encoder_graph as encoder,
                                                                build_cosyvoice_flow_estimator_graph as estimator)
    return encoder, estimator


def convert_cosyvoice(checkpoint: str, output: str, weight_format: str = "float32", block_size: int = 16) -> str:
    """A CosyVoice 2 or 3 release directory into `output`: llm, flow_encoder, flow_estimator and hift graphs
    (`<stem>[_<format>].ms`; the vocoder stays float32: all convolutions), speech_tokenizer.ms / speaker_encoder.ms
    from the release's ONNX files (float32: small), flow_noise.npy, the LM's text embedding rows (and CosyVoice 2's
    sos / task rows) as llm_rows.safetensors, tokenizer.json and config.json; returns the llm graph's path."""
    import os

    import numpy as np
    from safetensors.numpy import save_file

    from converter.api import Converter, FmkType
    from model_zoo.multimodal.cosyvoice_hift_graph import build_cosyvoice_hift_graph
    from model_zoo.reference.cosyvoice_flow import flow_noise_table
    from model_zoo.release_dir import write_release
    config = open_cosyvoice(checkpoint)
    spec = VERSIONS[config["version"]]
    encoder, estimator = _flow_builders(config["version"])
    os.makedirs(output, exist_ok=True)
    llm = _state_dict(os.path.join(checkpoint, "llm.pt"))
    flow = _state_dict(os.path.join(checkpoint, "flow.pt"))
    hift = _state_dict(os.path.join(checkpoint, "hift.pt"))
    graphs = [("llm", lambda: build_llm_graph(config, llm, block_size, weight_format)),
              ("flow_encoder", lambda: encoder(config["flow"], flow, weight_format)),
              ("flow_estimator", lambda: estimator(config["flow"], flow, weight_format)),
              ("hift", lambda: build_cosyvoice_hift_graph(config["hift"], hift, "float32"))]
    with llm, flow, hift:
        paths = write_release(output, config, graphs, checkpoint, (spec["yaml"],), weight_format)
        rows = {"text_embedding": np.asarray(llm["llm.model.model.embed_tokens.weight"], np.float32)}
        if "llm_embedding.weight" in llm:   # CosyVoice 2: sos and task_id (CosyVoice 3's are speech-table rows)
            rows["llm_embedding"] = np.asarray(llm["llm_embedding.weight"], np.float32)
    tmp = os.path.join(output, "llm_rows.safetensors.tmp")
    save_file(rows, tmp)
    os.replace(tmp, os.path.join(output, "llm_rows.safetensors"))
    with open(os.path.join(output, "flow_noise.npy.tmp"), "wb") as f:
        np.save(f, flow_noise_table())
    os.replace(os.path.join(output, "flow_noise.npy.tmp"), os.path.join(output, "flow_noise.npy"))
    for stem, name in (("speech_tokenizer", spec["speech_tokenizer"]), ("speaker_encoder", "campplus.onnx")):
        if os.path.isfile(os.path.join(checkpoint, name)):
            Converter().convert(FmkType.ONNX, os.path.join(checkpoint, name), os.path.join(output, f"{stem}.ms"),
                                verify_build=False)
    _write_tokenizer(checkpoint, output, spec["special"])
    return paths[0]
