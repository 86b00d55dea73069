"""Qwen3-Embedding and Qwen3-Reranker pipelines (lite/llm/retrieval.py) on a tiny Qwen3 checkpoint with a trained
byte-level BPE tokenizer: embeddings equal transformers' last-token final hidden state, L2-normalised, and reranker
scores equal softmax(logit('no'), logit('yes'))[1] of transformers' logits, within 1e-4, for texts of different
lengths batched together."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lite.llm.retrieval import Reranker, TextEmbedder

TEMPLATE = "{%- for m in messages %}{{- m.content }}{%- endfor %}"
CORPUS = ["yes", "no", "yes no", "the capital of france is paris", "what is the capital of france?",
          "<|im_start|>system\nJudge<|im_end|>\n", "cats sleep a lot", "Instruct: find\nQuery:"]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from llm.tiny_bpe import chat_tokenizer
    tok = chat_tokenizer(CORPUS * 30, 320, TEMPLATE)
    assert tok.backend_tokenizer.token_to_id("yes") is not None and tok.backend_tokenizer.token_to_id("no") is not None
    torch.manual_seed(11)
    cfg = Qwen3Config(vocab_size=tok.backend_tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=512, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg).eval()
    d = tmp_path_factory.mktemp("qwen3")
    model.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return str(d), model


TEXTS = ["what is the capital of france?", "the capital of france is paris", "cats sleep a lot, yes they do",
         TextEmbedder.query("find the answer", "capital of france")]


def test_embeddings_equal_transformers_last_token_state(qwen3_dir):
    d, model = qwen3_dir
    embedder = TextEmbedder.from_pretrained(d, block_size=8, num_blocks=64)
    got = embedder.embed(TEXTS)
    assert got.shape == (len(TEXTS), 64)
    for text, row in zip(TEXTS, got):
        ids = embedder.tokenizer.encode(text)
        with torch.no_grad():
            h = model.model(torch.tensor([ids])).last_hidden_state[0, -1].numpy()
        np.testing.assert_allclose(row, h / np.linalg.norm(h), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(got[0], got[1])


def test_reranker_scores_equal_transformers(qwen3_dir):
    d, model = qwen3_dir
    reranker = Reranker.from_pretrained(d, block_size=8, num_blocks=96)
    docs = TEXTS[1:3] + ["no"]
    got = reranker.score("what is the capital of france?", docs)
    for doc, score in zip(docs, got):
        ids = reranker.prompt_ids("what is the capital of france?", doc)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].double()
        want = torch.softmax(logits[[reranker.no, reranker.yes]], 0)[1].item()
        assert 0.0 < score < 1.0
        assert abs(score - want) < 1e-4
    assert len(set(round(s, 6) for s in got)) == len(docs)   # the documents are told apart


def test_model_zoo_converts_and_runs_embedding_and_reranker(qwen3_dir, tmp_path, capsys):
    import json

    from model_zoo import cli
    d, _ = qwen3_dir
    want = TextEmbedder.from_pretrained(d, block_size=8, num_blocks=64).embed(["cats sleep a lot"])[0]
    assert cli.main(["convert", "Qwen3-Embedding-0.6B", "--checkpoint", d, "--output", str(tmp_path / "e")]) == 0
    capsys.readouterr()
    assert cli.main(["run", "Qwen3-Embedding-0.6B", "--model", str(tmp_path / "e"), "--prompt", "cats sleep a lot"]) == 0
    np.testing.assert_allclose(json.loads(capsys.readouterr().out), want, atol=2e-6)
    assert cli.main(["convert", "Qwen3-Reranker-0.6B", "--checkpoint", d, "--output", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert cli.main(["run", "Qwen3-Reranker-0.6B", "--model", str(tmp_path / "r"), "--prompt", "capital of france?",
                     "--document", "paris", "--document", "cats"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[1] for line in lines] == ["paris", "cats"]
    assert all(0 < float(line.split("\t")[0]) < 1 for line in lines)
