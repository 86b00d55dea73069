"""Converting a diffusers text-to-video / text-to-image pipeline directory (model_index.json beside its component
folders) into a directory of runtime graphs and the files the render pipeline reads (lite.diffusion): per pipeline
class, which component becomes which graph, built for one output size."""
from __future__ import annotations

import json
import os
import shutil

from converter.frontends.checkpoint import _read_json   # a config file, or a clear ConverterError
from converter.ir import ConverterError

# pipeline class -> [(component folder, graph file, head)], and the side files
WAN_GRAPHS = [("text_encoder", "text_encoder.ms", None), ("transformer", "transformer.ms", None),
              ("transformer_2", "transformer_2.ms", None),   # Wan 2.2 A14B's low-noise expert, where present
              ("vae", "vae_decoder_first.ms", "vae_decoder_first"), ("vae", "vae_decoder.ms", "vae_decoder")]
WAN_I2V_GRAPHS = [("text_encoder", "text_encoder.ms", None),
                  ("image_encoder", "image_encoder.ms", "image_context"),   # Wan 2.1 I2V's CLIP; Wan 2.2 has none
                  ("transformer", "transformer.ms", None), ("transformer_2", "transformer_2.ms", None),
                  ("vae", "vae_encoder_first.ms", "vae_encoder_first"), ("vae", "vae_encoder.ms", "vae_encoder"),
                  ("vae", "vae_decoder_first.ms", "vae_decoder_first"), ("vae", "vae_decoder.ms", "vae_decoder")]
WAN_ANIMATE_GRAPHS = [("text_encoder", "text_encoder.ms", None), ("image_encoder", "image_encoder.ms", "image_context"),
                      ("transformer", "transformer.ms", None), ("transformer", "face_encoder.ms", "face_encoder"),
                      ("vae", "vae_encoder_first.ms", "vae_encoder_first"), ("vae", "vae_encoder.ms", "vae_encoder"),
                      ("vae", "vae_decoder_first.ms", "vae_decoder_first"), ("vae", "vae_decoder.ms", "vae_decoder")]
FLUX_GRAPHS = [("text_encoder", "text_encoder.ms", None), ("text_encoder_2", "text_encoder_2.ms", None),
               ("transformer", "transformer.ms", None), ("vae", "vae_decoder.ms", None)]
QWEN_IMAGE_GRAPHS = [("text_encoder", "text_encoder.ms", "hidden"), ("transformer", "transformer.ms", None),
                     ("vae", "vae_decoder_first.ms", "vae_decoder_first")]
QWEN_IMAGE_EDIT_GRAPHS = [("text_encoder", "text_encoder.ms", "hidden"), ("text_encoder", "vision_encoder.ms", "vision"),
                          ("transformer", "transformer.ms", None), ("vae", "vae_encoder_first.ms", "vae_encoder_first"),
                          ("vae", "vae_decoder_first.ms", "vae_decoder_first")]
EDIT_MAX_SEQUENCE_LENGTH = 1024   # the instruction tokens an edit's transformer takes beyond the image's
SD_GRAPHS = [("text_encoder", "text_encoder.ms", None), ("text_encoder_2", "text_encoder_2.ms", None),   # SDXL
             ("unet", "unet.ms", None), ("vae", "vae_decoder.ms", None)]
KANDINSKY5_T2I_GRAPHS = [("text_encoder", "text_encoder.ms", "hidden"), ("text_encoder_2", "text_encoder_2.ms", None),
                        ("transformer", "transformer.ms", None), ("vae", "vae_decoder.ms", None)]
KANDINSKY5_I2I_GRAPHS = KANDINSKY5_T2I_GRAPHS + [("text_encoder", "vision_encoder.ms", "vision"),
                                                 ("vae", "vae_encoder.ms", "vae_encoder")]
KANDINSKY5_T2V_GRAPHS = KANDINSKY5_T2I_GRAPHS[:3]   # + the HunyuanVideo VAE: a graph per temporal tile length
KANDINSKY5_I2V_GRAPHS = KANDINSKY5_T2V_GRAPHS + [("vae", "vae_encoder.ms", "vae_encoder")]   # (one frame)
OPTIONAL = {"transformer_2", "image_encoder", "text_encoder_2"}
PIPELINES = {"WanPipeline": WAN_GRAPHS, "WanImageToVideoPipeline": WAN_I2V_GRAPHS,
             "WanAnimatePipeline": WAN_ANIMATE_GRAPHS, "FluxPipeline": FLUX_GRAPHS, "QwenImagePipeline": QWEN_IMAGE_GRAPHS,
             "QwenImageEditPipeline": QWEN_IMAGE_EDIT_GRAPHS,
             "StableDiffusionPipeline": SD_GRAPHS, "StableDiffusionXLPipeline": SD_GRAPHS,
             "Kandinsky5T2IPipeline": KANDINSKY5_T2I_GRAPHS, "Kandinsky5I2IPipeline": KANDINSKY5_I2I_GRAPHS,
             "Kandinsky5T2VPipeline": KANDINSKY5_T2V_GRAPHS,
             "Kandinsky5I2VPipeline": KANDINSKY5_I2V_GRAPHS}
TOKENIZERS = {"WanPipeline": ("tokenizer",), "WanImageToVideoPipeline": ("tokenizer",),
              "WanAnimatePipeline": ("tokenizer",), "FluxPipeline": ("tokenizer", "tokenizer_2"),
              "QwenImagePipeline": ("tokenizer",), "QwenImageEditPipeline": ("tokenizer",),
              "StableDiffusionPipeline": ("tokenizer",),
              "StableDiffusionXLPipeline": ("tokenizer", "tokenizer_2"),
              "Kandinsky5T2IPipeline": ("tokenizer", "tokenizer_2"), "Kandinsky5I2IPipeline": ("tokenizer", "tokenizer_2"),
              "Kandinsky5T2VPipeline": ("tokenizer", "tokenizer_2"),
              "Kandinsky5I2VPipeline": ("tokenizer", "tokenizer_2")}
KANDINSKY5_VIDEO = {"Kandinsky5T2VPipeline", "Kandinsky5I2VPipeline"}
KANDINSKY5_IMAGE = {"Kandinsky5T2IPipeline", "Kandinsky5I2IPipeline"}
KANDINSKY5 = KANDINSKY5_IMAGE | KANDINSKY5_VIDEO
QWEN_IMAGE = {"QwenImagePipeline", "QwenImageEditPipeline"}
QWEN_TEXT = QWEN_IMAGE | KANDINSKY5   # text encoders that run in LLMEngine


def wan_latent_shape(vae_config: dict, frames: int, height: int, width: int) -> tuple[int, int, int]:
    """The latent (frames, height, width) of a video, with diffusers' Wan scale factors (and its frame rule)."""
    down = list(vae_config.get("temperal_downsample", [False, True, True]))
    temporal = 2 ** sum(bool(d) for d in down)
    spatial = 2 ** len(down) * int(vae_config.get("patch_size") or 1)   # Wan 2.2's VAE: 8 x 2 (patchified)
    if (frames - 1) % temporal or height % (2 * spatial) or width % (2 * spatial):
        raise ConverterError(f"a {frames}x{height}x{width} video: frames must be {temporal}k+1 and height / width "
                             f"multiples of {2 * spatial} (the VAE's {spatial}x and the DiT's 2x2 patches)")
    return (frames - 1) // temporal + 1, height // spatial, width // spatial


def video_latent_shape(vae_config: dict, frames: int, height: int, width: int) -> tuple[int, int, int]:
    """The latent (frames, height, width) of a video through the HunyuanVideo VAE (its compression ratios), with 2x2
    DiT patches."""
    temporal = int(vae_config.get("temporal_compression_ratio", 4))
    spatial = int(vae_config.get("spatial_compression_ratio", 8))
    if (frames - 1) % temporal or height % (2 * spatial) or width % (2 * spatial):
        raise ConverterError(f"a {frames}x{height}x{width} video: frames must be {temporal}k+1 and height / width "
                             f"multiples of {2 * spatial} (the VAE's {spatial}x and the DiT's 2x2 patches)")
    return (frames - 1) // temporal + 1, height // spatial, width // spatial


def image_latent_shape(scale: int, height: int, width: int) -> tuple[int, int, int]:
    """The latent (1, height, width) of an image through a VAE of `scale` x, then 2x2 packing."""
    if height % (2 * scale) or width % (2 * scale):
        raise ConverterError(f"a {height}x{width} image: height and width must be multiples of {2 * scale} (the "
                             f"VAE's {scale}x and the 2x2 latent packing)")
    return 1, height // scale, width // scale


def unet_latent_shape(vae_config: dict, unet_config: dict, height: int, width: int) -> tuple[int, int, int]:
    """The latent (1, height, width) of an image through the 2^(blocks - 1) x AutoencoderKL, checked against the
    UNet's downsamplers."""
    scale = 2 ** (len(vae_config.get("block_out_channels", [0] * 4)) - 1)
    halvings = len(unet_config.get("down_block_types", [0] * 4)) - 1
    step = scale * 2 ** halvings
    if height % step or width % step:
        raise ConverterError(f"a {height}x{width} image: height and width must be multiples of {step} (the VAE's "
                             f"{scale}x and the UNet's {halvings} downsamplers)")
    return 1, height // scale, width // scale


def default_size(kind: str, checkpoint: str, vae_config: dict) -> tuple[int, int]:
    """The size a pipeline renders when none is given: diffusers' defaults (SD: the UNet's sample_size x the VAE's
    scale; Wan 480 x 832; Kandinsky 5 video 512 x 768; FLUX / Qwen-Image / Kandinsky 5 image 1024 x 1024)."""
    if kind.startswith("StableDiffusion"):
        side = int(_read_json(os.path.join(checkpoint, "unet", "config.json")).get("sample_size", 64))
        side *= 2 ** (len(vae_config.get("block_out_channels", [0] * 4)) - 1)
        return side, side
    if kind in KANDINSKY5_VIDEO:
        return 512, 768
    if kind == "WanAnimatePipeline":
        return 720, 1280
    return (480, 832) if kind.startswith("Wan") else (1024, 1024)


def default_frames(kind: str) -> int:
    """diffusers' default video length: Wan 81 (Animate: a segment of 77), Kandinsky 5 Video 121 (5 s at 24 fps);
    images 1."""
    if kind == "WanAnimatePipeline":
        return 77
    return 121 if kind in KANDINSKY5_VIDEO else 81 if kind.startswith("Wan") else 1


def clip_max_length(checkpoint: str, tokenizer: str, encoder: str) -> int:
    """The tokens a CLIP prompt is truncated (SD: padded) to: the tokenizer's model_max_length (77), never past the
    encoder's position table."""
    tok_cfg = os.path.join(checkpoint, tokenizer, "tokenizer_config.json")
    positions = int(_read_json(os.path.join(checkpoint, encoder, "config.json")).get("max_position_embeddings", 77))
    limit = _read_json(tok_cfg).get("model_max_length", 77) if os.path.isfile(tok_cfg) else 77
    return int(min(float(limit), positions))


def _edit_vision(checkpoint: str, folder: str, height: int, width: int) -> dict:
    """A source image as the Qwen2-VL processor (in `folder`) cuts it: its preprocessor config, the patch grid of a
    height x width image and the image tokens after the 2x2 merge."""
    from lite.qwen2_vl_image import image_grid
    processor = os.path.join(checkpoint, folder, "preprocessor_config.json")
    if not os.path.isfile(processor):
        raise ConverterError(f"{processor} is missing: the vision tower's grid and preprocessing are read from it")
    config = _read_json(processor)
    grid = image_grid(height, width, config)
    merge = int(config.get("merge_size", 2))
    return {"processor": processor, "grid": grid, "tokens": grid[0] * grid[1] * grid[2] // merge ** 2}


def convert_render_pipeline(checkpoint: str, output: str, weight_format: str = "float32", frames: int | None = None,
                            height: int | None = None, width: int | None = None,
                            max_sequence_length: int = 512) -> dict:
    """Writes the graphs and side files into `output`; returns the manifest it writes (model_zoo.json). `frames`,
    `height` / `width`: the output size (default: the pipeline's, default_frames / default_size)."""
    from .hunyuan_vae_graph import temporal_tiles
    from .kandinsky5_graph import video_rope_scale
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions

    index = _read_json(os.path.join(checkpoint, "model_index.json"))
    kind = index.get("_class_name")
    if kind not in PIPELINES:
        raise ConverterError(f"pipeline {kind!r} has no render conversion (built: {', '.join(sorted(PIPELINES))})")
    vae_config = _read_json(os.path.join(checkpoint, "vae", "config.json"))
    if height is None or width is None:
        default_h, default_w = default_size(kind, checkpoint, vae_config)
        height, width = height or default_h, width or default_w
    frames = frames or default_frames(kind)
    if kind.startswith("StableDiffusion"):
        latent = unet_latent_shape(vae_config, _read_json(os.path.join(checkpoint, "unet", "config.json")),
                                   height, width)
    elif kind in KANDINSKY5_VIDEO:
        latent = video_latent_shape(vae_config, frames, height, width)
    elif kind == "FluxPipeline" or kind in KANDINSKY5_IMAGE:   # AutoencoderKL: 2^(blocks - 1) x
        latent = image_latent_shape(2 ** (len(vae_config.get("block_out_channels", [0] * 4)) - 1), height, width)
    elif kind in QWEN_IMAGE:   # single frames of the Wan-style VAE: 2^len(temperal_downsample) x
        latent = image_latent_shape(2 ** len(vae_config.get("temperal_downsample", [0] * 3)), height, width)
    else:
        latent = wan_latent_shape(vae_config, frames, height, width)
    if kind == "WanAnimatePipeline":   # a segment's latents follow the reference image's latent frame
        latent = (latent[0] + 1, *latent[1:])
    # Wan 2.2 TI2V (expand_timesteps): a timestep per token, and the VAE encoder for an optional first frame
    expand = kind == "WanPipeline" and bool(index.get("expand_timesteps"))
    pipeline = PIPELINES[kind] + ([g for g in WAN_I2V_GRAPHS if g[2] and g[2].startswith("vae_encoder")]
                                  if expand else [])
    graphs = [(c, g, h) for c, g, h in pipeline
              if c not in OPTIONAL or os.path.isfile(os.path.join(checkpoint, c, "config.json"))]
    tiles = temporal_tiles(latent[0]) if kind in KANDINSKY5_VIDEO else []
    graphs += [("vae", f"vae_decoder_f{n}.ms", None) for n in sorted({n for _, n in tiles})]
    # the latent each graph is built for: Kandinsky's VAE graphs take a tile's frames (the encoder one image)
    shapes = {f"vae_decoder_f{n}.ms": (n, *latent[1:]) for _, n in tiles}
    if kind in KANDINSKY5_VIDEO:
        shapes["vae_encoder.ms"] = (1, *latent[1:])
    processor = None
    if any(c == "image_encoder" for c, _, _ in graphs):   # CLIP's resize / crop / normalisation
        processor = os.path.join(checkpoint, "image_processor", "preprocessor_config.json")
        if not os.path.isfile(processor):
            raise ConverterError(f"{processor} is missing: the image encoder's preprocessing is read from it")
    vision = {}
    if kind == "QwenImageEditPipeline":   # the source image at the output size: its patch grid and latent
        vision = _edit_vision(checkpoint, "processor", height, width)
    elif kind == "Kandinsky5I2IPipeline":   # the source image at the output size, prompted at half its size
        vision = _edit_vision(checkpoint, "tokenizer", height // 2, width // 2)
    if vision:
        shapes["vision_encoder.ms"] = vision["grid"]
    os.makedirs(output, exist_ok=True)
    for component, graph, head in graphs:
        # the VAE keeps float32 (small beside the rest, and its output is the picture)
        fmt = weight_format if component != "vae" else "float32"
        text_len = max_sequence_length if kind == "FluxPipeline" and component == "transformer" else None
        if kind == "QwenImageEditPipeline" and component == "transformer":   # the image's tokens, the instruction's
            text_len = vision["tokens"] + EDIT_MAX_SEQUENCE_LENGTH
        shape = shapes.get(graph, latent)
        rope_scale = video_rope_scale(height, width) if kind in KANDINSKY5_VIDEO and \
            component == "transformer" else None
        Converter().convert(FmkType.HF, os.path.join(checkpoint, component), os.path.join(output, graph),
                            verify_build=False, checkpoint_options=CheckpointOptions(
                                weight_format=fmt, head=head, latent_shape=shape, text_len=text_len,
                                token_timesteps=expand and component.startswith("transformer"),
                                rope_scale=rope_scale,
                                condition_shape=latent if kind == "QwenImageEditPipeline" and
                                component == "transformer" else None))
    for folder in TOKENIZERS[kind]:
        tokenizer = os.path.join(checkpoint, folder, "tokenizer.json")
        if not os.path.isfile(tokenizer):
            raise ConverterError(f"{tokenizer} is missing: the render pipeline reads the tokenizer's fast form")
        os.makedirs(os.path.join(output, folder), exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.isfile(os.path.join(checkpoint, folder, name)):
                shutil.copyfile(os.path.join(checkpoint, folder, name), os.path.join(output, folder, name))
    shutil.copyfile(os.path.join(checkpoint, "scheduler", "scheduler_config.json"),
                    os.path.join(output, "scheduler_config.json"))
    shutil.copyfile(os.path.join(checkpoint, "vae", "config.json"), os.path.join(output, "vae_config.json"))
    shutil.copyfile(os.path.join(checkpoint, "model_index.json"), os.path.join(output, "model_index.json"))
    if processor:
        shutil.copyfile(processor, os.path.join(output, "image_processor_config.json"))
    if vision:
        shutil.copyfile(vision["processor"], os.path.join(output, "vision_processor_config.json"))
    if kind in QWEN_TEXT:   # the text encoder runs in LLMEngine, which reads its config
        shutil.copyfile(os.path.join(checkpoint, "text_encoder", "config.json"),
                        os.path.join(output, "text_encoder_config.json"))
    manifest = {"pipeline": kind, "weight_format": weight_format, "frames": frames if default_frames(kind) > 1 else 1,
                "height": height, "width": width, "latent_shape": list(latent),
                "graphs": [g for _, g, _ in graphs]}
    if kind == "FluxPipeline":
        manifest["max_sequence_length"] = max_sequence_length
        manifest["clip_max_length"] = clip_max_length(checkpoint, "tokenizer", "text_encoder")
    if kind in KANDINSKY5:
        manifest["clip_max_length"] = clip_max_length(checkpoint, "tokenizer_2", "text_encoder_2")
        manifest["latent_channels"] = int(_read_json(os.path.join(checkpoint, "transformer", "config.json"))
                                          .get("in_visual_dim", 4))
    if tiles:
        manifest["vae_tiles"] = [list(t) for t in tiles]
    if vision:
        manifest["vision_grid"], manifest["vision_tokens"] = list(vision["grid"]), vision["tokens"]
    if kind.startswith("StableDiffusion"):   # the length SD pads every prompt to, per tokenizer
        manifest["clip_max_length"] = {folder: clip_max_length(checkpoint, folder, folder.replace("tokenizer",
                                                                                                "text_encoder"))
                                       for folder in TOKENIZERS[kind]}
    with open(os.path.join(output, "model_zoo.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest
