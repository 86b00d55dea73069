"""InternVL3 and InternVL3.5-Flash: InternViT-300M (24 pre-norm ViT blocks, width 1024, patch 14 at 448x448 tiles with
dynamic tiling), pixel shuffle (downsample_ratio 0.5: 1024 patch tokens -> 256 tokens of width 4096 per tile) and a
two-layer GELU MLP projector into the language model. InternVL3 uses Qwen2.5 language models and converts to
transformers' InternVLForConditionalGeneration (the "-hf" checkpoints). InternVL3.5-Flash uses Qwen3 language models
and adds the Visual Resolution Router (ViR): a gating network picks, per tile, 256 tokens or 64 tokens (a second pixel
shuffle at 0.25 and a second projector, mlp2); those checkpoints run only through the original project's remote code
(InternVLChatModel, model_type internvl_chat).

InternVL3 runs on the runtime from its -hf checkpoints: head "vision" is InternViT + pixel shuffle + projector
(model_zoo/multimodal/internvl_vision_graph.py), the step graph the Qwen2 decoder with the image rows (dynamic NTK RoPE
is the plain rotation within max_position_embeddings, where the graph's tables end), lite.internvl_image the GotOcr2
tiling (the tile grid closest to the image's aspect ratio, up to max_patches, plus a thumbnail) and <img> ... </img>
around each image's rows.

InternVL3.5-Flash runs from the original project's checkpoints (model_type internvl_chat): head "vision" gives, per
tile, the 0.5 pixel-shuffle rows through mlp1, the 0.25 rows through mlp2 and the router's probabilities
(model_zoo/multimodal/internvl_vision_graph.py); lite.internvl_image.InternVLFlashVision keeps the small view for the
tiles the router picks (above the images' flash_relative_threshold quantile and flash_absolute_threshold), so those
tiles take a quarter of the prompt's rows; the language model is Qwen3. model_zoo.reference.internvl_flash is the
PyTorch reference the tests hold it to."""
from model_zoo.registry import Entry


def _vision():
    # InternViT-300M-448px-V2_5, as transformers 5.24's InternVLVisionConfig defaults give it (the InternVLConfig
    # docstring names OpenGVLab/InternVL3-1B-hf as the checkpoint those defaults follow).
    return dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                patch_size=14, image_size=448, hidden_act="gelu", norm_type="layer_norm", layer_norm_eps=1e-6)


def _internvl3(parameters, text):
    return dict(_parameters=parameters, model_type="internvl", vision_config=_vision(), text_config=text,
                downsample_ratio=0.5, image_seq_length=256, image_token_id=151667, projector_hidden_act="gelu")


def _flash(parameters, text):
    return dict(_parameters=parameters, model_type="internvl_chat", vision_config=_vision(), llm_config=text,
                downsample_ratio=0.5, image_seq_length=256, flash_image_seq_length=64)


_V3_SOURCE_1B = ("text_config from a copy of InternVL3-1B-hf's config.json "
                 "(hf-internal-testing/tiny-processor-internvl carries it: Qwen2 896 wide, 24 layers, 14/2 heads, "
                 "4864, vocab 151674, rope_theta 1e6 with dynamic rope scaling factor 2.0); vision_config from "
                 "transformers 5.24's InternVLVisionConfig defaults (docstring: InternVL3-1B-hf); the Hub is not "
                 "reachable from this machine")
_V3_SOURCE_2B = ("the composition the InternVL3 model card gives (InternViT-300M-448px-V2_5 + Qwen2.5-1.5B; "
                 "recalled, the card was not read here), with "
                 "Qwen2.5-1.5B's published dimensions (1536 wide, 28 layers, 12/2 heads, 8960; the same as Qwen2-1.5B "
                 "in model_zoo.families.qwen2) and the vision numbers of transformers 5.24's InternVLVisionConfig "
                 "defaults; InternVL3-2B's own config.json was not read, so vocab_size (the resized tokenizer) and its "
                 "rope scaling are left out")
_FLASH_SOURCE = ("the composition the InternVL3.5 model cards / paper give (InternViT-300M-448px-V2_5 + {llm}; "
                 "recalled, the card pages found here did not show the table); the language-model "
                 "numbers are {llm}'s published dimensions as found in public copies of its config.json ({where}); "
                 "vision numbers are transformers 5.24's InternVLVisionConfig defaults (InternViT-300M). The Flash "
                 "checkpoint's own config.json was not read (the Hub is not reachable from this machine): vocab_size "
                 "and the ViR router's sizes are left out; the 64-token path follows the InternVL3.5-Flash modeling "
                 "code (pixel shuffle at downsample_ratio**2)")


def _qwen3(hidden, layers, heads, kv_heads, intermediate):
    return dict(model_type="qwen3", hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, head_dim=128, intermediate_size=intermediate, hidden_act="silu")


_FLASH_ARCH = ("OpenGVLab InternVLChatModel (remote code; InternVisionModel + Qwen3ForCausalLM + ViR gating); "
               "transformers 5.24 has InternVLForConditionalGeneration for the non-Flash -HF conversions only")
_V3_ARCH = "transformers InternVLForConditionalGeneration (InternVLVisionModel + Qwen2ForCausalLM)"
_COMMON = dict(category="vlm", family="internvl", graphs=("vision_encoder", "decoder_step"), pipeline="caption",
               status="supported", converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8",
                                                                         "int4"]})
_FLASH_COMMON = dict(_COMMON, test="tests/model_zoo/test_internvl_flash.py::test_internvl_flash_tokens_equal_reference")

_V3_COMMON = dict(_COMMON, test="tests/model_zoo/test_internvl.py::test_internvl_tokens_equal_transformers")

ENTRIES = [
    Entry(name="InternVL3_5-4B-Flash", hub_id="OpenGVLab/InternVL3_5-4B-Flash", model_type="internvl_chat",
          architecture=_FLASH_ARCH, config=_flash("4B", _qwen3(2560, 36, 32, 8, 9728)),
          config_source=_FLASH_SOURCE.format(llm="Qwen3-4B", where="a public Qwen3-4B config class and Qwen3-VL-4B's "
                                             "text_config, which has the same decoder"),
          **_FLASH_COMMON),
    Entry(name="InternVL3_5-2B-Flash", hub_id="OpenGVLab/InternVL3_5-2B-Flash", model_type="internvl_chat",
          architecture=_FLASH_ARCH, config=_flash("2B", _qwen3(2048, 28, 16, 8, 6144)),
          config_source=_FLASH_SOURCE.format(llm="Qwen3-1.7B", where="levanter's Qwen3 size table and Qwen3-VL-2B's "
                                             "text_config, which has the same decoder"),
          **_FLASH_COMMON),
    Entry(name="InternVL3_5-1B-Flash", hub_id="OpenGVLab/InternVL3_5-1B-Flash", model_type="internvl_chat",
          architecture=_FLASH_ARCH, config=_flash("1B", _qwen3(1024, 28, 16, 8, 3072)),
          config_source=_FLASH_SOURCE.format(llm="Qwen3-0.6B", where="levanter's Qwen3 size table and a public "
                                             "InternVL checkpoint whose text_config is Qwen3-0.6B"),
          **_FLASH_COMMON),
    Entry(name="InternVL3-2B", hub_id="OpenGVLab/InternVL3-2B-hf", model_type="internvl", architecture=_V3_ARCH,
          config=_internvl3("2B", dict(model_type="qwen2", hidden_size=1536, num_hidden_layers=28,
                                       num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                                       hidden_act="silu")),
          config_source=_V3_SOURCE_2B, **_V3_COMMON),
    Entry(name="InternVL3-1B", hub_id="OpenGVLab/InternVL3-1B-hf", model_type="internvl", architecture=_V3_ARCH,
          config=_internvl3("1B", dict(model_type="qwen2", hidden_size=896, num_hidden_layers=24,
                                       num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                                       vocab_size=151674, max_position_embeddings=32768, rope_theta=1000000.0,
                                       rope_scaling={"rope_type": "dynamic", "factor": 2.0}, rms_norm_eps=1e-6,
                                       hidden_act="silu")),
          config_source=_V3_SOURCE_1B, **_V3_COMMON),
]


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head="logits", **_):
    from model_zoo.language.decoder_graph import build_decoder_graph
    from model_zoo.multimodal.internvl_vision_graph import build_internvl_vision_graph
    from model_zoo.language.text_model_view import TextModelView, text_config
    if head == "vision":
        return build_internvl_vision_graph(config, weights, weight_format, group_size)
    old = "language_model.model.embed_tokens.weight" in weights   # saves laid out as the original composite
    view = TextModelView(weights, "language_model.model." if old else "model.language_model.",
                         lm_head="language_model.lm_head.weight")
    cfg = text_config(config)
    cfg.setdefault("model_type", "qwen2")
    return build_decoder_graph(cfg, view, block_size, kv_cache_dtype, weight_format, group_size, head,
                               image_rows=head == "logits")


def _build_flash(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
                 head="logits", **_):
    """The original project's layout (InternVLChatModel: vision_model, mlp1, mlp2 and the router, language_model)."""
    from model_zoo.language.decoder_graph import build_decoder_graph
    from model_zoo.language.text_model_view import TextModelView
    from model_zoo.multimodal.internvl_vision_graph import build_internvl_flash_vision_graph
    if head == "vision":
        return build_internvl_flash_vision_graph(config, weights, weight_format, group_size)
    view = TextModelView(weights, "language_model.model.", lm_head="language_model.lm_head.weight")
    cfg = dict(config.get("llm_config") or {})
    cfg.setdefault("model_type", "qwen3")
    cfg.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
    return build_decoder_graph(cfg, view, block_size, kv_cache_dtype, weight_format, group_size, head,
                               image_rows=head == "logits")


GRAPH_BUILDERS = {"internvl": _build, "internvl_chat": _build_flash}
