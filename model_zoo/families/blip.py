"""BLIP and BLIP-2 captioners. BLIP (BlipForConditionalGeneration): a ViT-B/16 at 384x384 and a BERT-base text decoder
that cross-attends to the image tokens. BLIP-2 (Blip2ForConditionalGeneration): a frozen EVA ViT-g/14 at 224x224, a
Q-Former (BERT-base with 32 learned queries, cross-attention to the image every second layer) whose query outputs are
projected into a frozen OPT-2.7B decoder as a soft prompt.

BLIP runs on the runtime: head "vision" (the ViT and every decoder layer's cross-attention keys / values, once per
image) and head "text" (the decoder over a token prefix) from model_zoo/multimodal/blip_graphs.py,
lite.blip.BlipCaptioner the greedy caption loop (optionally continuing a text prompt, as
BlipForConditionalGeneration.generate does).

BLIP-2 runs on the LLM engine: head "vision" is the ViT, the Q-Former and language_projection in one graph
(model_zoo/multimodal/blip2_graphs.py: the image's query rows), the step graph the OPT decoder
(model_zoo/language/opt_decoder_graph.py) with those rows at the image tokens; lite.blip.Blip2Captioner captions and
answers questions in continuous batches."""
from model_zoo.registry import Entry


def _blip_base():
    vision = dict(model_type="blip_vision_model", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, patch_size=16, image_size=384, hidden_act="gelu")
    text = dict(model_type="blip_text_model", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, vocab_size=30524, max_position_embeddings=512, encoder_hidden_size=768,
                hidden_act="gelu")
    return dict(_parameters="base (ViT-B/16)", model_type="blip", vision_config=vision, text_config=text,
                projection_dim=512, image_text_hidden_size=256)


def _blip2_opt_2_7b():
    vision = dict(model_type="blip_2_vision_model", hidden_size=1408, num_hidden_layers=39, num_attention_heads=16,
                  intermediate_size=6144, patch_size=14, image_size=224, hidden_act="gelu")
    qformer = dict(model_type="blip_2_qformer", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, vocab_size=30522, cross_attention_frequency=2, encoder_hidden_size=1408)
    text = dict(model_type="opt", hidden_size=2560, num_hidden_layers=32, num_attention_heads=32, ffn_dim=10240,
                word_embed_proj_dim=2560, vocab_size=50304)
    return dict(_parameters="OPT-2.7B + ViT-g", model_type="blip-2", vision_config=vision, qformer_config=qformer,
                text_config=text, num_query_tokens=32, image_token_index=50265)


ENTRIES = [
    Entry(name="BLIP", category="vlm", family="blip", hub_id="Salesforce/blip-image-captioning-base",
          model_type="blip", config=_blip_base(),
          config_source=("transformers 5.24's BlipConfig defaults (BlipVisionConfig / BlipTextConfig) with the one "
                         "override Salesforce/blip-image-captioning-base's config.json makes (text "
                         "num_attention_heads 12), as seen in public copies of that config.json in fine-tunes whose "
                         "_name_or_path is the checkpoint (the Hub is not reachable from this machine). 'BLIP' is "
                         "taken to be the base captioning checkpoint; a parameter count was not read and the size is "
                         "given by its backbone"),
          architecture="transformers BlipForConditionalGeneration (BlipVisionModel + BlipTextLMHeadModel)",
          graphs=("vision_encoder", "text_decoder_step"), pipeline="caption", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_blip.py::test_blip_captions_equal_transformers"),
    Entry(name="BLIP-2", category="vlm", family="blip", hub_id="Salesforce/blip2-opt-2.7b", model_type="blip-2",
          config=_blip2_opt_2_7b(),
          config_source=("vision and Q-Former: transformers 5.24's Blip2Config defaults (docstring: "
                         "Salesforce/blip2-opt-2.7b); language model: the checkpoint's text_config as copied in a "
                         "public fine-tune of Salesforce/blip2-opt-2.7b (OPT-2.7B: 2560 wide, 32 layers, 32 heads, "
                         "ffn 10240, vocab 50304 after the image token was added), matching facebook/opt-2.7b's "
                         "published dimensions in a second public table. 'BLIP-2' is taken to be the OPT-2.7B "
                         "checkpoint; the total parameter count was not read"),
          architecture="transformers Blip2ForConditionalGeneration (Blip2VisionModel + Blip2QFormerModel + "
                       "OPTForCausalLM)",
          graphs=("vision_encoder", "decoder_step"), pipeline="caption", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_blip2.py::test_blip2_captions_equal_transformers"),
]


def _build(config, weights, weight_format="float32", group_size=32, head=None, **_):
    from converter.ir import ConverterError
    from model_zoo.multimodal.blip_graphs import build_blip_text_graph, build_blip_vision_graph
    if head == "vision":
        return build_blip_vision_graph(config, weights, weight_format, group_size)
    if head in ("text", "text_features"):   # (text_features: a retrieval model's text side without the image)
        return build_blip_text_graph(config, weights, weight_format, group_size, cross=head == "text")
    raise ConverterError(f"a BLIP model is several graphs: convert it with head 'vision', 'text' or 'text_features' "
                         f"(got {head!r})")


def _build_blip2(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
                 head="logits", **_):
    from converter.ir import ConverterError
    from model_zoo.multimodal.blip2_graphs import build_blip2_vision_graph
    from model_zoo.language.opt_decoder_graph import build_opt_decoder_graph
    from model_zoo.language.text_model_view import text_config
    if head == "vision":
        return build_blip2_vision_graph(config, weights, weight_format, group_size)
    text = text_config(config)
    if text.get("model_type", "opt") != "opt":
        raise NotImplementedError(f"BLIP-2 with a {text.get('model_type')} language model (OPT is supported; the "
                                  "Flan-T5 checkpoints are encoder-decoders)")
    if "language_model.model.decoder.embed_tokens.weight" not in weights:
        raise ConverterError("not a BLIP-2 OPT checkpoint: no language_model.model.decoder.*")
    return build_opt_decoder_graph(text, weights, block_size, kv_cache_dtype, weight_format, group_size, head,
                                   image_rows=True, prefix="language_model.model.decoder.",
                                   lm_head="language_model.lm_head.weight")


GRAPH_BUILDERS = {"blip": _build, "blip-2": _build_blip2}
