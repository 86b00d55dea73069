"""FLUX.1 (Black Forest Labs): a 12B rectified-flow transformer (diffusers FluxTransformer2DModel: 19 dual-stream MMDiT
blocks then 38 single-stream blocks, 3-axis RoPE, 2x2 latent packing into 64 channels), T5-v1.1-XXL for the token
context, CLIP-L's pooled embedding for modulation, and a 16-channel AutoencoderKL. FLUX.1-dev is guidance-distilled:
the guidance scale enters as an embedding (guidance_embeds), one transformer pass per step, no CFG batch.

On the runtime (converted with `python -m model_zoo convert FLUX.1-dev`, run by lite.diffusion.flux): the CLIP-L
text tower (clip_text_graph.py), the T5 encoder (t5_graph.py), the transformer (flux_graph.py, one image size and
text length) and the AutoencoderKL decoder (vae_kl_graph.py), proved against diffusers' FluxPipeline in
tests/model_zoo/test_flux_pipeline.py. In PyTorch, lite_boost's ParallelManager runs the transformer with Ulysses
over its joint text + image attention (lite_boost/models/flux.py); the AutoencoderKL decodes whole on each rank."""
from model_zoo.generation.flux_graph import build_flux_graph
from model_zoo.registry import Entry

_SOURCE = ("transformer: FLUX.1-dev's transformer/config.json as quoted verbatim by public loaders (diffusers "
           "FluxTransformer2DModel defaults except guidance_embeds, which is true for dev); VAE: the FLUX.1 "
           "vae/config.json as quoted by the same loaders; text encoders: google/t5-v1_1-xxl's config.json (encoder "
           "stack only) and openai/clip-vit-large-patch14's text config, as published; 12B from the model card. The "
           "Hub is not reachable from this machine")

ENTRIES = [
    Entry(name="FLUX.1-dev", category="generation", family="flux", hub_id="black-forest-labs/FLUX.1-dev",
          architecture="diffusers FluxTransformer2DModel + AutoencoderKL + transformers T5EncoderModel + CLIPTextModel",
          config=dict(_parameters="12B",
                      transformer=dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38,
                                       attention_head_dim=128, num_attention_heads=24, hidden_size=24 * 128,
                                       joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                                       axes_dims_rope=[16, 56, 56]),
                      vae=dict(latent_channels=16, block_out_channels=[128, 256, 512, 512], layers_per_block=2,
                               norm_num_groups=32, scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                               use_post_quant_conv=False),
                      text_encoder=dict(model_type="clip_text_model", hidden_size=768, num_hidden_layers=12,
                                        num_attention_heads=12, intermediate_size=3072, max_position_embeddings=77,
                                        vocab_size=49408),
                      text_encoder_2=dict(model_type="t5", d_model=4096, d_ff=10240, d_kv=64, num_heads=64,
                                          num_layers=24, vocab_size=32128, feed_forward_proj="gated-gelu")),
          config_source=_SOURCE, graphs=("text_encoder", "text_encoder_2", "dit", "vae_decoder"), pipeline="render",
          status="supported", test="tests/model_zoo/test_flux_pipeline.py::test_flux_pipeline_matches_diffusers",
          boost_classes=("FluxTransformer2DModel", "AutoencoderKL"),
          converter=dict(frontend="HF (diffusers pipeline directory)",
                         precision="fp32, bf16, int8 or int4 transformer and text-encoder weights; VAE float32")),
]

GRAPH_BUILDERS = {"FluxTransformer2DModel": build_flux_graph}
