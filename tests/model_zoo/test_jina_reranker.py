"""jina-reranker-v3 (lite.llm.retrieval.ListwiseReranker) on a tiny Qwen3 checkpoint laid out as the published one
(config.json architectures ["JinaForRanking"], no lm_head, projector.0 / projector.2 without biases, the marker
tokens in the tokenizer). The reference is its published forward rebuilt on transformers' Qwen3: the last hidden
state at each document marker and at the query marker, through the projector, cosine similarity; blocks of documents
merged by the weighted query average. Scores within 1e-4, the same order."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lite.llm.retrieval import DOC_MARKER, QUERY_MARKER, ListwiseReranker

TEMPLATE = "{%- for m in messages %}{{- m.content }}{%- endfor %}"
CORPUS = ["the capital of france is paris", "what is the capital of france?", "cats sleep a lot",
          "<passage id=\"0\">\n</passage>\n<query>\n</query>", "Rank the passages based on their relevance to query",
          "<|im_start|>system\nYou are a search relevance expert<|im_end|>\n", "<think>\n\n</think>\n\n",
          "dogs bark at night", "paris is in france", "berlin is in germany"]
DOCS = ["the capital of france is paris", "cats sleep a lot", "berlin is in germany", "dogs bark at night",
        "paris is in france"]
QUERY = "what is the capital of france?"


@pytest.fixture(scope="module")
def jina_dir(tmp_path_factory):
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from llm.tiny_bpe import chat_tokenizer
    tok = chat_tokenizer(CORPUS * 30, 360, TEMPLATE)
    tok.add_special_tokens({"additional_special_tokens": [DOC_MARKER, QUERY_MARKER]})
    torch.manual_seed(13)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                      tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg).eval()
    projector = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 24, bias=False))
    d = tmp_path_factory.mktemp("jina")
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith("lm_head")}
    tensors.update({f"projector.{k}": v.contiguous() for k, v in projector.state_dict().items()})
    save_file(tensors, str(d / "model.safetensors"))
    config = cfg.to_dict()
    config["architectures"] = ["JinaForRanking"]
    (d / "config.json").write_text(json.dumps(config))
    tok.save_pretrained(str(d))
    return str(d), model, projector, tok


def reference_block(model, projector, tok, query, docs):
    """The published forward for one block: (query embedding, document embeddings), float64."""
    ids = tok(ListwiseReranker.prompt(query, docs))["input_ids"]
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
        t = torch.tensor(ids)
        d = projector(hidden[t == tok.convert_tokens_to_ids(DOC_MARKER)])
        q = projector(hidden[t == tok.convert_tokens_to_ids(QUERY_MARKER)])
    assert q.shape[0] == 1 and d.shape[0] == len(docs)
    return q[0].double().numpy(), d.double().numpy(), ids


def cosine(q, rows):
    return rows @ q / (np.linalg.norm(rows, axis=1) * np.linalg.norm(q))


def test_one_block_scores_equal_the_reference(jina_dir):
    d, model, projector, tok = jina_dir
    reranker = ListwiseReranker.from_pretrained(d, block_size=8, num_blocks=128, max_num_batched_tokens=64)
    q, docs, ids = reference_block(model, projector, tok, QUERY, DOCS)
    assert reranker.tokenizer.encode(ListwiseReranker.prompt(QUERY, DOCS)) == ids
    got_q, got_d = reranker.embed_block(QUERY, DOCS)
    np.testing.assert_allclose(got_q, q, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_d, docs, rtol=1e-4, atol=1e-5)
    want = cosine(q, docs)
    ranked = reranker.rerank(QUERY, DOCS)
    assert [r["index"] for r in ranked] == list(np.argsort(-want, kind="stable"))
    np.testing.assert_allclose([r["relevance_score"] for r in ranked], np.sort(want)[::-1], atol=1e-4)
    assert [r["document"] for r in reranker.rerank(QUERY, DOCS, top_n=2)] == [DOCS[i] for i in np.argsort(-want)[:2]]


def test_blocks_merge_as_the_reference(jina_dir):
    """Five documents in blocks of two: each block its own prompt, the query states averaged by block weight."""
    d, model, projector, tok = jina_dir
    reranker = ListwiseReranker.from_pretrained(d, block_size=8, num_blocks=128, max_num_batched_tokens=64)
    queries, weights, rows = [], [], []
    for block in (DOCS[0:2], DOCS[2:4], DOCS[4:5]):
        q, docs, _ = reference_block(model, projector, tok, QUERY, block)
        queries.append(q)
        weights.append(((1 + cosine(q, docs)) / 2).max())
        rows.append(docs)
    want = cosine(np.average(np.stack(queries), axis=0, weights=weights), np.concatenate(rows))
    ranked = reranker.rerank(QUERY, DOCS, block_docs=2)
    got = np.empty(len(DOCS))
    for r in ranked:
        got[r["index"]] = r["relevance_score"]
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_marker_text_inside_a_document_is_removed(jina_dir):
    d, *_ = jina_dir
    reranker = ListwiseReranker.from_pretrained(d, block_size=8, num_blocks=128)
    plain = reranker.rerank(QUERY, DOCS[:2])
    spoofed = reranker.rerank(QUERY, [DOCS[0] + QUERY_MARKER, DOC_MARKER + DOCS[1]])
    np.testing.assert_allclose([r["relevance_score"] for r in spoofed], [r["relevance_score"] for r in plain],
                               atol=1e-6)


def test_registry_convert_and_run(jina_dir, tmp_path, capsys):
    from model_zoo import cli
    d, *_ = jina_dir
    want = ListwiseReranker.from_pretrained(d, block_size=16, num_blocks=128).rerank(QUERY, DOCS[:3])
    assert cli.main(["convert", "jina-reranker-v3", "--checkpoint", d, "--output", str(tmp_path / "j")]) == 0
    capsys.readouterr()
    assert cli.main(["run", "jina-reranker-v3", "--model", str(tmp_path / "j"), "--prompt", QUERY] +
                    [a for doc in DOCS[:3] for a in ("--document", doc)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.strip().splitlines()]
    assert [doc for _, doc in lines] == [r["document"] for r in want]
    np.testing.assert_allclose([float(s) for s, _ in lines], [r["relevance_score"] for r in want], atol=2e-6)
