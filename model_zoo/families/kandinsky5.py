"""Kandinsky 5.0 Lite (Kandinsky Lab): flow-matching CrossDiT (diffusers Kandinsky5Transformer3DModel: 2 text-refiner
blocks over Qwen2.5-VL-7B hidden states, visual blocks with self-attention, cross-attention to the refined text and
adaLN modulation from time + the pooled CLIP-L embedding, 3-D RoPE split axes_dims). Video Lite (2B) decodes with the
HunyuanVideo 3-D VAE; Image Lite (6B) with the FLUX.1 VAE. I2V and I2I condition by concatenating the source latents and
a mask channel to the noisy latents (visual_cond: 2 x 16 + 1 input channels). The 10 s video checkpoints were trained
with NABLA block-sparse attention.

Image Lite text-to-image and image-to-image and Video Lite text-to-video and image-to-video run on the runtime (`python -m model_zoo convert NAME`,
lite.diffusion.kandinsky5): the Qwen2.5-VL language model with the "hidden" head (families/qwen2_5_vl_text.py), CLIP-L's
pooled output, the CrossDiT (model_zoo/generation/kandinsky5_graph.py: q / k rounded to bfloat16 after RoPE as the reference
model does), the FLUX VAE decoder or the HunyuanVideo VAE (model_zoo/generation/hunyuan_vae_graph.py: its encoder for the image,
its decoder per temporal tile; the FLUX VAE's encoder for I2I, whose source image also enters Qwen2.5-VL's prompt
through its vision tower with 3-D positions, as Qwen-Image-Edit's does), proved against diffusers'
Kandinsky5T2IPipeline / Kandinsky5I2IPipeline / Kandinsky5T2VPipeline / Kandinsky5I2VPipeline. lite_boost runs the CrossDiT with Ulysses over its visual tokens
(lite_boost/models/kandinsky5.py), the FLUX VAE by bands of rows and the HunyuanVideo VAE's temporal tiles across
ranks. NABLA sparse attention (the 10 s T2V checkpoints) runs in the graph as the Attention operator's block mask and
in lite_boost per rank's heads."""
from model_zoo.generation.hunyuan_vae_graph import build_from_checkpoint as build_hunyuan_vae
from model_zoo.generation.kandinsky5_graph import build_kandinsky5_graph
from model_zoo.registry import Entry

_SOURCE = ("DiT: the original repo's inference configs (kandinskylab/kandinsky-5 configs/{file} dit_params and "
           "attention), transcribed; head dim = sum(axes_dims) as in Kandinsky5Transformer3DModel; text encoders: "
           "Qwen2.5-VL-7B-Instruct's text config.json and openai/clip-vit-large-patch14's text config as published "
           "(Qwen2.5-VL vision-tower sizes left out); {vae}; parameter count from the Kandinsky 5.0 technical report "
           "(arXiv 2511.14993){note}. The Hub is not reachable from this machine")
_VAE_VIDEO = ("VAE: HunyuanVideo's AutoencoderKLHunyuanVideo as diffusers defines it by default (16 latent channels, "
              "8x spatial / 4x temporal, which the Kandinsky 5 video pipelines also assume); scaling factor left out")
_VAE_IMAGE = ("VAE: the FLUX.1 AutoencoderKL (vae/config.json of black-forest-labs/FLUX.1-dev as quoted by public "
              "loaders)")

_QWEN25_VL_7B_TEXT = dict(model_type="qwen2_5_vl", hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                          num_key_value_heads=4, intermediate_size=18944, vocab_size=152064, rope_theta=1000000.0)
_CLIP_L_TEXT = dict(model_type="clip_text_model", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=77, vocab_size=49408)
_HUNYUAN_VAE = dict(latent_channels=16, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
                    spatial_compression_ratio=8, temporal_compression_ratio=4)
_FLUX_VAE = dict(latent_channels=16, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
                 scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False)


def _dit(model_dim, ff_dim, visual_blocks, axes_dims, visual_cond, **extra):
    return dict(in_visual_dim=16, out_visual_dim=16, time_dim=512, patch_size=[1, 2, 2], model_dim=model_dim,
                ff_dim=ff_dim, num_text_blocks=2, num_visual_blocks=visual_blocks, axes_dims=list(axes_dims),
                head_dim=sum(axes_dims), num_heads=model_dim // sum(axes_dims), visual_cond=visual_cond,
                in_text_dim=3584, in_text_dim2=768, **extra)


def _config(parameters, transformer, vae, max_text):
    return dict(_parameters=parameters, transformer=transformer, vae=vae,
                text_encoder=dict(_QWEN25_VL_7B_TEXT, max_length=max_text), text_encoder_2=_CLIP_L_TEXT)


_ARCH_VIDEO = ("diffusers Kandinsky5Transformer3DModel + AutoencoderKLHunyuanVideo + transformers "
               "Qwen2_5_VLForConditionalGeneration + CLIPTextModel")
_ARCH_IMAGE = ("diffusers Kandinsky5Transformer3DModel + AutoencoderKL (FLUX VAE) + transformers "
               "Qwen2_5_VLForConditionalGeneration + CLIPTextModel")
_COMMON = dict(category="generation", family="kandinsky5", status="planned")
_BOOST_VIDEO = ("Kandinsky5Transformer3DModel", "AutoencoderKLHunyuanVideo")
_CONVERTER = dict(frontend="HF (diffusers pipeline directory)",
                  precision="fp32, bf16, int8 or int4 transformer and text-encoder weights; VAE float32")
_BOOST_IMAGE = ("Kandinsky5Transformer3DModel", "AutoencoderKL")

ENTRIES = [
    Entry(name="Kandinsky-5.0-I2V-Lite-5s", hub_id="kandinskylab/Kandinsky-5.0-I2V-Lite-5s", architecture=_ARCH_VIDEO,
          config=_config("2B", _dit(1792, 7168, 32, (16, 24, 24), True), _HUNYUAN_VAE, 256),
          config_source=_SOURCE.format(file="k5_lite_i2v_5s_sft_sd.yaml", vae=_VAE_VIDEO,
                                       note="; the Hub repo holds the original-format checkpoint (diffusers lists no "
                                            "-Diffusers variant of it)"),
          graphs=("text_encoder", "text_encoder_2", "vae_encoder", "dit", "vae_decoder"), pipeline="render",
          converter=dict(_CONVERTER, frontend="HF (a diffusers Kandinsky5I2VPipeline directory; this Hub repo is in "
                                              "the original layout: its DiT goes in transformer/, the other "
                                              "components are the T2V Lite -Diffusers repo's)"),
          boost_classes=_BOOST_VIDEO,
          **dict(_COMMON, status="supported",
                 test="tests/model_zoo/test_kandinsky5.py::test_kandinsky5_i2v_pipeline_matches_diffusers")),
    Entry(name="Kandinsky-5.0-T2V-Lite-sft-10s", hub_id="kandinskylab/Kandinsky-5.0-T2V-Lite-sft-10s-Diffusers",
          architecture=_ARCH_VIDEO,
          config=_config("2B", _dit(1792, 7168, 32, (16, 24, 24), True,
                                    attention=dict(type="nabla", P=0.9, wT=11, wW=3, wH=3, add_sta=True,
                                                   method="topcdf")), _HUNYUAN_VAE, 256),
          config_source=_SOURCE.format(file="k5_lite_t2v_10s_sft_sd.yaml", vae=_VAE_VIDEO,
                                       note="; visual_cond is as that config states (true) for this text-to-video "
                                            "checkpoint"),
          graphs=("text_encoder", "text_encoder_2", "dit", "vae_decoder"), pipeline="render",
          converter=_CONVERTER, boost_classes=_BOOST_VIDEO,
          **dict(_COMMON, status="supported",
                 test="tests/model_zoo/test_kandinsky5.py::test_kandinsky5_t2v_pipeline_matches_diffusers")),
    Entry(name="Kandinsky-5.0-T2I-Lite", hub_id="kandinskylab/Kandinsky-5.0-T2I-Lite-sft-Diffusers",
          architecture=_ARCH_IMAGE,
          config=_config("6B", _dit(2560, 10240, 50, (32, 48, 48), False), _FLUX_VAE, 512),
          config_source=_SOURCE.format(file="config_t2i.yaml", vae=_VAE_IMAGE,
                                       note="; visual_cond is not set there (the class default, false)"),
          graphs=("text_encoder", "text_encoder_2", "dit", "vae_decoder"), pipeline="render",
          converter=_CONVERTER, boost_classes=_BOOST_IMAGE,
          **dict(_COMMON, status="supported",
                 test="tests/model_zoo/test_kandinsky5.py::test_kandinsky5_t2i_pipeline_matches_diffusers")),
    Entry(name="Kandinsky-5.0-I2I-Lite", hub_id="kandinskylab/Kandinsky-5.0-I2I-Lite-sft-Diffusers",
          architecture=_ARCH_IMAGE + " (the source image also goes through Qwen2.5-VL)",
          config=_config("6B", _dit(2560, 10240, 50, (32, 48, 48), True, instruct_type="channel"), _FLUX_VAE, 512),
          config_source=_SOURCE.format(file="config_i2i.yaml", vae=_VAE_IMAGE,
                                       note="; visual_cond true because diffusers' Kandinsky5I2IPipeline concatenates "
                                            "[latents, image latents, ones] (the original config says instruct_type: "
                                            "channel)"),
          graphs=("text_encoder", "vision_encoder", "text_encoder_2", "vae_encoder", "dit", "vae_decoder"),
          pipeline="edit", converter=_CONVERTER, boost_classes=_BOOST_IMAGE,
          **dict(_COMMON, status="supported",
                 test="tests/model_zoo/test_kandinsky5_i2i.py::test_kandinsky5_i2i_pipeline_matches_diffusers")),
]

# diffusers components: keyed on their config's _class_name
GRAPH_BUILDERS = {"Kandinsky5Transformer3DModel": build_kandinsky5_graph,
                  "AutoencoderKLHunyuanVideo": build_hunyuan_vae}
