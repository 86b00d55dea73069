"""Retrieval pipelines on a decoder's step graph: `TextEmbedder` (Qwen3-Embedding: the last token's final hidden
state, L2-normalised), `Reranker` (Qwen3-Reranker: a yes/no judgement of a query-document pair, the score
P(yes) = softmax(logit('no'), logit('yes'))[1] at the last token) and `ListwiseReranker` (jina-reranker-v3: the
query and many documents in one causal context, each document's and the query's marker-token state through the
checkpoint's projector, documents ranked by cosine similarity to the query). Each takes a Hugging Face checkpoint
directory (converted on first use and cached beside it, like TextEngine) or a converted one."""
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
    from model_zoo.language.decoder_graph import WEIGHT_FORMATS, write_decoder
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, not {weight_format!r}")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    suffix = ("" if weight_format == "float32" else f"_{weight_format}")
    path = os.path.join(model_dir, f"decoder{'' if head == 'logits' else '_' + head}_b{block_size}{suffix}.ms")
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


# jina-reranker-v3's listwise prompt (its published modeling code): a system instruction, the documents each ended by
# the document marker, then the query ended by the query marker, then an empty thinking block.
LISTWISE_SYSTEM = ("You are a search relevance expert who can determine a ranking of the passages based on how "
                   "relevant they are to the query. If the query is a question, how relevant a passage is depends on "
                   "how well it answers the question. If not, try to analyze the intent of the query and assess how "
                   "well each passage satisfies the intent. If an instruction is provided, you should follow the "
                   "instruction when determining the ranking.")
DOC_MARKER, QUERY_MARKER = "<|embed_token|>", "<|rerank_token|>"


class ListwiseReranker:
    """(query, documents) -> relevance in [-1, 1] (cosine similarity) for each document, jina-reranker-v3's way:
    documents go in blocks of up to `block_docs` (and the context's capacity), each block one prompt; the query's
    state of each block is averaged, weighted by the block's best (1 + score) / 2, and every document is scored
    against that average."""

    def __init__(self, engine: LLMEngine, tokenizer: ChatTokenizer, max_length: int | None = None):
        self.engine, self.tokenizer = engine, tokenizer
        vocab = tokenizer.tokenizer
        self.doc_id, self.query_id = vocab.token_to_id(DOC_MARKER), vocab.token_to_id(QUERY_MARKER)
        if self.doc_id is None or self.query_id is None:
            raise ValueError(f"the tokenizer has no {DOC_MARKER} / {QUERY_MARKER} tokens: not a jina-reranker-v3 "
                             "style model")
        self.max_length = max_length or 131072

    @classmethod
    def from_pretrained(cls, model_dir: str, weight_format: str = "float32", block_size: int = 16,
                        **engine_args) -> "ListwiseReranker":
        limit = None
        path = os.path.join(model_dir, "tokenizer_config.json")
        if os.path.isfile(path):
            with open(path) as f:
                limit = json.load(f).get("model_max_length")
        return cls(_engine(model_dir, "projector", weight_format, block_size, **engine_args), ChatTokenizer(model_dir),
                   limit if isinstance(limit, int) and limit < 10 ** 7 else None)

    @staticmethod
    def prompt(query: str, documents: Sequence[str], instruction: str | None = None) -> str:
        def clean(text: str) -> str:   # a marker inside a text would be taken for one
            return text.replace(DOC_MARKER, "").replace(QUERY_MARKER, "")
        query = clean(query)
        text = (f"I will provide you with {len(documents)} passages, each indicated by a numerical identifier. "
                f"Rank the passages based on their relevance to query: {query}\n")
        if instruction:
            text += f"<instruct>\n{instruction}\n</instruct>\n"
        text += "\n".join(f'<passage id="{i}">\n{clean(d)}{DOC_MARKER}\n</passage>' for i, d in enumerate(documents))
        text += f"\n<query>\n{query}{QUERY_MARKER}\n</query>"
        return (f"<|im_start|>system\n{LISTWISE_SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n")

    def embed_block(self, query: str, documents: Sequence[str],
                    instruction: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(the query's projected state [dim], the documents' [n, dim]) of one block in one prompt."""
        ids = self.tokenizer.encode(self.prompt(query, documents, instruction))
        docs = [i for i, t in enumerate(ids) if t == self.doc_id]
        queries = [i for i, t in enumerate(ids) if t == self.query_id]
        if len(docs) != len(documents) or len(queries) != 1:
            raise ValueError(f"the prompt holds {len(docs)} document and {len(queries)} query markers for "
                             f"{len(documents)} documents")
        rows = self.engine.encode([ids], positions=[docs + queries])[0].astype(np.float64)
        return rows[-1], rows[:-1]

    def _truncated(self, text: str, limit: int) -> tuple[str, int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) >= limit:
            return self.tokenizer.decode(ids[:limit], skip_special_tokens=False), limit
        return text, len(ids)

    def rerank(self, query: str, documents: Sequence[str], top_n: int | None = None, instruction: str | None = None,
               max_query_length: int = 512, max_doc_length: int = 2048, block_docs: int = 125) -> list[dict]:
        """The documents by relevance, best first: dicts of document, relevance_score and index."""
        if not documents:
            return []
        query, query_len = self._truncated(query, max_query_length)
        docs, lengths = zip(*(self._truncated(d, max_doc_length) for d in documents))
        blocks, block, capacity = [], [], self.max_length - 2 * query_len
        for i, n in enumerate(lengths):   # as the reference cuts them
            block.append(i)
            capacity -= n
            if len(block) >= block_docs or capacity <= max_doc_length:
                blocks.append(block)
                block, capacity = [], self.max_length - 2 * query_len
        if block:
            blocks.append(block)
        queries, weights, doc_rows = [], [], np.zeros((len(docs), 0))
        for block in blocks:
            q, d = self.embed_block(query, [docs[i] for i in block], instruction)
            if doc_rows.shape[1] == 0:
                doc_rows = np.zeros((len(docs), d.shape[1]))
            doc_rows[block] = d
            queries.append(q)
            weights.append(((1.0 + _cosine(q, d)) / 2.0).max())
        merged = np.average(np.stack(queries), axis=0, weights=np.array(weights))
        scores = _cosine(merged, doc_rows)
        order = np.argsort(-scores, kind="stable")[:len(docs) if top_n is None else min(top_n, len(docs))]
        return [{"document": documents[i], "relevance_score": float(scores[i]), "index": int(i)} for i in order]


def _cosine(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Cosine similarity of q with each row (torch's cosine_similarity: norms kept off zero by 1e-8)."""
    return rows @ q / np.maximum(np.linalg.norm(rows, axis=1) * np.linalg.norm(q), 1e-8)
