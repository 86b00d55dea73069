"""Retrieval pipelines on a decoder's step graph: `TextEmbedder` (Qwen3-Embedding: the last token's final hidden
state, L2-normalised) and `Reranker` (Qwen3-Reranker: a yes/no judgement of a query-document pair, the score
P(yes) = softmax(logit('no'), logit('yes'))[1] at the last token). Both take a Hugging Face checkpoint directory
(converted on first use and cached beside it, like TextEngine) or a converted one."""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from .engine import LLMEngine
from .tokenizer import ChatTokenizer

# Qwen3-Reranker's prompt (its model card): a system instruction, then the pair, then an empty thinking block.
RERANK_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
                 "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
RERANK_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def _engine(model_dir: str, head: str, weight_format: str, block_size: int, **engine_args) -> LLMEngine:
    from model_zoo.decoder_graph import WEIGHT_FORMATS, write_decoder
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, not {weight_format!r}")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    suffix = ("" if weight_format == "float32" else f"_{weight_format}")
    path = os.path.join(model_dir, f"decoder{'_hidden' if head == 'hidden' else ''}_b{block_size}{suffix}.ms")
    if not os.path.isfile(path):
        from converter.frontends.checkpoint import open_checkpoint
        with open_checkpoint(model_dir)[0] as weights:
            write_decoder(config, weights, path, block_size=block_size, weight_format=weight_format, head=head)
    engine_args.setdefault("dynamic_quant", weight_format in ("int8", "int4"))
    return LLMEngine(path, config, block_size=block_size, **engine_args)


class TextEmbedder:
    """Texts -> unit vectors (last-token pooling of the final hidden state, as Qwen3-Embedding)."""

    def __init__(self, engine: LLMEngine, tokenizer: ChatTokenizer):
        self.engine, self.tokenizer = engine, tokenizer

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str = "float32", block_size: int = 16,
                        **engine_args) -> "TextEmbedder":
        return cls(_engine(model_dir, "hidden", weight_format, block_size, **engine_args), ChatTokenizer(model_dir))

    @staticmethod
    def query(task: str, text: str) -> str:
        """Qwen3-Embedding's form of a query with its task instruction (documents go in as they are)."""
        return f"Instruct: {task}\nQuery:{text}"

    def embed_ids(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        rows = np.stack(self.engine.encode(prompts)).astype(np.float32)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_ids([self.tokenizer.encode(t) for t in texts])


class Reranker:
    """(query, document) -> relevance in [0, 1]: P(yes) of Qwen3-Reranker's judgement."""

    def __init__(self, engine: LLMEngine, tokenizer: ChatTokenizer):
        self.engine, self.tokenizer = engine, tokenizer
        vocab = tokenizer.tokenizer
        self.yes, self.no = vocab.token_to_id("yes"), vocab.token_to_id("no")
        if self.yes is None or self.no is None:
            raise ValueError("the tokenizer has no 'yes' / 'no' tokens: not a Qwen3-Reranker-style model")

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str = "float32", block_size: int = 16,
                        **engine_args) -> "Reranker":
        return cls(_engine(model_dir, "logits", weight_format, block_size, **engine_args), ChatTokenizer(model_dir))

    def prompt_ids(self, query: str, document: str, instruction: str = RERANK_INSTRUCTION) -> list[int]:
        text = f"{RERANK_PREFIX}<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}{RERANK_SUFFIX}"
        return self.tokenizer.encode(text, add_special_tokens=False)

    def score_ids(self, prompts: Sequence[Sequence[int]]) -> list[float]:
        scores = []
        for logits in self.engine.encode(prompts):
            pair = np.array([logits[self.no], logits[self.yes]], np.float64)
            pair = np.exp(pair - pair.max())
            scores.append(float(pair[1] / pair.sum()))
        return scores

    def score(self, query: str, documents: Sequence[str], instruction: str = RERANK_INSTRUCTION) -> list[float]:
        return self.score_ids([self.prompt_ids(query, d, instruction) for d in documents])
