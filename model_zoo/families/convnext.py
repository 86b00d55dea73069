"""ConvNeXt (transformers model_type "convnext"): a 4x4 patchify stem and four stages of ConvNeXt blocks (7x7
depthwise conv, LayerNorm, pointwise MLP 4x with GELU, layer scale), 2x2 strided downsampling between stages, a final
LayerNorm over the pooled features and a linear classifier."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="ConvNeXt", category="retrieval_vision", family="convnext", model_type="convnext",
          hub_id="facebook/convnext-tiny-224", architecture="transformers ConvNextForImageClassification",
          config=dict(_parameters="28M", model_type="convnext", depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768],
                      num_stages=4, patch_size=4, image_size=224, num_channels=3, hidden_act="gelu",
                      layer_norm_eps=1e-12, layer_scale_init_value=1e-6),
          config_source=("transformers 5.24 ConvNextConfig defaults, which its docstring ties to "
                         "facebook/convnext-tiny-224 (depths [3, 3, 9, 3], widths [96, 192, 384, 768], 4x4 stem); "
                         "the name does not say which size, so this entry is ConvNeXt-Tiny, the size this project "
                         "already benchmarks; 28M is computed from these numbers (27.8M backbone + the classifier); "
                         "the classifier's label count is left out (not seen)"),
          graphs=("backbone_and_head",), pipeline="classify", status="planned",
          missing=("runs today when exported to ONNX (converter_lite --fmk=ONNX); the checkpoint path (issue 34's "
                   "graph builder for model_type convnext from its safetensors) is in progress and not there yet, "
                   "nor is the classify pipeline's preprocessing (resize/crop to 224, normalise) and id2label "
                   "mapping")),
]
