"""CLIP (CLIPModel): a ViT image encoder and a causal-masked text transformer, each followed by a linear projection into
a shared embedding space; similarity is the scaled cosine of the two embeddings.

A CLIPModel checkpoint converts into two graphs (head "image": model_zoo.encoders.clip_vision_graph with the visual
projection; head "text": model_zoo.encoders.clip_text_graph with the text projection, the checkpoint's logit_scale in
its metadata), run by lite.clip.CLIP: image and text embeddings, zero-shot classification."""
import numpy as np

from model_zoo.registry import Entry


def _clip_vit_b32():
    vision = dict(model_type="clip_vision_model", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, patch_size=32, image_size=224, hidden_act="quick_gelu")
    text = dict(model_type="clip_text_model", hidden_size=512, num_hidden_layers=12, num_attention_heads=8,
                intermediate_size=2048, vocab_size=49408, max_position_embeddings=77, hidden_act="quick_gelu")
    return dict(_parameters="151M", model_type="clip", vision_config=vision, text_config=text, projection_dim=512,
                logit_scale_init_value=2.6592)


ENTRIES = [
    Entry(name="CLIP ViT-B/32", category="vlm", family="clip", hub_id="openai/clip-vit-base-patch32",
          model_type="clip", config=_clip_vit_b32(),
          config_source=("transformers 5.24's CLIPConfig defaults (CLIPTextConfig / CLIPVisionConfig), whose "
                         "docstring names openai/clip-vit-base-patch32 and which are that checkpoint's dimensions; "
                         "the parameter count is the one the OpenAI CLIP paper / model card give for ViT-B/32 "
                         "(recalled, not read from the Hub, which is not reachable from this machine)"),
          architecture="transformers CLIPModel (CLIPVisionModel + CLIPTextModel + visual / text projections)",
          graphs=("image_encoder", "text_encoder"), pipeline="embed", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_clip.py::test_clip_pipeline_equals_transformers"),
]


def _build(config, weights, head=None, **options):
    from converter.ir import ConverterError
    from model_zoo.encoders.clip_text_graph import build_clip_text_graph
    from model_zoo.encoders.clip_vision_graph import build_clip_vision_graph
    if head == "image":
        return build_clip_vision_graph(config, weights, **options)
    if head == "text":
        graph = build_clip_text_graph(config, weights, **options)
        if "logit_scale" in weights:   # the similarity's temperature (a learned log scale), for zero-shot
            graph.metadata["logit_scale"] = repr(float(np.asarray(weights["logit_scale"], np.float64).reshape(-1)[0]))
        return graph
    raise ConverterError(f"a CLIPModel checkpoint holds two towers: convert it with head 'image' or 'text' "
                         f"(got {head!r})")


GRAPH_BUILDERS = {"clip": _build}
