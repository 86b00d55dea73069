"""`TextEngine`: text in, text out on an LLMEngine (tokeniser, chat template, incremental detokeniser, stop strings,
streaming, per-request timings), from a Hugging Face checkpoint directory."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Sequence

from .detokenizer import IncrementalDetokenizer, StopStrings
from .engine import LLMEngine
from .sampling import SamplingParams


@dataclass
class GenerationOutput:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None
    prompt_tokens: int
    time_to_first_token: float | None = None   # seconds
    tokens_per_second: float | None = None     # generated tokens after the first, per second
    # SamplingParams.n > 1: every choice's output (the first one is also this output's own fields)
    choices: list["GenerationOutput"] = field(default_factory=list)


@dataclass
class _TextState:
    detok: IncrementalDetokenizer
    stops: StopStrings
    text: str = ""
    started: float = field(default_factory=time.perf_counter)
    first: float | None = None
    emitted: int = 0


# Vision-language checkpoints whose chats take image parts (the tower each gets: TextEngine._vision_tower).
VISION_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava", "llava_next", "internvl", "internvl_chat",
                      "blip-2")


class TextEngine:
    """Text in, text out, on an LLMEngine: tokenisation, chat templates, incremental detokenisation, stop strings,
    streaming and per-request timings. `from_pretrained(dir)` takes a Hugging Face checkpoint directory (config.json,
    safetensors, tokenizer files); the step graph is converted on first use and cached there as decoder.ms."""

    def __init__(self, engine: LLMEngine, tokenizer, vision=None, config: dict | None = None):
        """`vision`: a vision-language model's image tower (lite.qwen2_vl_image.VisionTower,
        lite.llava_image.LlavaVision, lite.internvl_image.InternVLVision, lite.blip.Blip2Vision): chat messages may
        then hold image parts; `config`: the model's config.json (its image token ids)."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.vision = vision
        self.config = dict(config or {})
        self.states: dict[str, _TextState] = {}
        self._ids = 0

    @classmethod
    def from_pretrained(cls, model_dir: str, block_size: int | None = None, weight_format: str | None = None,
                        kv_cache_dtype: str = "float32", dynamic_quant: bool | None = None,
                        precision_mode: str | None = None, **engine_args) -> "TextEngine":
        """`weight_format`: how the converted step graph stores its matrices (float32, bfloat16, float16, int8 per
        output column, int4 in blocks of 32 rows); `kv_cache_dtype`: float32, bfloat16, float16 or int8 (a scale
        per row and head) keys and values.
        Converted on first use and cached beside the checkpoint, one file per choice. `dynamic_quant`: int8/int4
        products on activations quantised to int8 on the fly (LLMEngine); by default on for int8 and int4 weights, as
        llama.cpp, ONNX Runtime GenAI and OpenVINO GenAI do. `precision_mode`: by default "preferred_bf16" for bfloat16
        weights (activations rounded to bf16 for the products, as those engines do) and for int8 / int4 weights under
        dynamic_quant (their products' activations are int8 codes already; attention's products then take bf16
        operands too where the CPU has bf16 dot products, as OpenVINO's default inference precision does on such
        CPUs), else "enforce_fp32"."""
        from model_zoo.language.decoder_graph import KV_CACHE_DTYPES, WEIGHT_FORMATS, write_decoder

        from .tokenizer import ChatTokenizer
        # A directory `python -m model_zoo convert` wrote says how it was converted (model_zoo.json); else float32
        # weights in blocks of 16 tokens, converted here from the checkpoint.
        manifest = os.path.join(model_dir, "model_zoo.json")
        if os.path.isfile(manifest):
            with open(manifest) as f:
                written = json.load(f)
            weight_format = weight_format or written.get("weight_format")
            block_size = block_size or written.get("block_size")
        weight_format, block_size = weight_format or "float32", block_size or 16
        if weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, not {weight_format!r}")
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not {kv_cache_dtype!r}")
        suffix = ("" if weight_format == "float32" else f"_{weight_format}") + \
                 ("" if kv_cache_dtype == "float32" else f"_kv_{kv_cache_dtype}")
        path = os.path.join(model_dir, f"decoder_b{block_size}{suffix}.ms")
        if not os.path.isfile(path):   # the checkpoint's tensors are read one at a time as they are written
            from converter.frontends.checkpoint import open_checkpoint
            with open_checkpoint(model_dir)[0] as weights:
                write_decoder(config, weights, path, block_size=block_size, weight_format=weight_format,
                              kv_cache_dtype=kv_cache_dtype)
        tokenizer = ChatTokenizer(model_dir)
        vision = None
        if config.get("vision_config") and config.get("model_type") in VISION_MODEL_TYPES:
            vision = cls._vision_tower(model_dir, config, weight_format, engine_args.get("threads", 1))
        if dynamic_quant is None:
            dynamic_quant = weight_format in ("int8", "int4")
        if precision_mode is None:
            reduced = weight_format == "bfloat16" or (weight_format in ("int8", "int4") and dynamic_quant)
            precision_mode = "preferred_bf16" if reduced else "enforce_fp32"
        engine = LLMEngine(path, config, block_size=block_size, eos_token_ids=tokenizer.eos_token_ids,
                           dynamic_quant=dynamic_quant, precision_mode=precision_mode, **engine_args)
        return cls(engine, tokenizer, vision, config)

    @staticmethod
    def _vision_tower(model_dir: str, config: dict, weight_format: str, threads: int):
        """The checkpoint's vision tower for any image size (vision[_format].ms, converted on first use) and its
        processor settings (preprocessor_config.json)."""
        path = os.path.join(model_dir, "vision.ms" if weight_format == "float32" else f"vision_{weight_format}.ms")
        if not os.path.isfile(path):
            from converter.api import Converter, FmkType
            from converter.frontends.hf_frontend import CheckpointOptions
            Converter().convert(FmkType.HF, model_dir, path, verify_build=False,
                                checkpoint_options=CheckpointOptions(head="vision", weight_format=weight_format))
        processor = os.path.join(model_dir, "preprocessor_config.json")
        settings = {}
        if os.path.isfile(processor):
            with open(processor) as f:
                settings = json.load(f)
        if config.get("model_type") == "internvl":
            from ..internvl_image import InternVLVision
            return InternVLVision(path, config, settings, threads, model_dir)
        if config.get("model_type") == "internvl_chat":   # the original project's layout (InternVL3.5-Flash)
            from ..internvl_image import InternVLFlashVision
            return InternVLFlashVision(path, config, settings, threads, model_dir)
        if config.get("model_type") == "blip-2":
            from ..blip import Blip2Vision
            return Blip2Vision(path, config, settings, threads)
        if config.get("model_type") in ("llava", "llava_next"):
            from ..llava_image import LlavaVision
            return LlavaVision(path, config, settings, threads)
        from ..qwen2_vl_image import VisionTower
        tower = VisionTower(path, config, settings, threads)
        video = os.path.join(model_dir, "video_preprocessor_config.json")
        if os.path.isfile(video):
            with open(video) as f:
                tower.video_config = json.load(f)
        return tower

    def add(self, prompt: str | list[dict] | Sequence[int], params: SamplingParams | None = None,
            seed_offset: int = 0, embeddings=None) -> str:
        """Queues one sequence for a prompt (text, chat messages or token ids); returns its request id. `seed_offset`:
        which of a prompt's n choices this is (its seeded sampling draws from seed + seed_offset). `embeddings`: rows
        replacing a token-id prompt's placeholder embeddings (lite.llm.multimodal.PromptEmbeddings; an ASR model's
        audio rows)."""
        return self._queue(*self.encode_prompt(prompt, embeddings), params or SamplingParams(), seed_offset)

    def encode_prompt(self, prompt: str | list[dict] | Sequence[int], embeddings=None):
        """(token ids, PromptEmbeddings or None) of a prompt: text, chat messages (their images and videos through
        the vision tower) or token ids with optional `embeddings`."""
        if embeddings is not None and (isinstance(prompt, str) or (prompt and isinstance(prompt[0], dict))):
            raise ValueError("embeddings go with a token-id prompt (chat messages carry their images as parts)")
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt), None
        if not (prompt and isinstance(prompt[0], dict)):
            return [int(t) for t in prompt], embeddings
        from .multimodal import Video, expand_image_prompt, split_images
        messages, images = split_images(list(prompt))
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        if self.vision is not None and hasattr(self.vision, "video_prompt"):   # Qwen3-VL's video timestamps
            text = self.vision.video_prompt(text, [m for m in images if isinstance(m, Video)])
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if not images:
            return ids, None
        if self.vision is None:
            raise ValueError("this model reads no images (a text-only language model)")
        image_token = self.config.get("image_token_id", self.config.get("image_token_index",
                                                                        getattr(self.vision, "image_token_id", None)))
        if image_token is None:
            raise ValueError("the model's config names no image token (image_token_id)")
        return expand_image_prompt(ids, images, self.vision, int(image_token), self.config.get("video_token_id"))

    def _queue(self, ids: list[int], embeddings, params: SamplingParams, seed_offset: int) -> str:
        rid = f"req{self._ids}"
        self._ids += 1
        self.engine.add_request(rid, ids, params, seed_offset, embeddings=embeddings)
        self.states[rid] = _TextState(IncrementalDetokenizer(self.tokenizer, ids), StopStrings(params.stop))
        return rid

    def advance(self) -> dict[str, str]:
        """One engine step; the new text of each request that got a token."""
        self.engine.step()
        deltas = {}
        for c in self.engine.last_output.chunks:
            r, st = c.request, self.states.get(c.request.request_id)
            if st is None or len(r.output_ids) <= st.emitted:
                continue
            if st.first is None:
                st.first = time.perf_counter()
            new = r.output_ids[st.emitted:]
            st.emitted = len(r.output_ids)
            text = "".join(st.detok.add(t) for t in new if t not in self.engine.eos_token_ids)
            safe, stopped = st.stops.feed(text)
            if stopped:
                self.engine.scheduler.finish(r.request_id, "stop")
            elif r.finish_reason is not None:
                safe += st.stops.flush()
            st.text += safe
            deltas[r.request_id] = safe
        return deltas

    def output(self, rid: str) -> GenerationOutput:
        r, st = self.engine.scheduler.requests[rid], self.states[rid]
        tps = None
        if st.first is not None and len(r.output_ids) > 1:
            tps = (len(r.output_ids) - 1) / max(time.perf_counter() - st.first, 1e-9)
        return GenerationOutput(rid, st.text, list(r.output_ids), r.finish_reason, len(r.prompt_ids),
                                None if st.first is None else st.first - st.started, tps)

    def add_choices(self, prompt, params: SamplingParams | None = None) -> list[str]:
        """Queues params.n sequences for one prompt (choice i sampled from seed + i; the prompt, and any images in
        it, encoded once); their request ids."""
        params = params or SamplingParams()
        ids, embeddings = self.encode_prompt(prompt)
        return [self._queue(ids, embeddings, params, i) for i in range(params.n)]

    def generate(self, prompts: Sequence, params: SamplingParams | None = None) -> list[GenerationOutput]:
        """One output per prompt; with params.n > 1 its `choices` hold all n (sampled in the same batch)."""
        groups = [self.add_choices(p, params) for p in prompts]
        while self.engine.scheduler.has_work():
            self.advance()
        outs = []
        for rids in groups:
            choices = [self.output(rid) for rid in rids]
            first = choices[0]
            if len(choices) > 1:
                first = GenerationOutput(**{**first.__dict__, "choices": choices})
            outs.append(first)
        return outs

    def stream(self, prompt, params: SamplingParams | None = None):
        """Yields the prompt's text as it is generated (other queued requests advance in the same steps)."""
        rid = self.add(prompt, params)
        request = self.engine.scheduler.requests[rid]
        while request.finish_reason is None:
            delta = self.advance().get(rid)
            if delta:
                yield delta
