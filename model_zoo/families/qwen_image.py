"""Qwen-Image and Qwen-Image-Edit (Qwen team): a 20B MMDiT (diffusers QwenImageTransformer2DModel: 60 dual-stream
blocks,
joint attention over image tokens and Qwen2.5-VL-7B hidden states, 3-axis RoPE) with a Wan-style causal VAE used on
single frames (AutoencoderKLQwenImage, 16 latent channels, 8x spatial) and Qwen2.5-VL-7B-Instruct as the text encoder.
Qwen-Image-Edit shares the architecture: the source image goes both through Qwen2.5-VL (vision tower, semantic control)
and through the VAE encoder (latents concatenated to the token sequence, appearance control).

Qwen-Image runs on the runtime (`python -m model_zoo convert Qwen-Image`, lite.diffusion.qwen_image): the
Qwen2.5-VL language model as a step graph with the "hidden" head (families/qwen2_5_vl_text.py; its states after the
prompt template through LLMEngine.encode), the transformer (model_zoo/generation/qwen_image_graph.py: MSRoPE, masked joint
attention; one image size, text up to 1024 tokens) and the VAE decoder (the Wan VAE's layout: its first-frame slice),
proved against diffusers' QwenImagePipeline. Qwen-Image-Edit (lite.diffusion.qwen_image_edit) adds the Qwen2.5-VL
vision tower (head "vision", for the source image's patch grid), whose rows stand in for the prompt's image-pad
tokens with 3-D (multimodal RoPE) positions in LLMEngine, the VAE encoder's first-frame slice, and a transformer
built for the noise's tokens followed by the source image's (RoPE frame 1), proved against diffusers'
QwenImageEditPipeline. lite_boost runs the transformer with Ulysses over its masked joint attention, the edit's two
images included (lite_boost/models/qwen_image.py; not Edit-2511's zero_cond_t)."""
from model_zoo.generation.qwen_image_graph import build_qwen_image_graph
from model_zoo.registry import Entry
from model_zoo.generation.wan_vae_graph import build_from_checkpoint as build_wan_style_vae_decoder

_SOURCE = ("transformer: diffusers QwenImageTransformer2DModel defaults, which equal Qwen-Image's published "
           "transformer/config.json (as quoted verbatim by several public loaders; out_channels 16); VAE: "
           "AutoencoderKLQwenImage vae/config.json sizes as quoted by the same loaders (latents_mean/std left out); "
           "text encoder: Qwen2.5-VL-7B-Instruct's text config.json as published (vision-tower sizes left out); "
           "parameter count from the Qwen-Image model card (20B MMDiT){note}. The Hub is not reachable from this "
           "machine")

_TRANSFORMER = dict(patch_size=2, in_channels=64, out_channels=16, num_layers=60, attention_head_dim=128,
                    num_attention_heads=24, hidden_size=24 * 128, joint_attention_dim=3584, guidance_embeds=False,
                    axes_dims_rope=[16, 56, 56])
_VAE = dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
            temperal_downsample=[False, True, True])
_QWEN25_VL_7B_TEXT = dict(model_type="qwen2_5_vl", hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                          num_key_value_heads=4, intermediate_size=18944, vocab_size=152064, rope_theta=1000000.0)
_CONFIG = dict(_parameters="20B", transformer=_TRANSFORMER, vae=_VAE, text_encoder=_QWEN25_VL_7B_TEXT)
_COMMON = dict(category="generation", family="qwen_image", status="planned", config=_CONFIG)

ENTRIES = [
    Entry(name="Qwen-Image", hub_id="Qwen/Qwen-Image",
          architecture="diffusers QwenImageTransformer2DModel + AutoencoderKLQwenImage + transformers "
                       "Qwen2_5_VLForConditionalGeneration (text only)",
          config_source=_SOURCE.format(note=""), graphs=("text_encoder", "dit", "vae_decoder"), pipeline="render",
          boost_classes=("QwenImageTransformer2DModel",),
          converter=dict(frontend="HF (diffusers pipeline directory)",
                         precision="fp32, bf16, int8 or int4 transformer and text-encoder weights; VAE float32"),
          **dict(_COMMON, status="supported",
                 test="tests/model_zoo/test_qwen_image_pipeline.py::test_qwen_image_pipeline_matches_diffusers")),
    Entry(name="Qwen-Image-Edit", hub_id="Qwen/Qwen-Image-Edit",
          architecture="diffusers QwenImageTransformer2DModel + AutoencoderKLQwenImage + transformers "
                       "Qwen2_5_VLForConditionalGeneration (with its vision tower, via Qwen2VLProcessor)",
          config_source=_SOURCE.format(note="; Qwen-Image-Edit is the same 20B MMDiT further trained for editing "
                                            "(its model card); the flags later Edit releases set (zero_cond_t in "
                                            "Edit-2511) are taken at their defaults, not checked against this repo's "
                                            "config.json"),
          graphs=("vision_encoder", "text_encoder", "vae_encoder", "dit", "vae_decoder"), pipeline="edit",
          boost_classes=("QwenImageTransformer2DModel",),
          converter=dict(frontend="HF (diffusers pipeline directory)",
                         precision="fp32, bf16, int8 or int4 transformer, text-encoder and vision-tower weights; "
                                   "VAE float32"),
          **dict(_COMMON, status="supported",
                 test="tests/model_zoo/test_qwen_image_edit_pipeline.py::test_qwen_image_edit_matches_diffusers")),
]

# diffusers components: keyed on their config's _class_name (AutoencoderKLQwenImage has the Wan VAE's layout)
GRAPH_BUILDERS = {"QwenImageTransformer2DModel": build_qwen_image_graph,
                  "AutoencoderKLQwenImage": build_wan_style_vae_decoder}
