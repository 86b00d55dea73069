"""Wan 2.1 / 2.2 (Alibaba Wan team): flow-matching video DiTs (diffusers WanTransformer3DModel: patchify (1, 2, 2),
self-attention with RMS q/k norm across heads and 3-D RoPE, cross-attention to UMT5-XXL text (and, for Wan2.1 I2V, to
CLIP ViT-H image tokens), adaLN time modulation), a causal 3-D VAE (AutoencoderKLWan) and the UMT5-XXL encoder.
Wan 2.2 A14B splits denoising between two 14B experts (high-noise / low-noise, switched at `boundary_ratio`); Wan 2.2
TI2V-5B has its own 48-channel VAE (patchified, 16x spatial) and per-token timesteps; Wan 2.2 Animate adds motion and
face encoders to the I2V DiT (WanAnimateTransformer3DModel).

On the runtime: the UMT5 encoder (model_zoo/encoders/t5_graph.py), the DiT (wan_graph.py), the VAE's encoder / decoder
time slices (wan_vae_graph.py) and Wan 2.1 I2V's CLIP vision tower (clip_vision_graph.py) from the diffusers pipeline
directory, run by lite.diffusion.wan (text to video) and lite.diffusion.wan_i2v (image to video; Wan 2.2 TI2V's
first frame). In PyTorch, lite_boost accelerates WanTransformer3DModel (per-token timesteps included) and both VAEs
(AutoencoderKLWan, 2.2's patchified one too). Wan 2.2 Animate runs as lite.diffusion.wan_animate (mode "animate":
segments conditioned on the previous one's last frames; model_zoo/generation/wan_animate_graph.py builds its DiT with
the pose embedding and face adapters, and its motion / face encoders as a graph of their own) and in lite_boost
(lite_boost/models/wan_animate.py)."""
from model_zoo.generation.wan_animate_graph import build_wan_animate_graph
from model_zoo.registry import Entry
from model_zoo.generation.wan_graph import build_wan_dit_graph
from model_zoo.generation.wan_vae_graph import build_from_checkpoint as build_wan_vae_decoder

_HUB = "The Hub is not reachable from this machine"
_SRC_DIT = ("transformer: the per-model diffusers config written out in diffusers' scripts/convert_wan_to_diffusers.py "
            "(get_transformer_config), which agrees with the original Wan repos' wan/configs/*.py (dim, ffn_dim, "
            "num_heads, num_layers); hidden_size is derived (heads x head_dim)")
_SRC_VAE21 = ("VAE: diffusers AutoencoderKLWan defaults (= Wan2.1_VAE.pth, which that script loads into "
              "AutoencoderKLWan() with no arguments)")
_SRC_VAE22 = ("VAE: vae22_diffusers_config of the same script (= Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json as "
              "quoted by several public loaders; latents_mean/std left out)")
_SRC_TEXT = "text encoder: google/umt5-xxl's config.json as transcribed in public Wan loaders (encoder stack only)"
_SRC_22 = "Wan 2.2 pipeline settings (boundary_ratio, expand_timesteps) from the same script's __main__"


def _src(*parts):
    return "; ".join(parts) + ". " + _HUB


_UMT5_XXL = dict(model_type="umt5", d_model=4096, d_ff=10240, d_kv=64, num_heads=64, num_layers=24,
                 vocab_size=256384, feed_forward_proj="gated-gelu")
_WAN21_VAE = dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
                  temperal_downsample=[False, True, True], in_channels=3, out_channels=3, is_residual=False,
                  scale_factor_temporal=4, scale_factor_spatial=8)
_WAN22_VAE = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                  attn_scales=[], temperal_downsample=[False, True, True], in_channels=12, out_channels=12,
                  patch_size=2, is_residual=True, scale_factor_temporal=4, scale_factor_spatial=16)
# laion/CLIP-ViT-H-14 vision tower (Wan2.1 I2V's image encoder, CLIPVisionModelWithProjection in the -Diffusers repo).
_CLIP_VIT_H = dict(model_type="clip_vision_model", hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
                   intermediate_size=5120, patch_size=14, image_size=224)

_ARCH = "diffusers WanTransformer3DModel + AutoencoderKLWan + transformers UMT5EncoderModel"
_COMMON = dict(category="generation", family="wan", pipeline="render", status="planned")
# Wan2.1 T2V on the runtime: UMT5 (model_zoo/encoders/t5_graph.py), the DiT (wan_graph.py) and the VAE decoder's time
# slices (wan_vae_graph.py) from the diffusers pipeline directory, run by lite.diffusion.wan (render); in PyTorch by
# lite_boost.
_BOOSTED = ("WanTransformer3DModel", "AutoencoderKLWan")   # lite_boost.models.SUPPORTED_MODELS
_T2V_SUPPORTED = dict(_COMMON, status="supported", boost_classes=_BOOSTED,
                      test="tests/model_zoo/test_wan_pipeline.py::test_wan_t2v_pipeline_matches_diffusers",
                      converter=dict(frontend="HF (diffusers pipeline directory)", precision="fp32, bf16, int8 or "
                                     "int4 DiT and text-encoder weights; VAE float32"))
# image to video (lite.diffusion.wan_i2v): the same graphs, the VAE encoder's time slices and, for Wan 2.1, the CLIP
# vision tower (model_zoo/encoders/clip_vision_graph.py, head image_context)
_I2V_TEST = "tests/model_zoo/test_wan_i2v_pipeline.py::"


def _dit(layers, heads, ffn, in_channels, out_channels, **extra):
    return dict(num_layers=layers, num_attention_heads=heads, attention_head_dim=128, hidden_size=heads * 128,
                ffn_dim=ffn, patch_size=[1, 2, 2], in_channels=in_channels, out_channels=out_channels, text_dim=4096,
                freq_dim=256, qk_norm="rms_norm_across_heads", cross_attn_norm=True, eps=1e-6, **extra)


ENTRIES = [
    Entry(name="Wan2.1-T2V-1.3B", hub_id="Wan-AI/Wan2.1-T2V-1.3B-Diffusers", architecture=_ARCH,
          config=dict(_parameters="1.3B", transformer=_dit(30, 12, 8960, 16, 16), vae=_WAN21_VAE,
                      text_encoder=_UMT5_XXL),
          config_source=_src(_SRC_DIT, _SRC_VAE21, _SRC_TEXT), graphs=("text_encoder", "dit", "vae_decoder"),
          **_T2V_SUPPORTED),
    Entry(name="Wan2.1-T2V-14B", hub_id="Wan-AI/Wan2.1-T2V-14B-Diffusers", architecture=_ARCH,
          config=dict(_parameters="14B", transformer=_dit(40, 40, 13824, 16, 16), vae=_WAN21_VAE,
                      text_encoder=_UMT5_XXL),
          config_source=_src(_SRC_DIT + " (these values are also diffusers' WanTransformer3DModel defaults)",
                             _SRC_VAE21, _SRC_TEXT),
          graphs=("text_encoder", "dit", "vae_decoder"),
          **_T2V_SUPPORTED),
    Entry(name="Wan2.1-I2V-14B-480P", hub_id="Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",
          architecture=_ARCH + " + CLIPVisionModelWithProjection (open-clip ViT-H/14 image encoder)",
          config=dict(_parameters="14B",
                      transformer=_dit(40, 40, 13824, 36, 16, image_dim=1280, added_kv_proj_dim=5120),
                      vae=_WAN21_VAE, text_encoder=_UMT5_XXL, image_encoder=_CLIP_VIT_H),
          config_source=_src(_SRC_DIT, _SRC_VAE21, _SRC_TEXT,
                             "image encoder: laion/CLIP-ViT-H-14-laion2B-s32B-b79K, which the conversion script puts "
                             "in the I2V pipeline, its vision sizes as quoted by public Wan loaders (projection_dim "
                             "left out)"),
          graphs=("text_encoder", "image_encoder", "vae_encoder", "dit", "vae_decoder"),
          **dict(_T2V_SUPPORTED, test=_I2V_TEST + "test_wan21_i2v_pipeline_matches_diffusers")),
    Entry(name="Wan2.2-TI2V-5B", hub_id="Wan-AI/Wan2.2-TI2V-5B-Diffusers", architecture=_ARCH,
          config=dict(_parameters="5B", transformer=_dit(30, 24, 14336, 48, 48), vae=_WAN22_VAE,
                      text_encoder=_UMT5_XXL, pipeline=dict(expand_timesteps=True)),
          config_source=_src(_SRC_DIT + " (wan_ti2v_5B.py: dim 3072, ffn 14336, 24 heads, 30 layers, vae_stride "
                                        "(4, 16, 16))", _SRC_VAE22, _SRC_TEXT, _SRC_22),
          graphs=("text_encoder", "vae_encoder", "dit", "vae_decoder"),
          **dict(_T2V_SUPPORTED, test=_I2V_TEST + "test_wan22_ti2v_text_and_image_to_video")),
    Entry(name="Wan2.2-T2V-A14B", hub_id="Wan-AI/Wan2.2-T2V-A14B-Diffusers",
          architecture=_ARCH + " (two WanTransformer3DModel experts: transformer = high-noise, transformer_2 = "
                               "low-noise)",
          config=dict(_parameters="27B (2 x 14B experts, 14B active)",
                      transformer=_dit(40, 40, 13824, 16, 16), transformer_2=_dit(40, 40, 13824, 16, 16),
                      vae=_WAN21_VAE, text_encoder=_UMT5_XXL, pipeline=dict(boundary_ratio=0.875)),
          config_source=_src(_SRC_DIT, _SRC_VAE21, _SRC_TEXT, _SRC_22,
                             "the parameter split (27B total, 14B active) is the Wan2.2 model card's"),
          graphs=("text_encoder", "dit_high_noise", "dit_low_noise", "vae_decoder"),
          **dict(_T2V_SUPPORTED,
                 test="tests/model_zoo/test_wan_pipeline.py::test_wan22_experts_switch_at_the_boundary")),
    Entry(name="Wan2.2-I2V-A14B", hub_id="Wan-AI/Wan2.2-I2V-A14B-Diffusers",
          architecture=_ARCH + " (two WanTransformer3DModel experts; no CLIP image encoder: the first frame enters "
                               "through VAE latents only)",
          config=dict(_parameters="27B (2 x 14B experts, 14B active)",
                      transformer=_dit(40, 40, 13824, 36, 16), transformer_2=_dit(40, 40, 13824, 36, 16),
                      vae=_WAN21_VAE, text_encoder=_UMT5_XXL, pipeline=dict(boundary_ratio=0.9)),
          config_source=_src(_SRC_DIT + " (model type Wan2.2-I2V-14B-720p there, added_kv_proj_dim None)",
                             _SRC_VAE21, _SRC_TEXT, _SRC_22, "the parameter split is the Wan2.2 model card's"),
          graphs=("text_encoder", "vae_encoder", "dit_high_noise", "dit_low_noise", "vae_decoder"),
          **dict(_T2V_SUPPORTED, test=_I2V_TEST + "test_wan22_i2v_two_experts_and_a_last_frame")),
    Entry(name="Wan2.2-Animate-14B", hub_id="Wan-AI/Wan2.2-Animate-14B-Diffusers",
          architecture="diffusers WanAnimateTransformer3DModel + AutoencoderKLWan + transformers UMT5EncoderModel + "
                       "CLIPVisionModel (open-clip XLM-RoBERTa ViT-H/14 vision tower, first 31 blocks)",
          config=dict(_parameters="14B",
                      transformer=_dit(40, 40, 13824, 36, 16, latent_channels=16, image_dim=1280,
                                       added_kv_proj_dim=5120, rope_max_seq_len=1024, pos_embed_seq_len=514,
                                       motion_encoder_dim=512, motion_encoder_size=512, motion_style_dim=512,
                                       motion_dim=20, face_encoder_hidden_dim=1024, face_encoder_num_heads=4,
                                       inject_face_latents_blocks=5),
                      vae=_WAN21_VAE, text_encoder=_UMT5_XXL,
                      image_encoder=dict(_CLIP_VIT_H, num_hidden_layers=31, projection_dim=1024)),
          config_source=_src(_SRC_DIT + " (its Wan2.2-Animate-14B entry, pos_embed_seq_len 257 * 2; the motion/face "
                                        "encoder sizes, which it does not override, are diffusers "
                                        "WanAnimateTransformer3DModel defaults)", _SRC_VAE21, _SRC_TEXT,
                             "image encoder: the CLIPVisionConfig that script builds for the converted open-clip "
                             "XLM-RoBERTa ViT-H/14 vision tower (31 of its 32 blocks)"),
          graphs=("text_encoder", "image_encoder", "vae_encoder", "dit", "face_encoder", "vae_decoder"),
          **dict(_T2V_SUPPORTED, boost_classes=("WanAnimateTransformer3DModel", "AutoencoderKLWan"),
                 test="tests/model_zoo/test_wan_animate.py::test_wan_animate_pipeline_matches_diffusers")),
]

# diffusers components carry no model_type: their config's _class_name picks the builder
GRAPH_BUILDERS = {"WanTransformer3DModel": build_wan_dit_graph, "AutoencoderKLWan": build_wan_vae_decoder,
                  "WanAnimateTransformer3DModel": build_wan_animate_graph}
