"""`SpanNER`: zero-shot named-entity recognition with a GLiNER span model (gliner's `predict_entities`), on the graph
model_zoo.encoders.gliner_graph converts from the checkpoint directory (gliner_config.json, weights, tokenizer.json) on
first use and caches beside it as gliner_scores[_<weight format>].ms.

Per text: words split as gliner's whitespace splitter does, the labels prepended as "<<ENT>> label ... <<SEP>>",
tokenised as pre-split words; every span of up to max_width words is scored against every label; spans whose sigmoid
score passes the threshold are kept greedily by score without overlaps (flat NER) or allowing nesting."""
from __future__ import annotations

import json
import os
import re
from typing import Sequence

import numpy as np

from . import Context, Model, ModelType

_WORDS = re.compile(r"\w+(?:[-_]\w+)*|\S")


def split_words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) of each word, as gliner's WhitespaceTokenSplitter splits."""
    return [(m.group(), m.start(), m.end()) for m in _WORDS.finditer(text)]


def _overlaps(a: tuple[int, int], b: tuple[int, int], nested_allowed: bool) -> bool:
    if b[1] < a[0] or a[1] < b[0]:
        return False
    if nested_allowed and ((a[0] <= b[0] and b[1] <= a[1]) or (b[0] <= a[0] and a[1] <= b[1])):
        return False
    return True


def decode(text: str, words: Sequence[tuple[str, int, int]], spans: np.ndarray, probs: np.ndarray,
           labels: Sequence[str], threshold: float, flat_ner: bool = True, multi_label: bool = False) -> list[dict]:
    """gliner's span decoding: the (span, label) pairs whose probability passes `threshold`, taken greedily by score
    (ties in span order) unless they overlap one taken before (flat NER), or overlap without nesting (nested NER);
    the same span under two labels only with multi_label. `spans` [N, 2] first / last word, `probs` [N, labels]."""
    candidates = [(int(spans[i, 0]), int(spans[i, 1]), int(c), float(probs[i, c]))
                  for i, c in zip(*np.nonzero(probs > threshold))]
    chosen: list[tuple[int, int, int, float]] = []
    for cand in sorted(candidates, key=lambda t: -t[3]):   # a stable sort, as gliner's
        clash = False
        for kept in chosen:
            if cand[:2] == kept[:2]:
                clash = not multi_label
            else:
                clash = _overlaps(cand[:2], kept[:2], nested_allowed=not flat_ner)
            if clash:
                break
        if not clash:
            chosen.append(cand)
    chosen.sort(key=lambda t: t[0])
    return [{"start": words[s][1], "end": words[e][2], "text": text[words[s][1]:words[e][2]],
             "label": labels[c], "score": score} for s, e, c, score in chosen]


class SpanNER:
    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1):
        from tokenizers import Tokenizer
        with open(os.path.join(model_dir, "gliner_config.json")) as f:
            self.config = json.load(f)
        if self.config.get("words_splitter_type", "whitespace") != "whitespace":
            raise NotImplementedError(f"words_splitter_type {self.config['words_splitter_type']!r} (whitespace only)")
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"'{model_dir}' has no tokenizer.json")
        self.tokenizer = Tokenizer.from_file(path)
        limit = None
        tok_config = os.path.join(model_dir, "tokenizer_config.json")
        if os.path.isfile(tok_config):
            with open(tok_config) as f:
                limit = json.load(f).get("model_max_length")
        if isinstance(limit, int) and limit < 10 ** 6:   # (transformers writes a huge number for "no limit")
            self.tokenizer.enable_truncation(limit)
        self.ent_token = self.config.get("ent_token", "<<ENT>>")
        self.sep_token = self.config.get("sep_token", "<<SEP>>")
        self.ent_id = self.tokenizer.token_to_id(self.ent_token)
        if self.ent_id is None:
            raise ValueError(f"the tokenizer has no {self.ent_token} token")
        configured = int(self.config.get("class_token_index", -1) or -1)
        if configured >= 0 and configured != self.ent_id:
            raise ValueError(f"class_token_index {configured} is not the tokenizer's {self.ent_token} ({self.ent_id})")
        self.max_width = int(self.config.get("max_width", 12))
        self.max_words = int(self.config.get("max_len", 384))
        self.model = self._model(model_dir, weight_format, threads)

    @staticmethod
    def _model(model_dir: str, weight_format: str, threads: int) -> Model:
        from converter.api import Converter, FmkType
        from converter.frontends.hf_frontend import CheckpointOptions
        path = os.path.join(model_dir, f"gliner_scores{'' if weight_format == 'float32' else '_' + weight_format}.ms")
        if not os.path.isfile(path):
            Converter().convert(FmkType.HF, model_dir, path, verify_build=False,
                                checkpoint_options=CheckpointOptions(weight_format=weight_format))
        ctx = Context()
        ctx.cpu.thread_num = threads
        model = Model()
        model.build_from_file(path, ModelType.MINDIR_LITE, ctx)
        return model

    def inputs(self, words: Sequence[str], labels: Sequence[str]) -> tuple[dict[str, np.ndarray], int]:
        """The graph's inputs for one text's words and the labels, and how many words they cover (a prompt longer
        than the tokenizer's limit is truncated, and the words past it with it)."""
        from model_zoo.encoders.deberta_graph import relative_position_indices
        prompt = [t for label in labels for t in (self.ent_token, str(label))] + [self.sep_token]
        enc = self.tokenizer.encode(prompt + list(words), is_pretokenized=True)
        ids = np.array(enc.ids, np.int64)
        first: dict[int, int] = {}
        for pos, w in enumerate(enc.word_ids):
            if w is not None and w not in first:
                first[w] = pos
        n = 0
        while n < len(words) and len(prompt) + n in first:
            n += 1
        if any(len(prompt) + w in first for w in range(n, len(words))):
            raise ValueError(f"word {n} ({words[n]!r}) gives the tokenizer no token")
        class_index = np.flatnonzero(ids == self.ent_id)
        if not self.config.get("embed_ent_token", True):
            class_index = class_index + 1
        if len(class_index) != len(labels):
            raise ValueError(f"{len(labels)} labels but {len(class_index)} {self.ent_token} tokens after tokenisation")
        starts = [s for s in range(n) for k in range(self.max_width) if s + k < n]
        ends = [s + k for s in range(n) for k in range(self.max_width) if s + k < n]
        c2p, p2c = relative_position_indices(len(ids), self.config["encoder_config"])
        feeds = {"input_ids": ids[None], "c2p_index": c2p, "p2c_index": p2c,
                 "word_index": np.array([first[len(prompt) + w] for w in range(n)], np.int64),
                 "class_index": class_index.astype(np.int64), "span_start": np.array(starts, np.int64),
                 "span_end": np.array(ends, np.int64)}
        return feeds, n

    def scores(self, words: Sequence[str], labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """(logits [spans, labels], spans [spans, 2] as first / last word, words covered)."""
        feeds, n = self.inputs(words, labels)
        if n == 0:
            return np.zeros((0, len(labels)), np.float32), np.zeros((0, 2), np.int64), 0
        logits = self.model.predict(feeds)[0].get_data_to_numpy()
        return logits, np.stack([feeds["span_start"], feeds["span_end"]], axis=1), n

    def predict_entities(self, text: str, labels: Sequence[str], threshold: float = 0.5, flat_ner: bool = True,
                         multi_label: bool = False) -> list[dict]:
        """Entities of `text` among `labels`: dicts of start / end (characters), text, label and score."""
        if not labels:
            raise ValueError("no labels to look for")
        found = split_words(text)[:self.max_words]
        logits, spans, _ = self.scores([w for w, _, _ in found], labels)
        probs = (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
        return decode(text, found, spans, probs, labels, threshold, flat_ner, multi_label)

    def __call__(self, texts: Sequence[str], labels: Sequence[str], threshold: float = 0.5,
                 flat_ner: bool = True, multi_label: bool = False) -> list[list[dict]]:
        return [self.predict_entities(t, labels, threshold, flat_ner, multi_label) for t in texts]
