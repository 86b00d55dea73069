"""Incremental detokenisation never emits half a character and adds up to the full decode; stop strings cut the
text before them and hold back only what could still become one."""
from __future__ import annotations

import pytest
from tiny_bpe import train_byte_bpe

from lite.llm import IncrementalDetokenizer, StopStrings

CORPUS = ["héllo wörld, naïve café", "日本語のテキスト と 中文 字符", "emoji 🙂🚀 and more 🎉 text", "plain ascii words here"]


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE (the GPT-2 / Qwen / Llama-3 kind) trained on a tiny corpus: multi-byte characters split
    over several tokens."""
    return train_byte_bpe(CORPUS * 5, 300)


@pytest.mark.parametrize("text", ["naïve café 🙂", "日本語 🎉🚀 wörld", "x🙂y", "plain"])
def test_deltas_add_up_and_never_split_a_character(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert any(tokenizer.decode([i]).endswith("\ufffd") for i in ids) or text == "plain"   # really split
    prompt = tokenizer.encode("hello ").ids
    d = IncrementalDetokenizer(tokenizer, prompt)
    out = ""
    for i in ids:
        delta = d.add(i)
        assert "\ufffd" not in delta
        out += delta
        assert text.startswith(out)
    assert out == text == tokenizer.decode(ids)


def test_stop_string_cuts_before_it_across_deltas():
    s = StopStrings(["</end>", "STOP"])
    emitted = []
    for delta in ["Hello wor", "ld </e", "nd> ignored"]:
        text, stopped = s.feed(delta)
        emitted.append(text)
        if stopped:
            break
    assert "".join(emitted) == "Hello world " and stopped
    assert emitted[1] == "ld "   # "</e" was held back: it could have become "</end>"


def test_held_back_text_is_released_when_it_cannot_be_a_stop():
    s = StopStrings(["STOP"])
    assert s.feed("go ST") == ("go ", False)
    assert s.feed("ART") == ("START", False)
    assert s.feed("S") == ("", False)
    assert s.flush() == "S"
