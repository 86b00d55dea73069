"""LLaVA-1.5 and LLaVA-NeXT (v1.6): a CLIP ViT-L/14 at 336x336 (features of the penultimate layer, CLS dropped: 576
tokens), a two-layer GELU MLP projector, and a Llama-family decoder. LLaVA-1.5 (LlavaForConditionalGeneration) has
Vicuna-7B; LLaVA-NeXT (LlavaNextForConditionalGeneration) adds AnyRes tiling (a base 336 view plus tiles on one of the
image_grid_pinpoints, with a learned image_newline token per row); the v1.6 Mistral-7B checkpoint is entered here.

LLaVA-1.5 runs on the runtime: head "vision" is the CLIP tower and projector
(model_zoo/multimodal/llava_vision_graph.py), the step graph the Llama decoder with the image rows replacing the <image>
tokens' embeddings (plain 1-D positions), lite.llm.TextEngine expands each <image> of a chat to the tower's rows
(lite.llava_image). LLaVA-NeXT adds AnyRes: the image resized into the best of image_grid_pinpoints, cut into 336-pixel
tiles beside a whole-image view, all through the same graph as one batch; the tiles' rows are reassembled, unpadded to
the image's aspect ratio and end each row with image_newline (lite.llava_image.LlavaNextTiler)."""
from model_zoo.registry import Entry


def _clip_l14_336():
    return dict(model_type="clip_vision_model", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                intermediate_size=4096, patch_size=14, image_size=336, projection_dim=768, hidden_act="quick_gelu")


def _llava_1_5():
    text = dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, intermediate_size=11008, hidden_act="silu")
    return dict(_parameters="7B", model_type="llava", vision_config=_clip_l14_336(), text_config=text,
                vision_feature_layer=-2, vision_feature_select_strategy="default", image_seq_length=576,
                projector_hidden_act="gelu", image_token_index=32000)


def _llava_1_6_mistral():
    text = dict(model_type="mistral", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, intermediate_size=14336, vocab_size=32064, max_position_embeddings=32768,
                rope_theta=1000000.0, rms_norm_eps=1e-5, sliding_window=None, hidden_act="silu")
    return dict(_parameters="7B", model_type="llava_next", vision_config=_clip_l14_336(), text_config=text,
                vision_feature_layer=-2, vision_feature_select_strategy="default", projector_hidden_act="gelu",
                image_token_index=32000, use_image_newline_parameter=True,
                image_grid_pinpoints=[[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]])


ENTRIES = [
    Entry(name="llava-v1.6", category="vlm", family="llava", hub_id="llava-hf/llava-v1.6-mistral-7b-hf",
          model_type="llava_next", config=_llava_1_6_mistral(),
          config_source=("llava-hf/llava-v1.6-mistral-7b-hf's config.json as copied in public repositories (AWQ, "
                         "bitsandbytes and OpenVINO conversions and fine-tunes whose _name_or_path is that "
                         "checkpoint; the Hub is not reachable from this machine); the fields the checkpoint leaves to "
                         "defaults (hidden 4096, 32 layers, 32 heads; the CLIP tower's quick_gelu) are transformers "
                         "5.24's MistralConfig / CLIPVisionConfig defaults. 'llava-v1.6' is taken to be the Mistral-7B "
                         "checkpoint (the one transformers' LlavaNextConfig docstring names); the Vicuna-7B/13B and "
                         "34B v1.6 checkpoints differ in the language model"),
          architecture="transformers LlavaNextForConditionalGeneration (CLIPVisionModel + MistralForCausalLM)",
          graphs=("vision_encoder", "decoder_step"), pipeline="caption", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_llava.py::test_llava_next_anyres_tokens_equal_transformers"),
    Entry(name="LLaVA", category="vlm", family="llava", hub_id="llava-hf/llava-1.5-7b-hf", model_type="llava",
          config=_llava_1_5(),
          config_source=("transformers 5.24's LlavaConfig defaults, whose docstring names llava-hf/llava-1.5-7b-hf "
                         "(CLIP ViT-L/14-336 tower, Llama 4096/32 layers/32 heads/11008 = Vicuna-7B's dimensions); "
                         "'LLaVA' is taken to be LLaVA-1.5-7B. The checkpoint's vocab_size (the tokenizer padded for "
                         "the image token) and max_position_embeddings were not read from its config.json (the Hub "
                         "is not reachable from this machine) and are left out"),
          architecture="transformers LlavaForConditionalGeneration (CLIPVisionModel + LlamaForCausalLM)",
          graphs=("vision_encoder", "decoder_step"), pipeline="caption", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_llava.py::test_llava_greedy_tokens_equal_transformers"),
]


def _build(config, weights, weight_format="float32", block_size=16, kv_cache_dtype="float32", group_size=32,
           head="logits", **_):
    from model_zoo.language.decoder_graph import build_decoder_graph
    from model_zoo.multimodal.llava_vision_graph import build_llava_vision_graph
    from model_zoo.language.text_model_view import TextModelView, text_config
    if head == "vision":
        return build_llava_vision_graph(config, weights, weight_format, group_size)
    old = "language_model.model.embed_tokens.weight" in weights   # saves before transformers 5
    view = TextModelView(weights, "language_model.model." if old else "model.language_model.",
                         lm_head="language_model.lm_head.weight")
    cfg = text_config(config)
    cfg.setdefault("model_type", "llama")
    return build_decoder_graph(cfg, view, block_size, kv_cache_dtype, weight_format, group_size, head,
                               image_rows=head == "logits")


GRAPH_BUILDERS = {"llava": _build, "llava_next": _build}
