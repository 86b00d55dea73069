"""Incremental detokenisation for streaming: text deltas as tokens arrive, never splitting a multi-byte character
(a byte-level BPE token can end inside one; its text then ends in U+FFFD until the next token completes it), and
stop strings that end a generation with the text before them, holding back what could still become one."""
from __future__ import annotations

from typing import Protocol, Sequence

REPLACEMENT = "\ufffd"


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Decodes a window of recent tokens twice per step (with and without the newest) and emits the difference,
    so the cost per token stays constant and tokenizers that merge spaces across tokens decode right."""

    def __init__(self, tokenizer: Decoder, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = list(prompt_ids)
        # Start a few tokens back into the prompt, so the first generated token decodes with its left context.
        self.prefix_offset = max(len(self.ids) - 5, 0)
        self.read_offset = len(self.ids)
        self.text = ""

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens)

    def add(self, token_id: int) -> str:
        """Appends a token and returns the newly complete text ('' while a character is still incomplete)."""
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self.prefix_offset:self.read_offset])
        after = self._decode(self.ids[self.prefix_offset:])
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            delta = after[len(before):]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.text += delta
            return delta
        return ""


class StopStrings:
    """Finds the first stop string in the generated text. `feed` returns (text safe to emit now, stopped): the
    text up to a stop string when one appears, else all but the longest tail that is a prefix of a stop string."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, delta: str) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        text = self.pending + delta
        hits = [(i, s) for s in self.stops if (i := text.find(s)) >= 0]
        if hits:
            self.stopped = True
            self.pending = ""
            return text[:min(i for i, _ in hits)], True
        hold = 0
        for s in self.stops:   # the longest end of `text` that starts some stop string
            for k in range(min(len(s) - 1, len(text)), hold, -1):
                if text.endswith(s[:k]):
                    hold = k
                    break
        self.pending = text[len(text) - hold:] if hold else ""
        return text[:len(text) - hold], False

    def flush(self) -> str:
        """At the end of a generation that no stop string ended: the held-back tail."""
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out
