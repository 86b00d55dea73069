"""DINOv3 ViT (DINOv3ViTModel): a self-supervised ViT with patch 16, rotary position embeddings and register tokens,
used as a frozen image-feature backbone (CLS, register and patch tokens). On the runtime: the checkpoint converts
through `converter_lite --fmk=HF` / `python -m model_zoo convert DINOv3` (model_zoo.encoders.dinov3_graph, one image
size), and lite.encoder_pipelines.ImageEmbedder returns the [CLS] feature, the register and the patch features."""
from model_zoo.registry import Entry


def _vits16():
    return dict(_parameters="21M", model_type="dinov3_vit", hidden_size=384, num_hidden_layers=12,
                num_attention_heads=6, intermediate_size=1536, patch_size=16, image_size=224, hidden_act="gelu",
                use_gated_mlp=False)


ENTRIES = [
    Entry(name="DINOv3", category="driving_embodied", family="dinov3",
          hub_id="facebook/dinov3-vits16-pretrain-lvd1689m",
          model_type="dinov3_vit", config=_vits16(),
          config_source=("transformers 5.24's DINOv3ViTConfig defaults, whose docstring names "
                         "facebook/dinov3-vits16-pretrain-lvd1689m (ViT-S/16: 384 wide, 12 layers, 6 heads, MLP 1536); "
                         "the 21M parameter count is the DINOv3 model card's figure for ViT-S/16 (recalled, not read "
                         "from the Hub, which is not reachable from this machine). 'DINOv3' is taken to be that "
                         "smallest ViT; the number of register tokens and the rope / layer-scale settings of the "
                         "checkpoint were not read (the config class's defaults for them need not match the "
                         "checkpoint) and are left out"),
          architecture=("transformers DINOv3ViTModel -> model_zoo.encoders.dinov3_graph "
                        "(lite.encoder_pipelines.ImageEmbedder)"),
          graphs=("image_encoder",), pipeline="embed", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_dinov3.py::test_image_embedder_pipeline"),
]


def _build(config, weights, **options):
    from model_zoo.encoders.dinov3_graph import build_dinov3_graph
    return build_dinov3_graph(config, weights, **options)


GRAPH_BUILDERS = {"dinov3_vit": _build}
