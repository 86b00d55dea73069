"""Stable Diffusion 1.5 / 2.1 / XL (latent diffusion with a UNet): diffusers UNet2DConditionModel (ResNet blocks and
spatial transformers cross-attending to CLIP text states), a 4-channel AutoencoderKL (8x spatial) and CLIP text
encoders:
SD 1.5 uses CLIP ViT-L/14 (768), SD 2.1 OpenCLIP ViT-H/14's text tower (1024, penultimate layer) and v-prediction at
768 px, SDXL both CLIP ViT-L and OpenCLIP ViT-bigG (concatenated to 2048) plus the bigG pooled embedding and size/crop
conditioning (addition_embed_type "text_time").

On the runtime: the CLIP text towers (model_zoo/encoders/clip_text_graph.py), the UNet (unet_graph.py, one latent size)
and the AutoencoderKL decoder (vae_kl_graph.py) from the diffusers pipeline directory, run by
lite.diffusion.stable_diffusion with PNDM / DDIM / Euler (lite.diffusion.ddpm_schedulers). In PyTorch, lite_boost
splits the UNet's spatial-transformer tokens across ranks (boost_unet) and decodes the AutoencoderKL by bands of rows
(boost_autoencoder_kl)."""
from model_zoo.registry import Entry
from model_zoo.generation.unet_graph import build_unet_graph

_HUB = "The Hub is not reachable from this machine"
_CLIP_L_TEXT = dict(model_type="clip_text_model", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=77, vocab_size=49408)
_SD_VAE = dict(latent_channels=4, block_out_channels=[128, 256, 512, 512], layers_per_block=2, norm_num_groups=32)
_UNET_SD = dict(in_channels=4, out_channels=4, block_out_channels=[320, 640, 1280, 1280], layers_per_block=2,
                down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                  "DownBlock2D"],
                up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
                norm_num_groups=32)
_ARCH = "diffusers UNet2DConditionModel + AutoencoderKL + transformers CLIPTextModel"
_TEST = "tests/model_zoo/test_stable_diffusion_pipeline.py::test_sd_pipeline_matches_diffusers"
_COMMON = dict(category="generation", family="stable_diffusion", pipeline="render", status="supported",
               boost_classes=("UNet2DConditionModel", "AutoencoderKL"), test=_TEST,
               converter=dict(frontend="HF (diffusers pipeline directory)", precision="fp32, bf16, int8 or int4 "
                              "UNet and text-encoder weights (the VAE float32)"))

ENTRIES = [
    Entry(name="stable-diffusion-v1-5", hub_id="stable-diffusion-v1-5/stable-diffusion-v1-5", architecture=_ARCH,
          config=dict(_parameters="0.86B UNet",
                      unet=dict(_UNET_SD, sample_size=64, cross_attention_dim=768, attention_head_dim=8),
                      vae=dict(_SD_VAE, scaling_factor=0.18215), text_encoder=_CLIP_L_TEXT,
                      scheduler=dict(prediction_type="epsilon")),
          config_source=("unet: the SD 1.x UNet2DConditionModel config.json as quoted by public loaders (sample_size "
                         "64, cross_attention_dim 768, attention_head_dim 8); VAE: the SD AutoencoderKL config "
                         "(scaling_factor 0.18215 is also diffusers' AutoencoderKL default); text encoder: "
                         "openai/clip-vit-large-patch14's text config; sizes from the Stable Diffusion v1 model card. "
                         "The repo is the stable-diffusion-v1-5 org mirror of the withdrawn runwayml one. " + _HUB),
          graphs=("text_encoder", "unet", "vae_decoder"),
          **_COMMON),
    Entry(name="stable-diffusion-2-1", hub_id="stabilityai/stable-diffusion-2-1", architecture=_ARCH,
          config=dict(_parameters="0.87B UNet",
                      unet=dict(_UNET_SD, sample_size=96, cross_attention_dim=1024, attention_head_dim=[5, 10, 20, 20],
                                use_linear_projection=True, upcast_attention=True),
                      vae=dict(_SD_VAE, scaling_factor=0.18215),
                      text_encoder=dict(model_type="clip_text_model", hidden_size=1024, num_hidden_layers=23,
                                        max_position_embeddings=77, vocab_size=49408),
                      scheduler=dict(prediction_type="v_prediction")),
          config_source=("unet: the SD 2.x 768-v UNet2DConditionModel config as transcribed in kohya-ss sd-scripts "
                         "(attention_head_dim [5, 10, 20, 20], cross_attention_dim 1024, sample_size 96, linear "
                         "projection, upcast attention); text encoder: OpenCLIP ViT-H/14 text tower as diffusers "
                         "stores "
                         "it (hidden 1024, 23 of its 24 layers; heads and MLP width left out); v-prediction per the "
                         "model card; VAE as SD 1.5's (scaling_factor 0.18215); 865M UNet per the SD 2 model card. "
                         + _HUB),
          graphs=("text_encoder", "unet", "vae_decoder"),
          **_COMMON),
    Entry(name="stable-diffusion-xl-base-1.0", hub_id="stabilityai/stable-diffusion-xl-base-1.0",
          architecture=_ARCH + " + CLIPTextModelWithProjection",
          config=dict(_parameters="3.5B (2.6B UNet)",
                      unet=dict(in_channels=4, out_channels=4, block_out_channels=[320, 640, 1280], layers_per_block=2,
                                down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
                                up_block_types=["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
                                transformer_layers_per_block=[1, 2, 10], attention_head_dim=[5, 10, 20],
                                cross_attention_dim=2048, use_linear_projection=True, addition_embed_type="text_time",
                                addition_time_embed_dim=256, projection_class_embeddings_input_dim=2816,
                                sample_size=128, norm_num_groups=32),
                      vae=dict(_SD_VAE, sample_size=1024, scaling_factor=0.13025),
                      text_encoder=_CLIP_L_TEXT,
                      text_encoder_2=dict(model_type="clip_text_model", hidden_size=1280, num_hidden_layers=32,
                                          num_attention_heads=20, intermediate_size=5120, max_position_embeddings=77,
                                          vocab_size=49408, projection_dim=1280)),
          config_source=("unet, vae and text_encoder_2: stabilityai/stable-diffusion-xl-base-1.0's unet/, vae/ and "
                         "text_encoder_2/config.json as quoted verbatim by public offline setups; text_encoder: "
                         "openai/clip-vit-large-patch14's text config (768, vocab 49408 as those setups check); sizes "
                         "from the SDXL report (2.6B UNet) and model card (3.5B base). " + _HUB),
          graphs=("text_encoder", "text_encoder_2", "unet", "vae_decoder"),
          **_COMMON),
]

# diffusers components carry no model_type: their config's _class_name picks the builder
GRAPH_BUILDERS = {"UNet2DConditionModel": build_unet_graph}
