"""`python -m model_zoo`: list / show the registry, convert a checkpoint of a registered model, run a converted one.

  python -m model_zoo list [--category C] [--status S]
  python -m model_zoo show NAME
  python -m model_zoo convert NAME --checkpoint PATH --output DIR [--precision fp32|bf16|fp16|int8|int4]
  python -m model_zoo run NAME --model DIR --prompt TEXT [--max-new-tokens N] [--document TEXT ...]
  python -m model_zoo convert Wan2.1-T2V-1.3B --checkpoint PIPELINE_DIR --output DIR [--frames 81 --height 480
                                                                                     --width 832]
  python -m model_zoo run Wan2.1-T2V-1.3B --model DIR --prompt TEXT --output video.gif [--steps 50 --seed 0]
  python -m model_zoo run "openpi π0.5" --model DIR --camera base.png [--camera wrist.png] --prompt TASK
                                        [--state 0.1,-0.2,...] [--steps 10 --seed 0]      (JSON: the action chunk)
  python -m model_zoo run OpenVLA --model DIR --camera frame.png --prompt TASK [--unnorm-key bridge_orig]
  python -m model_zoo docs [--check]      (writes docs/model_zoo.md from the registry)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from converter.ir import ConverterError

from .registry import CATEGORIES, STATUSES, Entry, entries, get

PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8", "int4": "int4",
              "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
# What a converted model directory carries besides its graph: what the engine and tokenizer read.
SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
              "merges.txt", "special_tokens_map.json", "chat_template.jinja", "added_tokens.json",
              "preprocessor_config.json", "video_preprocessor_config.json", "vocab.txt", "gliner_config.json")
MANIFEST = "model_zoo.json"


def table(rows: list[Entry]) -> str:
    head = ("name", "category", "size", "status", "pipeline")
    cells = [(e.name, e.category, e.parameters, e.status, e.pipeline) for e in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(head)]
    line = lambda c: "  ".join(str(x).ljust(w) for x, w in zip(c, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(c) for c in cells])


def show(e: Entry) -> str:
    lines = [f"{e.name}  ({e.category}, {e.status})", f"  family:       {e.family}",
             f"  architecture: {e.architecture}", f"  hub id:       {e.hub_id or '-'}",
             f"  model_type:   {e.model_type or '-'}", f"  graphs:       {', '.join(e.graphs)}",
             f"  pipeline:     {e.pipeline}", f"  converter:    {json.dumps(dict(e.converter)) if e.converter else '-'}"]
    if e.boost_classes:
        lines.append(f"  lite_boost:   {', '.join(e.boost_classes)} (ParallelManager)")
    lines.append(f"  test:         {e.test}" if e.status == "supported" else f"  missing:      {e.missing}")
    lines.append("  config:")
    lines += [f"    {k}: {v}" for k, v in e.config.items()]
    lines.append(f"  config source: {e.config_source}")
    return "\n".join(lines)


def _release_converter(module: str, name: str, takes_block_size: bool = True):
    """The family's convert function (checkpoint, output, weight_format, block_size) -> the main graph's path,
    imported when used."""
    def load():
        import importlib
        fn = getattr(importlib.import_module(f".families.{module}", __package__), name)
        return fn if takes_block_size else (lambda checkpoint, output, fmt, _block: fn(checkpoint, output, fmt))
    return load


# families converted from their own layout into several graphs: Qwen3-TTS's talker / code predictor / codec, the
# release directories of FireRedASR, WeNet and CosyVoice
_PROJECT_CONVERTERS = {"qwen3_tts": _release_converter("qwen3_tts", "convert_qwen3_tts"),
                       "cosyvoice": _release_converter("cosyvoice", "convert_cosyvoice"),
                       "fireredasr": _release_converter("fireredasr", "convert_fireredasr"),
                       "wenet": _release_converter("wenet", "convert_wenet", takes_block_size=False)}


def convert(e: Entry, checkpoint: str, output: str, precision: str, block_size: int = 16,
            video: tuple[int | None, int | None, int | None] = (None, None, None),
            calibration: str | None = None) -> str:
    """The entry's graphs from `checkpoint` into the directory `output` (with the files its pipeline reads);
    returns the graph's path (render pipelines: the directory). `video`: (frames, height, width) a render
    pipeline's transformer is built for."""
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions

    if e.status != "supported":
        raise SystemExit(f"{e.name} is planned, not supported yet: {e.missing}")
    if e.pipeline in ("render", "edit"):
        from .generation.render_convert import convert_render_pipeline
        fmt = PRECISIONS.get(precision)
        if fmt is None:
            raise SystemExit(f"precision must be one of {', '.join(sorted(set(PRECISIONS)))}")
        frames, height, width = video
        convert_render_pipeline(checkpoint, output, fmt, frames, height, width)
        return output
    if e.family == "yolo":   # an ultralytics .pt, one graph for a fixed input size (lite.detection)
        from .families.yolo import convert_yolo
        fmt = PRECISIONS.get(precision)
        if fmt is None:
            raise SystemExit(f"precision must be one of {', '.join(sorted(set(PRECISIONS)))}")
        if video[0] is not None:
            raise SystemExit(f"{e.name} detects in images: --frames is for video models")
        path = convert_yolo(checkpoint, output, fmt, video[1], video[2], calibration)
        _write_manifest(output, {"name": e.name, "weight_format": fmt, "block_size": 0,
                                 "graph": os.path.basename(path)})
        return path
    if e.family in _PROJECT_CONVERTERS:   # several graphs from a project's own layout (lite.<family>)
        fmt = PRECISIONS.get(precision)
        if fmt is None:
            raise SystemExit(f"precision must be one of {', '.join(sorted(set(PRECISIONS)))}")
        path = _PROJECT_CONVERTERS[e.family]()(checkpoint, output, fmt, block_size)
        _write_manifest(output, {"name": e.name, "weight_format": fmt, "block_size": block_size,
                                 "graph": os.path.basename(path)})
        return path
    if e.graphs == ("image_encoder", "text_encoder"):   # CLIP: its two towers (lite.clip.CLIP)
        return _convert_towers(checkpoint, output, precision, e, {"image": "image_encoder", "text": "text_encoder"})
    if e.graphs == ("vision_encoder", "text_decoder_step"):   # BLIP: image side and text decoder (lite.blip)
        return _convert_towers(checkpoint, output, precision, e, {"vision": "vision", "text": "text"})
    if e.graphs == ("vision_language", "action_expert"):   # pi0.5: prefix and action expert (lite.embodied)
        return _convert_towers(checkpoint, output, precision, e, {"prefix": "vision_language",
                                                                  "action_expert": "action_expert"})
    heads = {("decoder_step",): "logits", ("vision_encoder", "decoder_step"): "logits",
             ("decoder_hidden",): "hidden", ("encoder",): "masked_lm",
             ("backbone_and_head",): "logits", ("gliner_scores",): "scores",
             ("decoder_projector",): "projector", ("audio_encoder", "decoder_step"): "logits",
             ("image_encoder",): "features"}
    if e.graphs not in heads:
        raise SystemExit(f"{e.name}: converting graphs {e.graphs} is not implemented")
    head = heads[e.graphs]
    if e.pipeline == "embed" and "vision_encoder" in e.graphs:   # Qwen3-VL-Embedding: the last-token state
        head = "hidden"
    fmt = PRECISIONS.get(precision)
    if fmt is None:
        raise SystemExit(f"precision must be one of {', '.join(sorted(set(PRECISIONS)))}")
    os.makedirs(output, exist_ok=True)
    suffix = "" if fmt == "float32" else f"_{fmt}"
    # the names TextEngine / TextEmbedder / Reranker / FillMask look for in a model directory
    if e.graphs == ("gliner_scores",):
        graph = os.path.join(output, f"gliner_scores{suffix}.ms")
    elif e.graphs in (("encoder",), ("backbone_and_head",), ("image_encoder",)):
        graph = os.path.join(output, f"encoder_{head}{suffix}.ms")
    else:
        graph = os.path.join(output, f"decoder{'' if head == 'logits' else '_' + head}_b{block_size}{suffix}.ms")
    Converter().convert(FmkType.HF, checkpoint, graph, verify_build=False,
                        checkpoint_options=CheckpointOptions(weight_format=fmt, block_size=block_size,
                                                             head=None if head in ("logits", "scores") else head))
    if "vision_encoder" in e.graphs:   # the image tower for any image size (lite.qwen2_vl_image.VisionTower)
        Converter().convert(FmkType.HF, checkpoint, os.path.join(output, f"vision{suffix}.ms"), verify_build=False,
                            checkpoint_options=CheckpointOptions(weight_format=fmt, head="vision"))
    if "audio_encoder" in e.graphs:   # the audio encoder and projector (lite.qwen3_asr.Qwen3ASR)
        Converter().convert(FmkType.HF, checkpoint, os.path.join(output, f"audio{suffix}.ms"), verify_build=False,
                            checkpoint_options=CheckpointOptions(weight_format=fmt, head="audio"))
    _copy_side_files(checkpoint, output)
    if not any(os.path.isfile(os.path.join(output, n)) for n in ("config.json", "gliner_config.json")):
        # a GGUF carries its config inside
        from converter.frontends.checkpoint import open_checkpoint
        weights, config = open_checkpoint(checkpoint)
        weights.close()
        with open(os.path.join(output, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
    with open(os.path.join(output, MANIFEST), "w") as f:
        json.dump({"name": e.name, "weight_format": fmt, "block_size": block_size, "graph": os.path.basename(graph)},
                  f, indent=1)
    return graph


def _write_manifest(output: str, manifest: dict) -> None:
    tmp = os.path.join(output, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(output, MANIFEST))


def _copy_side_files(checkpoint: str, output: str) -> None:
    """The checkpoint's config, tokenizer and processor files beside the converted graphs."""
    source_dir = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(os.path.abspath(checkpoint))
    for name in SIDE_FILES:
        src = os.path.join(source_dir, name)
        if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(output, name)):
            shutil.copyfile(src, os.path.join(output, name))


def _convert_towers(checkpoint: str, output: str, precision: str, e: Entry, files: dict[str, str]) -> str:
    """A checkpoint of several graphs (CLIP's towers, BLIP's image side and decoder): head -> files[head][_fmt].ms in
    `output`."""
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    fmt = PRECISIONS.get(precision)
    if fmt is None:
        raise SystemExit(f"precision must be one of {', '.join(sorted(set(PRECISIONS)))}")
    os.makedirs(output, exist_ok=True)
    suffix = "" if fmt == "float32" else f"_{fmt}"
    for head, name in files.items():
        Converter().convert(FmkType.HF, checkpoint, os.path.join(output, f"{name}{suffix}.ms"),
                            verify_build=False, checkpoint_options=CheckpointOptions(weight_format=fmt, head=head))
    _copy_side_files(checkpoint, output)
    with open(os.path.join(output, MANIFEST), "w") as f:
        json.dump({"name": e.name, "weight_format": fmt, "block_size": 0,
                   "graph": f"{list(files.values())[-1]}{suffix}.ms"}, f, indent=1)
    return output


def act(e: Entry, model_dir: str, cameras: list[str] | None, task: str, state: str | None, seed: int = 0,
        steps: int | None = None, threads: int = 1, unnorm_key: str | None = None) -> str:
    """An act pipeline on a converted directory, as JSON. pi0.5: the action chunk ({"actions": [[...] per step]}) for
    the camera pictures, the task and the robot state (comma-separated, normalised to [-1, 1]). OpenVLA: one action
    ({"action": [...]}) for one picture and the instruction, in the units of the dataset `unnorm_key` names."""
    if e.status != "supported":
        raise SystemExit(f"{e.name}: the act pipeline is not implemented yet ({e.missing or 'planned'})")
    if not cameras:
        raise SystemExit(f"{e.name} acts on camera pictures: pass --camera (one per camera, repeatable)")
    from lite.checkpoint_graph import converted_weight_format
    from lite.embodied import OpenVLAPolicy, Pi05Policy
    weight_format = converted_weight_format(model_dir)
    if e.model_type == "openvla":
        if len(cameras) != 1:
            raise SystemExit(f"{e.name} sees one camera: pass one --camera")
        try:
            action = OpenVLAPolicy(model_dir, weight_format, threads).act(cameras[0], task, unnorm_key)
        except (ValueError, FileNotFoundError, OSError) as err:
            raise SystemExit(str(err)) from None
        return json.dumps({"action": [round(float(v), 6) for v in action]})
    try:
        values = None if state is None else [float(v) for v in state.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"--state must be comma-separated numbers, got {state!r}") from None
    try:
        policy = Pi05Policy(model_dir, weight_format, threads)
        actions = policy.act(cameras, task, values, seed=seed, steps=steps)
    except (ValueError, FileNotFoundError, OSError) as err:
        raise SystemExit(str(err)) from None
    return json.dumps({"actions": [[round(float(v), 6) for v in row] for row in actions]})


def render_video(e: Entry, model_dir: str, prompt: str, output: str, negative_prompt: str = "", steps: int = 50,
                 guidance_scale: float | None = None, seed: int = 0, threads: int = 1, image: str | None = None,
                 last_image: str | None = None, pose_video: str | None = None, face_video: str | None = None) -> str:
    """A render pipeline (text or image to video / image) on a converted directory; writes `output` and returns its
    path. `guidance_scale` None: the pipeline's own default (diffusers')."""
    from lite.diffusion.wan import WanTextToVideo, write_video
    with open(os.path.join(model_dir, MANIFEST)) as f:
        kind = json.load(f).get("pipeline")
    common = dict(steps=steps, seed=seed)
    if guidance_scale is not None:
        common["true_cfg_scale" if kind in ("QwenImagePipeline", "QwenImageEditPipeline") else "guidance_scale"] = \
            guidance_scale
    ti2v = kind == "WanPipeline" and bool(image) and os.path.isfile(os.path.join(model_dir, "vae_encoder_first.ms"))
    if kind == "WanImageToVideoPipeline" or ti2v:   # (Wan 2.2 TI2V: text to video, or from a first frame)
        from lite.diffusion.wan_i2v import WanImageToVideo
        if not image:
            raise SystemExit(f"{e.name} starts from an image: pass --image (a picture file)")
        video = WanImageToVideo(model_dir, threads=threads)(image, prompt, negative_prompt, last_image=last_image,
                                                            **common)
        return write_video(video[0], output)
    if kind == "Kandinsky5I2VPipeline":
        from lite.diffusion.kandinsky5 import Kandinsky5ImageToVideo
        if not image or last_image:
            raise SystemExit(f"{e.name} starts from one image: pass --image (a picture file), no --last-image")
        video = Kandinsky5ImageToVideo(model_dir, threads=threads)(image, prompt, negative_prompt or None, **common)
        return write_video(video[0], output)
    if kind == "WanAnimatePipeline":
        from lite.diffusion.wan_animate import WanAnimate, read_frames
        if not image or not pose_video or not face_video:
            raise SystemExit(f"{e.name} animates a character image: pass --image, --pose-video and --face-video")
        video = WanAnimate(model_dir, threads=threads)(image, read_frames(pose_video), read_frames(face_video),
                                                       prompt, negative_prompt, **common)
        return write_video(video[0], output)
    if kind == "Kandinsky5I2IPipeline":
        from lite.diffusion.kandinsky5 import Kandinsky5ImageToImage
        if not image or last_image:
            raise SystemExit(f"{e.name} edits one image: pass --image (a picture file), no --last-image")
        edited = Kandinsky5ImageToImage(model_dir, threads=threads)(image, prompt, negative_prompt or None, **common)
        return write_video(edited[:1], output)
    if kind == "QwenImageEditPipeline":
        from lite.diffusion.qwen_image_edit import QwenImageEdit
        if not image or last_image:
            raise SystemExit(f"{e.name} edits one image: pass --image (a picture file), no --last-image")
        edited = QwenImageEdit(model_dir, threads=threads)(image, prompt, negative_prompt or None, **common)
        return write_video(edited[:1], output)
    if image or last_image:
        raise SystemExit(f"{e.name} generates from text: it takes no --image")
    if kind == "QwenImagePipeline":
        from lite.diffusion.qwen_image import QwenImageTextToImage
        image = QwenImageTextToImage(model_dir, threads=threads)(prompt, negative_prompt or None, **common)
        return write_video(image[:1], output)
    if kind in ("StableDiffusionPipeline", "StableDiffusionXLPipeline"):
        from lite.diffusion.stable_diffusion import StableDiffusion
        image = StableDiffusion(model_dir, threads=threads)(prompt, negative_prompt or None, **common)
        return write_video(image[:1], output)
    if kind == "Kandinsky5T2IPipeline":
        from lite.diffusion.kandinsky5 import Kandinsky5TextToImage
        image = Kandinsky5TextToImage(model_dir, threads=threads)(prompt, negative_prompt or None, **common)
        return write_video(image[:1], output)
    if kind == "Kandinsky5T2VPipeline":
        from lite.diffusion.kandinsky5 import Kandinsky5TextToVideo
        video = Kandinsky5TextToVideo(model_dir, threads=threads)(prompt, negative_prompt or None, **common)
        return write_video(video[0], output)
    if kind == "FluxPipeline":
        from lite.diffusion.flux import FluxTextToImage
        if negative_prompt:
            raise SystemExit("FLUX.1-dev is guidance-distilled: it takes no negative prompt")
        image = FluxTextToImage(model_dir, threads=threads)(prompt, **common)
        return write_video(image[:1], output)
    if e.status != "supported":
        raise SystemExit(f"{e.name}: the render pipeline is not implemented yet ({e.missing})")
    video = WanTextToVideo(model_dir, threads=threads)(prompt, negative_prompt, **common)
    return write_video(video[0], output)


def run(e: Entry, model_dir: str, prompt: str, max_new_tokens: int, documents: list[str] | None = None,
        labels: list[str] | None = None, threshold: float | None = None, image: str | None = None,
        audio: str | None = None, language: str | None = None) -> str:
    """The entry's pipeline on a converted directory: chat (the reply), caption (the reply to the prompt about
    `image`), embed (the vector), rerank (a score per document for the prompt as query), ner (the entities of
    `labels` in the prompt, a JSON object a line), detect (the objects in `image`, a JSON object a line: box,
    score, class; `threshold` the confidence, default 0.25)."""
    if e.pipeline not in ("chat", "caption", "embed", "rerank", "fill-mask", "classify", "ner", "transcribe",
                          "detect") or e.status != "supported":
        raise SystemExit(f"{e.name}: the {e.pipeline} pipeline is not implemented yet ({e.missing or 'planned'})")
    from lite.llm import SamplingParams
    manifest = os.path.join(model_dir, MANIFEST)
    options = {}
    if os.path.isfile(manifest):
        with open(manifest) as f:
            m = json.load(f)
        options = {"weight_format": m["weight_format"], "block_size": m["block_size"]}
    if e.pipeline == "detect":
        from lite.detection import YoloDetector
        if not image:
            raise SystemExit(f"{e.name} detects objects in a picture: pass --image (a picture file)")
        try:
            detector = YoloDetector(model_dir, weight_format=options.get("weight_format"))
            found = detector([image], conf=0.25 if threshold is None else threshold)[0]
        except (ValueError, FileNotFoundError, OSError) as err:
            raise SystemExit(str(err)) from None
        return "\n".join(json.dumps(d.as_dict()) for d in found)
    if e.pipeline == "ner":
        from lite.span_ner import SpanNER
        if not labels:
            raise SystemExit("ner needs --label (one or more entity types)")
        found = SpanNER(model_dir, weight_format=options.get("weight_format", "float32")).predict_entities(
            prompt, labels, threshold=0.5 if threshold is None else threshold)
        return "\n".join(json.dumps(f) for f in found)
    if e.pipeline == "embed" and e.graphs == ("image_encoder",):   # DINOv3: the image's [CLS] feature
        from lite.encoder_pipelines import ImageEmbedder
        if not image:
            raise SystemExit(f"{e.name} embeds a picture: pass --image (a picture file)")
        try:
            vector = ImageEmbedder(model_dir, weight_format=options.get("weight_format", "float32")).embed([image])[0]
        except (ValueError, FileNotFoundError, OSError) as err:
            raise SystemExit(str(err)) from None
        return json.dumps([round(float(v), 6) for v in vector])
    if e.pipeline == "classify":
        from lite.encoder_pipelines import ImageClassifier
        best = ImageClassifier(model_dir, weight_format=options.get("weight_format", "float32"))([prompt])[0]
        return "\n".join(f"{p:.4f}\t{label}" for label, p in best)
    if e.pipeline == "fill-mask":
        from lite.encoder_pipelines import FillMask
        fill = FillMask(model_dir, weight_format=options.get("weight_format", "float32"))
        return "\n".join(" ".join(f"{t}:{p:.4f}" for t, p in best) for best in fill([prompt])[0])
    if e.pipeline == "transcribe" and e.family in ("fireredasr", "wenet"):
        from lite.fireredasr import FireRedASR
        from lite.wenet import WeNet
        if not audio:
            raise SystemExit(f"{e.name} transcribes speech: pass --audio (a PCM WAV file)")
        try:
            if e.family == "wenet":   # attention rescoring of the CTC 10-best
                return WeNet.from_pretrained(model_dir, weight_format=options.get("weight_format")).transcribe(
                    [audio])[0]
            asr = FireRedASR.from_pretrained(model_dir, weight_format=options.get("weight_format"))
            return asr.transcribe([audio], decode_max_len=max_new_tokens)[0]
        except (ValueError, FileNotFoundError) as err:
            raise SystemExit(str(err)) from None
    if e.pipeline == "transcribe":
        from lite.qwen3_asr import Qwen3ASR
        if not audio:
            raise SystemExit(f"{e.name} transcribes speech: pass --audio (a PCM WAV file)")
        try:
            result = Qwen3ASR.from_pretrained(model_dir, weight_format=options.get("weight_format", "float32")
                                              ).transcribe([audio], language=language, context=prompt or None,
                                                           max_new_tokens=max_new_tokens)[0]
        except (ValueError, FileNotFoundError) as err:
            raise SystemExit(str(err)) from None
        return json.dumps(result, ensure_ascii=False)
    if e.graphs == ("vision_encoder", "text_decoder_step"):   # BLIP
        from lite.blip import BlipCaptioner
        if not image:
            raise SystemExit(f"{e.name} captions a picture: pass --image (and --prompt to continue a text)")
        try:
            return BlipCaptioner(model_dir, weight_format=options.get("weight_format", "float32")).caption(
                image, prompt or None, max_new_tokens)
        except ValueError as err:
            raise SystemExit(str(err)) from None
    if e.model_type == "blip-2":   # no chat template: the image's rows, the tokenizer's bos, the optional prompt
        from lite.blip import Blip2Captioner
        if not image:
            raise SystemExit(f"{e.name} captions a picture: pass --image (and --prompt for a question)")
        try:
            return Blip2Captioner.from_pretrained(model_dir, **options).caption([image], prompt or None,
                                                                                 max_new_tokens)[0]
        except ValueError as err:
            raise SystemExit(str(err)) from None
    if e.graphs == ("image_encoder", "text_encoder"):
        return _run_clip(model_dir, options.get("weight_format", "float32"), prompt, labels, image)
    if not prompt and not ("vision_encoder" in e.graphs and e.pipeline in ("embed", "rerank") and image):
        raise SystemExit(f"{e.name}: the {e.pipeline} pipeline needs --prompt")
    if "vision_encoder" in e.graphs and e.pipeline in ("embed", "rerank"):   # Qwen3-VL-Embedding / -Reranker
        return _run_vl_retrieval(e, model_dir, options, prompt, documents, image)
    if e.pipeline == "embed":
        from lite.llm.retrieval import TextEmbedder
        vector = TextEmbedder.from_pretrained(model_dir, **options).embed([prompt])[0]
        return json.dumps([round(float(x), 6) for x in vector])
    if e.pipeline == "rerank" and e.graphs == ("decoder_projector",):
        from lite.llm.retrieval import ListwiseReranker
        if not documents:
            raise SystemExit("rerank needs --document (one or more)")
        ranked = ListwiseReranker.from_pretrained(model_dir, **options).rerank(prompt, documents)
        return "\n".join(f"{r['relevance_score']:.6f}\t{r['document']}" for r in ranked)
    if e.pipeline == "rerank":
        from lite.llm.retrieval import Reranker
        if not documents:
            raise SystemExit("rerank needs --document (one or more)")
        scores = Reranker.from_pretrained(model_dir, **options).score(prompt, documents)
        return "\n".join(f"{s:.6f}\t{d}" for s, d in zip(scores, documents))
    from lite.llm.text_engine import TextEngine
    engine = TextEngine.from_pretrained(model_dir, **options)
    messages = [{"role": "user", "content": prompt}]
    if e.pipeline == "caption":
        if not image:
            raise SystemExit(f"{e.name} answers about a picture: pass --image (a picture file)")
        messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}]
    out = engine.generate([messages], SamplingParams(max_new_tokens=max_new_tokens, temperature=0))
    return out[0].text


def speak(e: Entry, model_dir: str, text: str, output: str | None, language: str | None, speaker: str | None,
          instruct: str | None, seed: int, threads: int, reference_audio: str | None = None,
          reference_text: str | None = None) -> str:
    """Text to speech into a WAV file (Qwen3-TTS Base, CosyVoice: in the voice of `reference_audio`, CosyVoice
    zero-shot with its transcript `reference_text`); returns its path."""
    if e.status != "supported":
        raise SystemExit(f"{e.name}: the speak pipeline is not implemented yet ({e.missing})")
    if not text or not output or not output.endswith(".wav"):
        raise SystemExit("speak needs --prompt (the text) and --output (a .wav file)")
    from lite.audio import write_wav
    try:
        if e.family == "cosyvoice":
            from lite.cosyvoice import CosyVoice
            wave, rate = CosyVoice.from_pretrained(model_dir, threads=threads).speak(
                text, reference_audio=reference_audio, reference_text=reference_text, instruct=instruct, seed=seed)
        else:
            from lite.qwen3_tts import Qwen3TTS
            wave, rate = Qwen3TTS.from_pretrained(model_dir, threads=threads).speak(
                text, language=language or "auto", speaker=speaker, instruct=instruct, seed=seed,
                reference_audio=reference_audio, reference_text=reference_text)
    except (ValueError, FileNotFoundError, NotImplementedError) as err:
        raise SystemExit(str(err)) from None
    return write_wav(output, wave, rate)


def _run_clip(model_dir: str, weight_format: str, prompt: str | None, labels: list[str] | None,
              image: str | None) -> str:
    """CLIP: with --image and --label, zero-shot probabilities (--prompt the template, "{}" the label); with --image
    alone the image's embedding; else the prompt's."""
    from lite.clip import CLIP
    clip = CLIP(model_dir, weight_format=weight_format)
    try:
        if image and labels:
            template = prompt if prompt and "{}" in prompt else "a photo of a {}."
            return "\n".join(f"{p:.4f}\t{label}" for label, p in clip.classify(image, labels, template))
        if image:
            vector = clip.embed_images([image])[0]
        elif prompt:
            vector = clip.embed_texts([prompt])[0]
        else:
            raise SystemExit("CLIP embeds --prompt text or an --image (with --label: zero-shot classification)")
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return json.dumps([round(float(x), 6) for x in vector])


def _run_vl_retrieval(e: Entry, model_dir: str, options: dict, prompt: str, documents: list[str] | None,
                      image: str | None) -> str:
    """Qwen3-VL-Embedding: the vector of --prompt and / or --image; Qwen3-VL-Reranker: P(yes) of each --document for
    the query (--prompt and / or --image)."""
    from lite.llm.vl_retrieval import VLEmbedder, VLReranker
    query = {"text": prompt or None, "image": image}
    try:
        if e.pipeline == "embed":
            vector = VLEmbedder.from_pretrained(model_dir, **options).embed([query])[0]
            return json.dumps([round(float(x), 6) for x in vector])
        if not documents:
            raise SystemExit("rerank needs --document (one or more)")
        scores = VLReranker.from_pretrained(model_dir, **options).score(query, documents)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return "\n".join(f"{s:.6f}\t{d}" for s, d in zip(scores, documents))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model_zoo", description="The model registry.")
    sub = p.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="a table of the registered models")
    ls.add_argument("--category", choices=CATEGORIES)
    ls.add_argument("--status", choices=STATUSES)
    sh = sub.add_parser("show", help="one model's entry")
    sh.add_argument("name")
    cv = sub.add_parser("convert", help="convert a checkpoint of a registered model")
    cv.add_argument("name")
    cv.add_argument("--checkpoint", required=True, help="Hugging Face directory, state dict, .ckpt or .gguf")
    cv.add_argument("--output", required=True, help="directory for the converted model")
    cv.add_argument("--precision", default="fp32", help="fp32, bf16, fp16, int8 or int4 weights")
    cv.add_argument("--block-size", type=int, default=16)
    cv.add_argument("--frames", type=int, help="render: the video's frames (4k+1; default: the pipeline's, Wan 81, "
                    "Kandinsky 5 121)")
    cv.add_argument("--calibration", help="detect, --precision int8: a directory of pictures to calibrate on")
    cv.add_argument("--height", type=int, help="render: the output's height (default: the pipeline's; Wan 480)")
    cv.add_argument("--width", type=int, help="render: the output's width (default: the pipeline's; Wan 832)")
    rn = sub.add_parser("run", help="run a converted model's pipeline")
    rn.add_argument("name")
    rn.add_argument("--model", required=True, help="the directory `convert` wrote")
    rn.add_argument("--prompt", default="", help="the chat message, the text to embed, the rerank query, a text with "
                    "[MASK], an image file to classify, the text to find entities in, or CLIP's zero-shot template "
                    "('a photo of a {}.')")
    rn.add_argument("--document", action="append", help="rerank: a document to score (repeatable)")
    rn.add_argument("--label", action="append", help="ner: an entity type to look for; CLIP: a class for zero-shot "
                    "classification of --image (repeatable)")
    rn.add_argument("--threshold", type=float, help="ner: the score an entity needs (default 0.5); detect: the "
                    "confidence a detection needs (default 0.25)")
    rn.add_argument("--max-new-tokens", type=int, default=64)
    rn.add_argument("--output", help="render: the file to write (.gif, .png or .npy); speak: the .wav to write")
    rn.add_argument("--negative-prompt", default="", help="render: what the video should not show")
    rn.add_argument("--steps", type=int, help="render: denoising steps (default 50); act: flow-matching steps "
                    "(default: the model's)")
    rn.add_argument("--camera", action="append", help="act: a camera picture (repeatable, one per camera)")
    rn.add_argument("--state", help="act, pi0.5: the robot state, comma-separated, normalised to [-1, 1]")
    rn.add_argument("--unnorm-key", help="act, OpenVLA: the dataset whose action statistics un-normalise the action")
    rn.add_argument("--guidance-scale", type=float, help="render: classifier-free guidance (default: the "
                    "pipeline's: Wan 5, SD 7.5, FLUX 3.5, Qwen-Image 4, Kandinsky 5 image 3.5 / video 5)")
    rn.add_argument("--seed", type=int, default=0, help="render: the initial noise's seed")
    rn.add_argument("--threads", type=int, default=1, help="render: CPU threads")
    rn.add_argument("--image", help="render, image to video: the first frame; edit: the source image; caption: the "
                    "picture to ask about; CLIP: the picture to embed or classify (a picture file)")
    rn.add_argument("--audio", help="transcribe: the speech to transcribe (a PCM WAV file; --prompt gives context); "
                    "speak, Qwen3-TTS Base / CosyVoice: the reference voice to clone")
    rn.add_argument("--reference-text", help="speak, CosyVoice: what --audio says (zero-shot cloning; without "
                    "it, cross-lingual)")
    rn.add_argument("--language", help="transcribe: force the language (its name, e.g. English); speak: the "
                    "language to speak (default auto)")
    rn.add_argument("--speaker", help="speak: a CustomVoice model's preset speaker (e.g. vivian)")
    rn.add_argument("--instruct", help="speak: the voice's description (VoiceDesign) or a speaking style (CosyVoice: "
                    "e.g. 'Speak happily.')")
    rn.add_argument("--last-image", help="render, image to video: the last frame (models without a CLIP encoder)")
    rn.add_argument("--pose-video", help="render, Wan Animate: the pose video (a .gif or a folder of frames)")
    rn.add_argument("--face-video", help="render, Wan Animate: the face video (a .gif or a folder of frames)")
    dc = sub.add_parser("docs", help="write docs/model_zoo.md from the registry")
    dc.add_argument("--check", action="store_true", help="fail if the file is not current")
    args = p.parse_args(argv)
    try:
        if args.command == "list":
            rows = entries(args.category, args.status)
            print(table(rows))
            print(f"\n{len(rows)} models")
        elif args.command == "show":
            print(show(get(args.name)))
        elif args.command == "convert":
            print(convert(get(args.name), args.checkpoint, args.output, args.precision, args.block_size,
                          (args.frames, args.height, args.width), args.calibration))
        elif args.command == "run" and get(args.name).pipeline in ("render", "edit"):
            if not args.output or not args.prompt:
                raise SystemExit("render needs --prompt and --output (a .gif, .png or .npy file)")
            print(render_video(get(args.name), args.model, args.prompt, args.output, args.negative_prompt,
                               50 if args.steps is None else args.steps, args.guidance_scale, args.seed,
                               args.threads, args.image, args.last_image,
                               args.pose_video, args.face_video))
        elif args.command == "run" and get(args.name).pipeline == "act":
            print(act(get(args.name), args.model, args.camera, args.prompt, args.state, args.seed, args.steps,
                      args.threads, args.unnorm_key))
        elif args.command == "run" and get(args.name).pipeline == "speak":
            print(speak(get(args.name), args.model, args.prompt, args.output, args.language, args.speaker,
                        args.instruct, args.seed, args.threads, args.audio, args.reference_text))
        elif args.command == "run":
            print(run(get(args.name), args.model, args.prompt, args.max_new_tokens, args.document, args.label,
                      args.threshold, args.image, args.audio, args.language))
        elif args.command == "docs":
            from .docs import DOC_PATH, render
            text = render()
            if args.check:
                current = open(DOC_PATH).read() if os.path.isfile(DOC_PATH) else ""
                if current != text:
                    print(f"{DOC_PATH} is stale: run python -m model_zoo docs", file=sys.stderr)
                    return 1
                return 0
            tmp = DOC_PATH + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, DOC_PATH)
            print(DOC_PATH)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    except ConverterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
