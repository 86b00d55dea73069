"""BLIP on the runtime: captioning (an image, and an optional text to continue -> a caption) and image-text
matching (BlipForImageTextRetrieval: the ITM head's match probability, and the contrastive cosine similarity).

    captioner = BlipCaptioner("path/to/blip-image-captioning-base")   # a transformers checkpoint, or converted
    captioner.caption("cat.png")                                      # "two cats sleeping on a couch"
    captioner.caption("cat.png", prompt="a picture of")               # continues the prompt

The image goes through BlipImageProcessor's preprocessing (resize to the configured size, bicubic; rescale;
normalise) and the vision graph once (its embeddings and every decoder layer's cross-attention keys and values); the
caption is decoded greedily as BlipForConditionalGeneration.generate does it: the prompt's tokens (the tokenizer's
[CLS] replaced by the decoder's bos token, the closing [SEP] dropped), then the argmax token until [SEP], each step
running the text graph on the prefix (captions are short)."""
from __future__ import annotations

import json
import os

import numpy as np

from .checkpoint_graph import checkpoint_graph, load_graph
from .clip import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, _open_image


def _processor_config(model_dir: str) -> dict:
    path = os.path.join(model_dir, "preprocessor_config.json")
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


class BlipPreprocessor:
    """BlipImageProcessor's preprocessing (BLIP and BLIP-2): resize to the configured size (bicubic by default),
    rescale, normalise; [3, H, W] float32 of one image (path, PIL image or uint8 array)."""

    def __init__(self, processor_config: dict, side: int):
        pre = processor_config
        size = pre.get("size") or {}
        self.size = (int(size.get("width", side)), int(size.get("height", side)))
        self.resample = int(pre.get("resample", 3))
        self.rescale = float(pre.get("rescale_factor", 1 / 255)) if pre.get("do_rescale", True) else 1.0
        self.normalize = bool(pre.get("do_normalize", True))
        self.mean = np.asarray(pre.get("image_mean", OPENAI_CLIP_MEAN), np.float32)
        self.std = np.asarray(pre.get("image_std", OPENAI_CLIP_STD), np.float32)

    def __call__(self, image) -> np.ndarray:
        image = _open_image(image).resize(self.size, self.resample)
        x = (np.asarray(image).astype(np.float64) * self.rescale).astype(np.float32)
        if self.normalize:
            x = (x - self.mean) / self.std
        return np.ascontiguousarray(x.transpose(2, 0, 1))


class _Blip:
    """What BLIP's pipelines share: the config, tokenizer, BlipImageProcessor preprocessing and the image graph."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        from tokenizers import Tokenizer
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") != "blip":
            raise ValueError(f"not a BLIP model (model_type {self.config.get('model_type')!r})")
        text = self.config.get("text_config") or {}
        self.bos, self.sep = int(text.get("bos_token_id", 30522)), int(text.get("sep_token_id", 102))
        self.max_positions = int(text.get("max_position_embeddings", 512))
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"'{model_dir}' has no tokenizer.json")
        self.tokenizer = Tokenizer.from_file(path)
        side = int((self.config.get("vision_config") or {}).get("image_size", 384))
        self.preprocess = BlipPreprocessor(_processor_config(model_dir), side)
        self.vision = checkpoint_graph(model_dir, "vision", "vision", weight_format, threads)
        self.text = checkpoint_graph(model_dir, "text", "text", weight_format, threads)

    def prompt_ids(self, prompt: str | None) -> list[int]:
        """The decoder's start: bos, then the prompt's tokens (its [CLS] replaced, its trailing [SEP] dropped)."""
        if not prompt:
            return [self.bos]
        ids = self.tokenizer.encode(prompt).ids
        if ids and ids[-1] == self.sep:
            ids = ids[:-1]
        return [self.bos] + ids[1:] if ids else [self.bos]

    def image_outputs(self, image) -> dict[str, np.ndarray]:
        """The image graph's outputs: image_embeds, every text layer's cross_k.i / cross_v.i (and image_feat)."""
        return {o.name: t.get_data_to_numpy() for o, t in zip(self.vision.get_outputs(),
                                                              self.vision.predict({"pixel_values":
                                                                                   self.preprocess(image)[None]}))}


class BlipCaptioner(_Blip):
    def caption_ids(self, image, prompt: str | None = None, max_new_tokens: int = 20) -> list[int]:
        """The prompt's ids followed by the greedy caption's (ending with [SEP] unless cut by max_new_tokens)."""
        cross = {k: v for k, v in self.image_outputs(image).items() if k.startswith("cross_")}
        ids = self.prompt_ids(prompt)
        for _ in range(max_new_tokens):
            if len(ids) >= self.max_positions:
                break
            logits = self.text.predict({"input_ids": np.asarray([ids], np.int64), **cross})[0].get_data_to_numpy()
            token = int(np.argmax(logits.reshape(-1)))
            ids.append(token)
            if token == self.sep:
                break
        return ids

    def caption(self, image, prompt: str | None = None, max_new_tokens: int = 20) -> str:
        return self.tokenizer.decode(self.caption_ids(image, prompt, max_new_tokens), skip_special_tokens=True).strip()


class BlipMatcher(_Blip):
    """Image-text matching on a BlipForImageTextRetrieval checkpoint: `match` is the ITM head's probability that a
    text describes the image (the text encoder cross-attending to it), `similarity` the cosine of the projected
    class-token features (image and text apart), as the model's use_itm_head=True / False."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        super().__init__(model_dir, weight_format, threads)
        self.text_features = checkpoint_graph(model_dir, "text_features", "text_features", weight_format, threads)

    def _ids(self, text: str) -> np.ndarray:
        ids = self.tokenizer.encode(text).ids[:self.max_positions]
        return np.asarray([ids], np.int64)

    def match(self, image, texts) -> list[float]:
        if isinstance(texts, str):
            raise TypeError("texts is a list of strings")
        cross = {k: v for k, v in self.image_outputs(image).items() if k.startswith("cross_")}
        scores = []
        for text in texts:
            logits = self.text.predict({"input_ids": self._ids(text), **cross})[0].get_data_to_numpy()
            z = logits.reshape(-1).astype(np.float64)
            z = np.exp(z - z.max())
            scores.append(float(z[1] / z.sum()))
        return scores

    def similarity(self, image, texts) -> list[float]:
        if isinstance(texts, str):
            raise TypeError("texts is a list of strings")
        image_feat = self.image_outputs(image)["image_feat"].reshape(-1)
        image_feat = image_feat / max(float(np.linalg.norm(image_feat)), 1e-12)
        out = []
        for text in texts:
            feat = self.text_features.predict({"input_ids": self._ids(text)})[0].get_data_to_numpy().reshape(-1)
            out.append(float(image_feat @ (feat / max(float(np.linalg.norm(feat)), 1e-12))))
        return out


class Blip2Vision:
    """BLIP-2's image side as a tower for lite.llm.TextEngine: an image -> its num_query_tokens rows for the language
    model (the ViT, the Q-Former's queries and language_projection in one graph, model_zoo/multimodal/blip2_graphs.py),
    at the image tokens' ordinary positions."""
    mrope = False

    def __init__(self, path: str, config: dict, processor_config: dict | None = None, threads: int = 1):
        self.model = load_graph(path, threads)
        side = int((config.get("vision_config") or {}).get("image_size", 224))
        self.preprocess = BlipPreprocessor(dict(processor_config or {}), side)
        self.queries = int(config.get("num_query_tokens", 32))

    def __call__(self, image) -> tuple[np.ndarray, None]:
        """(rows [num_query_tokens, text width], no grid) of one image (a PIL image, path or uint8 array)."""
        return self.model.predict({"pixel_values": self.preprocess(image)[None]})[0].get_data_to_numpy(), None


class Blip2Captioner:
    """BLIP-2 captioning and visual question answering on the LLM engine, as Blip2ForConditionalGeneration.generate
    does it: the prompt is num_query_tokens image tokens (their embeddings replaced by the image's Q-Former rows),
    the tokenizer's bos and the optional text prompt ("Question: ... Answer:"); then greedy decoding until eos.
    Images in one `caption` call are decoded together (continuous batching); identical images share their prefix's
    KV blocks (prefix caching)."""

    def __init__(self, text_engine):
        if not isinstance(getattr(text_engine, "vision", None), Blip2Vision):
            raise ValueError("not a BLIP-2 model (its TextEngine has no BLIP-2 image tower)")
        self.engine = text_engine
        config = text_engine.config
        self.image_token = int(config.get("image_token_id", config.get("image_token_index")))
        self.bos = int((config.get("text_config") or {}).get("bos_token_id", 2))

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str | None = None, block_size: int | None = None,
                        **engine_args) -> "Blip2Captioner":
        from .llm.text_engine import TextEngine
        return cls(TextEngine.from_pretrained(model_dir, weight_format=weight_format, block_size=block_size,
                                              **engine_args))

    def request(self, image, prompt: str | None = None):
        """(prompt token ids, PromptEmbeddings) of one image and optional text."""
        from .llm.multimodal import PromptEmbeddings
        rows, _ = self.engine.vision(image)
        # the prompt as the processor's tokenizer encodes it (OPT's adds its bos); none: the bos alone, as generate
        tokens = self.engine.tokenizer.encode(prompt) if prompt else [self.bos]
        ids = [self.image_token] * len(rows) + list(tokens)
        return ids, PromptEmbeddings(np.arange(len(rows)), rows)

    def caption_ids(self, images, prompt: str | None = None, max_new_tokens: int = 20) -> list[list[int]]:
        """The generated token ids of each image (eos included when reached)."""
        from .llm.sampling import SamplingParams
        if isinstance(images, (str, bytes, os.PathLike)) or hasattr(images, "size") and not isinstance(images, list):
            raise TypeError("images is a list (of paths, PIL images or uint8 arrays)")
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
        rids = [self.engine.add(ids, params, embeddings=emb) for ids, emb in (self.request(im, prompt)
                                                                            for im in images)]
        while self.engine.engine.scheduler.has_work():
            self.engine.advance()
        return [self.engine.output(rid).token_ids for rid in rids]

    def caption(self, images, prompt: str | None = None, max_new_tokens: int = 20) -> list[str]:
        return [self.engine.tokenizer.decode([t for t in ids if t not in self.engine.engine.eos_token_ids]).strip()
                for ids in self.caption_ids(images, prompt, max_new_tokens)]
