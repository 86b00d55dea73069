"""CLIP (CLIPModel): a ViT image encoder and a causal-masked text transformer, each followed by a linear projection into
a shared embedding space; similarity is the scaled cosine of the two embeddings."""
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
          graphs=("image_encoder", "text_encoder"), pipeline="embed", status="planned",
          missing=("checkpoint-frontend graph builders (converter_lite --fmk=HF) for the CLIP image and text towers "
                   "with their projections, and the embed pipeline for image-text pairs (issue 38); the towers "
                   "themselves only run today as ONNX exports of random-weight architectures (model_zoo.hf_tiny "
                   "clip_text / clip_vision / clip_vision_base), not from the checkpoint")),
]
