"""Components that several generation rows share, with no registry row of their own: their checkpoint graph builders
serve those rows' graphs and any such checkpoint given to converter_lite --fmk=HF.

- T5 / UMT5 encoders (model_zoo/encoders/t5_graph.py): Wan's UMT5-XXL, FLUX's T5-XXL (the encoder stack only).
- CLIP text towers (model_zoo/encoders/clip_text_graph.py): SD 1.5's CLIP-L, SD 2.1's OpenCLIP-H, SDXL's pair, FLUX's
  pooled CLIP-L (model_type clip_text_model; CLIPTextModelWithProjection adds text_embeds).
- CLIP vision towers (model_zoo/encoders/clip_vision_graph.py): Wan 2.1 I2V's ViT-H image encoder (its penultimate
  hidden state; model_type clip_vision_model).
- The image VAE decoder (model_zoo/generation/vae_kl_graph.py): diffusers AutoencoderKL, SD's 4-channel and FLUX's
  16-channel (a diffusers component: keyed on its config's _class_name)."""
from model_zoo.encoders.clip_text_graph import build_clip_text_graph
from model_zoo.encoders.clip_vision_graph import build_clip_vision_graph
from model_zoo.encoders.t5_graph import build_t5_encoder_graph
from model_zoo.generation.vae_kl_graph import build_vae_kl_graph

GRAPH_BUILDERS = {"t5": build_t5_encoder_graph, "umt5": build_t5_encoder_graph,
                  "clip_text_model": build_clip_text_graph, "clip_vision_model": build_clip_vision_graph,
                  "AutoencoderKL": build_vae_kl_graph}
