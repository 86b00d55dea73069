"""Multimodal retrieval on a Qwen3-VL checkpoint (Qwen3-VL-Embedding, Qwen3-VL-Reranker): queries and documents are
text, an image, or both.

`VLEmbedder`: each input becomes a chat (system: the instruction, default "Represent the user's input."; user: the
image, then the text; "NULL" for an empty input), rendered by the checkpoint's chat template with the generation
prompt and tokenised with the tokenizer's special tokens (the Embedding checkpoint's tokenizer appends
<|endoftext|>); the last token's final hidden state, optionally cut to its first `dim` values (Matryoshka), is
L2-normalised. `VLReranker`: the judge chat (system: answer only "yes" or "no"; user: "<Instruct>: ...",
"<Query>:" and the query's image / text, "\\n<Document>:" and the document's), scored P(yes) =
sigmoid(logit(yes) - logit(no)) at the last token. Images are resized as the reference wrapper does before its
processor (smart resize to multiples of 32 pixels within 4 x 32^2 and 1800 x 32^2 pixels). This follows the
protocol of the models' published wrapper (QwenLM/Qwen3-VL-Embedding: Qwen3VLEmbedder / Qwen3VLReranker); video
inputs are not supported yet."""
from __future__ import annotations

import os
import unicodedata
from typing import Any, Mapping, Sequence

import numpy as np

from .engine import LLMEngine
from .multimodal import Video, expand_image_prompt, split_images
from .tokenizer import ChatTokenizer

EMBED_INSTRUCTION = "Represent the user's input."
RERANK_INSTRUCTION = "Given a search query, retrieve relevant candidates that answer the query."
JUDGE_SYSTEM = ("Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
                "Note that the answer can only be \"yes\" or \"no\".")
MIN_PIXELS, MAX_PIXELS = 4 * 32 * 32, 1800 * 32 * 32


def _open(model_dir: str, head: str, weight_format: str, block_size: int, engine_args: dict):
    """(engine, tokenizer, vision tower with the wrapper's pixel bounds, config)."""
    import json

    from .retrieval import _engine
    from .text_engine import TextEngine
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") != "qwen3_vl":
        raise ValueError(f"a Qwen3-VL retrieval model has model_type qwen3_vl, not {config.get('model_type')!r}")
    vision = TextEngine._vision_tower(model_dir, config, weight_format, engine_args.get("threads", 1))
    vision.processor_config.update(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    engine = _engine(model_dir, head, weight_format, block_size, **engine_args)
    return engine, ChatTokenizer(model_dir), vision, config


def _parts(item: Mapping[str, Any] | str) -> tuple[str | None, Any]:
    if isinstance(item, str):
        return item, None
    if not isinstance(item, Mapping):
        raise TypeError(f"an input is a text or a dict with 'text' and / or 'image', not {type(item).__name__}")
    if item.get("video") is not None:
        raise NotImplementedError("video inputs to Qwen3-VL retrieval are not supported yet")
    return item.get("text"), item.get("image")


class _VLPrompts:
    """Chat messages with image parts -> (token ids, the image rows) for the step graph."""

    def __init__(self, engine: LLMEngine, tokenizer: ChatTokenizer, vision, config: Mapping):
        self.engine, self.tokenizer, self.vision, self.config = engine, tokenizer, vision, dict(config)

    def prompt(self, messages: list[dict]):
        messages, images = split_images(messages)
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        text = self.vision.video_prompt(text, [m for m in images if isinstance(m, Video)])
        ids = self.tokenizer.encode(text, add_special_tokens=True)
        if not images:
            return ids, None
        return expand_image_prompt(ids, images, self.vision, int(self.config["image_token_id"]),
                                   self.config.get("video_token_id"))

    def encode(self, conversations: Sequence[list[dict]]) -> list[np.ndarray]:
        prompts, embeddings = zip(*(self.prompt(c) for c in conversations))
        return self.engine.encode(list(prompts), embeddings=list(embeddings))


class VLEmbedder(_VLPrompts):
    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str = "float32", block_size: int = 16,
                        **engine_args) -> "VLEmbedder":
        return cls(*_open(model_dir, "hidden", weight_format, block_size, engine_args))

    @staticmethod
    def conversation(text: str | None = None, image=None, instruction: str | None = None) -> list[dict]:
        instruction = (instruction or "").strip()
        if instruction and not unicodedata.category(instruction[-1]).startswith("P"):
            instruction += "."   # the wrapper ends an instruction with punctuation
        content: list[dict] = []
        if image is not None:
            content.append({"type": "image", "image": image})
        if text:
            content.append({"type": "text", "text": text})
        if not content:
            content.append({"type": "text", "text": "NULL"})
        return [{"role": "system", "content": [{"type": "text", "text": instruction or EMBED_INSTRUCTION}]},
                {"role": "user", "content": content}]

    def embed(self, inputs: Sequence[Mapping[str, Any] | str], instruction: str | None = None,
              dim: int | None = None) -> np.ndarray:
        """[N, dim or hidden] unit vectors; each input a text or {"text": ..., "image": ..., "instruction": ...}."""
        if not len(inputs):
            raise ValueError("no inputs to embed")
        conversations = []
        for item in inputs:
            text, image = _parts(item)
            own = item.get("instruction") if isinstance(item, Mapping) else None
            conversations.append(self.conversation(text, image, own or instruction))
        rows = np.stack(self.encode(conversations)).astype(np.float32)
        if dim is not None:
            if not 0 < dim <= rows.shape[1]:
                raise ValueError(f"dim must be in 1..{rows.shape[1]}, got {dim}")
            rows = rows[:, :dim]
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


class VLReranker(_VLPrompts):
    def __init__(self, engine: LLMEngine, tokenizer: ChatTokenizer, vision, config: Mapping):
        super().__init__(engine, tokenizer, vision, config)
        vocab = tokenizer.tokenizer
        self.yes, self.no = vocab.token_to_id("yes"), vocab.token_to_id("no")
        if self.yes is None or self.no is None:
            raise ValueError("the tokenizer has no 'yes' / 'no' tokens: not a Qwen3-VL-Reranker")

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str = "float32", block_size: int = 16,
                        **engine_args) -> "VLReranker":
        return cls(*_open(model_dir, "logits", weight_format, block_size, engine_args))

    @staticmethod
    def _content(prefix: str, text: str | None, image) -> list[dict]:
        content: list[dict] = [{"type": "text", "text": prefix}]
        if image is None and not text:
            return content + [{"type": "text", "text": "NULL"}]
        if image is not None:
            content.append({"type": "image", "image": image})
        if text:
            content.append({"type": "text", "text": text})
        return content

    def conversation(self, query, document, instruction: str = RERANK_INSTRUCTION) -> list[dict]:
        content = [{"type": "text", "text": "<Instruct>: " + instruction}]
        content += self._content("<Query>:", *_parts(query))
        content += self._content("\n<Document>:", *_parts(document))
        return [{"role": "system", "content": [{"type": "text", "text": JUDGE_SYSTEM}]},
                {"role": "user", "content": content}]

    def score(self, query, documents: Sequence, instruction: str = RERANK_INSTRUCTION) -> list[float]:
        """P(yes) of each (query, document) pair; query and documents are texts or {"text", "image"} dicts."""
        scores = []
        for logits in self.encode([self.conversation(query, d, instruction) for d in documents]):
            scores.append(float(1.0 / (1.0 + np.exp(-(float(logits[self.yes]) - float(logits[self.no]))))))
        return scores
