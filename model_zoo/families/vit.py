"""ViT (transformers model_type "vit"): 16x16 patch embedding with a [CLS] token and learned position embeddings,
pre-LayerNorm encoder blocks (multi-head self-attention with q/k/v biases, GELU MLP), a final LayerNorm and a linear
classifier on the [CLS] token."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="ViT-B/16-224", category="retrieval_vision", family="vit", model_type="vit",
          hub_id="google/vit-base-patch16-224", architecture="transformers ViTForImageClassification -> model_zoo.encoders.vision_graphs (lite.encoder_pipelines.ImageClassifier)",
          config=dict(_parameters="86M", model_type="vit", hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, image_size=224, patch_size=16, num_channels=3,
                      hidden_act="gelu", layer_norm_eps=1e-12, qkv_bias=True),
          config_source=("transformers 5.24 ViTConfig defaults, which its docstring ties to "
                         "google/vit-base-patch16-224 (hidden 768, 12 layers, 12 heads, MLP 3072, 224 px, 16 px "
                         "patches), matching public copies of configs fine-tuned from that checkpoint; 86M is the "
                         "encoder's parameter count computed from these numbers (about 85.8M without the "
                         "classifier); the classifier's label count (id2label) is left out (not seen)"),
          graphs=("backbone_and_head",), pipeline="classify", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_checkpoint_vision.py::test_image_classifier_pipeline[vit]"),
]


def _build(config, weights, **options):
    from model_zoo.encoders.vision_graphs import build_vit_graph
    return build_vit_graph(config, weights, **options)


GRAPH_BUILDERS = {"vit": _build}
