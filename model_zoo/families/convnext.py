"""ConvNeXt (transformers model_type "convnext"): a 4x4 patchify stem and four stages of ConvNeXt blocks (7x7
depthwise conv, LayerNorm, pointwise MLP 4x with GELU, layer scale), 2x2 strided downsampling between stages, a final
LayerNorm over the pooled features and a linear classifier."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="ConvNeXt", category="retrieval_vision", family="convnext", model_type="convnext",
          hub_id="facebook/convnext-tiny-224", architecture="transformers ConvNextForImageClassification -> model_zoo.encoders.vision_graphs (lite.encoder_pipelines.ImageClassifier)",
          config=dict(_parameters="28M", model_type="convnext", depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768],
                      num_stages=4, patch_size=4, image_size=224, num_channels=3, hidden_act="gelu",
                      layer_norm_eps=1e-12, layer_scale_init_value=1e-6),
          config_source=("transformers 5.24 ConvNextConfig defaults, which its docstring ties to "
                         "facebook/convnext-tiny-224 (depths [3, 3, 9, 3], widths [96, 192, 384, 768], 4x4 stem); "
                         "the name does not say which size, so this entry is ConvNeXt-Tiny, the size this project "
                         "already benchmarks; 28M is computed from these numbers (27.8M backbone + the classifier); "
                         "the classifier's label count is left out (not seen)"),
          graphs=("backbone_and_head",), pipeline="classify", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_checkpoint_vision.py::test_image_classifier_pipeline[convnext]"),
]


def _build(config, weights, **options):
    from model_zoo.encoders.vision_graphs import build_convnext_graph
    return build_convnext_graph(config, weights, **options)


GRAPH_BUILDERS = {"convnext": _build}
