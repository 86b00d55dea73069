"""Qwen3-TTS 12Hz (Qwen team): a discrete multi-codebook speech LM. A Qwen3-style talker (q/k RMSNorm, GQA, SwiGLU,
interleaved 3-D MRoPE) reads the text (text embeddings of width 2048 projected to the talker width) and generates the
first of 16 codebooks at 12.5 Hz; a 5-layer code predictor fills the other 15 codebooks of each frame; the
Qwen3-TTS-Tokenizer-12Hz decoder (RVQ lookup, an 8-layer causal transformer, ConvNeXt/transposed-conv upsampling x1920)
renders 24 kHz audio. CustomVoice selects one of 9 preset speakers by a codec token and follows style instructions;
VoiceDesign builds the voice from a text description; Base clones a voice from reference audio (ECAPA-TDNN speaker
encoder, and the tokenizer's encoder for in-context codes). Neither transformers nor diffusers has it: the original
project's qwen_tts package (Qwen3TTSForConditionalGeneration, config model_type qwen3_tts).

CustomVoice and VoiceDesign run on the runtime: heads "talker" and "code_predictor" are Qwen3 step graphs over embedding
rows (model_zoo.language.decoder_graph; the talker's MRoPE turns its three sections by one position in speech, the
plain rotation), speech_tokenizer/'s head "codec_decoder" the 12 Hz decoder (model_zoo.multimodal.
qwen3_tts_codec_graph); lite.qwen3_tts.Qwen3TTS builds the project's dual-track prompt and runs the talker / code
predictor loop, and the speech server answers /v1/audio/speech. Base clones a reference voice by its x-vector (head
"speaker_encoder": the ECAPA-TDNN graph; the project's x_vector_only_mode); its in-context mode (the reference's
text and codes from the 12 Hz tokenizer's Mimi encoder in the prompt) is not built and says so. The tests hold it to
the qwen-tts package itself (tests/model_zoo/qwen_tts_reference.py). lite_boost has no TTS support."""
import numpy as np

from model_zoo.registry import Entry

_SOURCE = ("third-party reimplementation references, not the checkpoint's config.json (not reachable here): soniqo/"
           "speech-swift (ex ivan-digital/qwen3-asr-swift) docs tts-model.md, a Qwen3-TTS architecture reference for "
           "the 0.6B/1.7B CustomVoice checkpoints, and TrevorS/qwen3-tts-rs (code predictor always 1024 wide, the 1.7B "
           "projects 2048 -> 1024; talker, code predictor and 12 Hz decoder shared by all variants); the 1.7B talker "
           "FFN width 6144 is what the current revisions state (an earlier revision of one said 8192); left out: the "
           "talker's text-projection widths, the tokenizer's semantic-codebook size (the sources disagree), "
           "rope details beyond theta/sections, and special-token ids")

_CODE_PREDICTOR = dict(hidden_size=1024, num_hidden_layers=5, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=3072, vocab_size=2048, lm_heads=15)
_TOKENIZER_12HZ = dict(sample_rate=24000, frame_rate=12.5, num_quantizers=16, codebook_size=2048, codebook_dim=256,
                       decoder=dict(transformer_layers=8, latent_dim=1024, decoder_dim=1536,
                                    upsample_rates=[2, 2, 8, 5, 4, 3]))
_SPEAKER_ENCODER = dict(type="ECAPA-TDNN", mel_dim=128, sample_rate=24000, enc_dim=1024,
                        enc_channels=[512, 512, 512, 512, 1536])


def _config(parameters, hidden, intermediate, speaker_encoder=False):
    cfg = dict(_parameters=parameters, model_type="qwen3_tts",
               talker=dict(hidden_size=hidden, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                           head_dim=128, intermediate_size=intermediate, text_hidden_size=2048, text_vocab_size=151936,
                           codec_vocab_size=3072, num_code_groups=16, rope_theta=1000000.0,
                           mrope_section=[24, 20, 20]),
               code_predictor=dict(_CODE_PREDICTOR, **({"input_projection": [2048, 1024]} if hidden == 2048 else {})),
               speech_tokenizer=_TOKENIZER_12HZ)
    if speaker_encoder:
        cfg["speaker_encoder"] = _SPEAKER_ENCODER
    return cfg


_COMMON = dict(category="audio", family="qwen3_tts", model_type="qwen3_tts", pipeline="speak", status="planned",
               config_source=_SOURCE)
_SUPPORTED = dict(_COMMON, status="supported",
                  converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]})
_ARCH = ("Qwen3-TTS's own code (qwen_tts Qwen3TTSForConditionalGeneration: Qwen3-style MRoPE talker + code predictor "
         "+ Qwen3-TTS-Tokenizer-12Hz decoder{extra}); no transformers or diffusers class")
_GRAPHS = ("talker_step", "code_predictor_step", "codec_decoder")
_GRAPHS_BASE = ("speaker_encoder", "codec_encoder") + _GRAPHS
ENTRIES = [
    Entry(name="Qwen3-TTS-12Hz-1.7B-CustomVoice", hub_id="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
          architecture=_ARCH.format(extra=""), config=_config("1.7B", 2048, 6144), graphs=_GRAPHS,
          test="tests/model_zoo/test_qwen3_tts.py::test_qwen3_tts_codes_and_waveform_equal_reference[custom_voice]",
          **_SUPPORTED),
    Entry(name="Qwen3-TTS-12Hz-1.7B-Base", hub_id="Qwen/Qwen3-TTS-12Hz-1.7B-Base",
          architecture=_ARCH.format(extra=" + ECAPA-TDNN speaker encoder"),
          config=_config("1.7B", 2048, 6144, speaker_encoder=True), graphs=_GRAPHS_BASE,
          test="tests/model_zoo/test_qwen3_tts.py::test_qwen3_tts_codes_and_waveform_equal_reference[base]",
          **_SUPPORTED),
    Entry(name="Qwen3-TTS-12Hz-1.7B-VoiceDesign", hub_id="Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign",
          architecture=_ARCH.format(extra=""), config=_config("1.7B", 2048, 6144), graphs=_GRAPHS,
          test="tests/model_zoo/test_qwen3_tts.py::test_qwen3_tts_codes_and_waveform_equal_reference[voice_design]",
          **_SUPPORTED),
    Entry(name="Qwen3-TTS-12Hz-0.6B-Base", hub_id="Qwen/Qwen3-TTS-12Hz-0.6B-Base",
          architecture=_ARCH.format(extra=" + ECAPA-TDNN speaker encoder"),
          config=_config("0.6B", 1024, 3072, speaker_encoder=True), graphs=_GRAPHS_BASE,
          test="tests/model_zoo/test_qwen3_tts.py::test_qwen3_tts_codes_and_waveform_equal_reference[base]",
          **_SUPPORTED),
    Entry(name="Qwen3-TTS-12Hz-0.6B-CustomVoice", hub_id="Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
          architecture=_ARCH.format(extra=""), config=_config("0.6B", 1024, 3072), graphs=_GRAPHS,
          test="tests/model_zoo/test_qwen3_tts.py::test_qwen3_tts_codes_and_waveform_equal_reference[custom_voice]",
          **_SUPPORTED),
]


class _StepView:
    """A Qwen3-TTS decoder stack (the talker's or the code predictor's layers) under the names model_zoo.language.
    decoder_graph reads (model.layers.*, model.norm.weight), with a one-row zero token table: every row of the step
    graph's input is an embedding the pipeline computes (text projections and codec embeddings summed), so the table
    is never read for a real token."""

    def __init__(self, weights, root: str, hidden: int):
        from model_zoo.language.text_model_view import TextModelView
        self.view = TextModelView(weights, root)
        self.placeholder = np.zeros((1, hidden), np.float32)
        self.description = getattr(weights, "description", "the weights")

    def __contains__(self, name) -> bool:
        return name == "model.embed_tokens.weight" or name in self.view

    def __getitem__(self, name: str):
        return self.placeholder if name == "model.embed_tokens.weight" else self.view[name]

    def info(self, name: str):
        from types import SimpleNamespace
        return SimpleNamespace(shape=self.placeholder.shape) if name == "model.embed_tokens.weight" else \
            self.view.info(name)

    def deferred(self, name: str, index: int | None = None):
        from converter.deferred import DeferredArray
        if name == "model.embed_tokens.weight":
            return DeferredArray.of(self.placeholder, name)
        return self.view.deferred(name, index)


def step_config(config: dict, part: str) -> dict:
    """The decoder-graph config of the talker ("talker") or the code predictor ("code_predictor"): a Qwen3 stack;
    the talker's interleaved MRoPE turns all three sections by the same position in speech generation, which is the
    plain rotation, so its sections are left out; the token table is the one-row placeholder."""
    talker = dict(config.get("talker_config") or {})
    cfg = dict(talker.get("code_predictor_config") or {}) if part == "code_predictor" else talker
    keep = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "rms_norm_eps", "max_position_embeddings", "hidden_act", "rope_theta")
    out = {k: cfg[k] for k in keep if k in cfg}
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    out.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    out.update(model_type="qwen3", vocab_size=1, tie_word_embeddings=False)
    return out


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head=None, **_):
    from converter.ir import ConverterError
    from model_zoo.language.decoder_graph import build_decoder_graph
    roots = {"talker": "talker.model.", "code_predictor": "talker.code_predictor.model."}
    if head == "speaker_encoder":   # Base: the reference voice's x-vector
        from model_zoo.multimodal.ecapa_graph import build_ecapa_graph
        return build_ecapa_graph(config, weights, weight_format, group_size)
    if head not in roots:
        raise ConverterError(f"a Qwen3-TTS model is several graphs: convert it with head 'talker', "
                             f"'code_predictor' or 'speaker_encoder' (the codec decoder is speech_tokenizer/'s; got "
                             f"{head!r})")
    cfg = step_config(config, head)
    if roots[head] + "norm.weight" not in weights:
        raise ConverterError(f"not a Qwen3-TTS checkpoint: no {roots[head]}norm.weight")
    graph = build_decoder_graph(cfg, _StepView(weights, roots[head], int(cfg["hidden_size"])), block_size,
                                kv_cache_dtype, weight_format, group_size, "hidden", image_rows=True)
    graph.metadata.update({"head": head, "architecture": f"Qwen3-TTS {head.replace('_', ' ')} step (paged)"})
    return graph


def _build_codec(config, weights, weight_format="float32", group_size=32, head=None, **_):
    from converter.ir import ConverterError
    from model_zoo.multimodal.qwen3_tts_codec_graph import build_qwen3_tts_codec_decoder_graph
    if head not in (None, "codec_decoder"):
        raise ConverterError(f"the 12 Hz speech tokenizer converts its decoder only (head 'codec_decoder', got "
                             f"{head!r})")
    return build_qwen3_tts_codec_decoder_graph(config, weights, weight_format, group_size)


GRAPH_BUILDERS = {"qwen3_tts": _build, "qwen3_tts_tokenizer_12hz": _build_codec}


# What lite.qwen3_tts computes outside the graphs (the prompt's text rows, codebook embeddings, the heads)
NUMPY_TENSORS = ("talker.model.text_embedding.weight", "talker.text_projection.", "talker.model.codec_embedding.weight",
                 "talker.codec_head.weight", "talker.code_predictor.model.codec_embedding.",
                 "talker.code_predictor.lm_head.", "talker.code_predictor.small_to_mtp_projection.")


def convert_qwen3_tts(checkpoint: str, output: str, weight_format: str = "float32", block_size: int = 16) -> str:
    """talker[_fmt].ms, code_predictor[_fmt].ms and speech_tokenizer/codec_decoder[_fmt].ms in `output`, beside the
    checkpoint's config, tokenizer files and the tensors the pipeline reads itself (tts_tensors.safetensors);
    returns the talker's path."""
    import json
    import os
    import shutil

    from safetensors.numpy import save_file

    from converter.api import Converter, FmkType
    from converter.frontends.checkpoint import open_checkpoint
    from converter.frontends.hf_frontend import CheckpointOptions
    from model_zoo.cli import SIDE_FILES
    suffix = "" if weight_format == "float32" else f"_{weight_format}"
    codec_out = os.path.join(output, "speech_tokenizer")
    os.makedirs(codec_out, exist_ok=True)
    paths = []
    with open(os.path.join(checkpoint, "config.json")) as f:
        base = json.load(f).get("tts_model_type") == "base"
    for stem in ("talker", "code_predictor") + (("speaker_encoder",) if base else ()):
        paths.append(os.path.join(output, f"{stem}{suffix}.ms"))
        Converter().convert(FmkType.HF, checkpoint, paths[-1], verify_build=False, checkpoint_options=CheckpointOptions(
            weight_format=weight_format, block_size=block_size, head=stem))
    Converter().convert(FmkType.HF, os.path.join(checkpoint, "speech_tokenizer"),
                        os.path.join(codec_out, f"codec_decoder{suffix}.ms"), verify_build=False,
                        checkpoint_options=CheckpointOptions(weight_format=weight_format, head="codec_decoder"))
    for src_dir, dst_dir, names in ((checkpoint, output, SIDE_FILES),
                                    (os.path.join(checkpoint, "speech_tokenizer"), codec_out, ("config.json",))):
        for name in names:
            src = os.path.join(src_dir, name)
            if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(dst_dir, name)):
                shutil.copyfile(src, os.path.join(dst_dir, name))
    weights, _ = open_checkpoint(checkpoint)
    with weights:
        tensors = {k: np.asarray(weights[k], np.float32) for k in weights if k.startswith(NUMPY_TENSORS)}
    tmp = os.path.join(output, "tts_tensors.safetensors.tmp")
    save_file(tensors, tmp)
    os.replace(tmp, os.path.join(output, "tts_tensors.safetensors"))
    return paths[0]
