"""BERT from its checkpoint (model_zoo/encoders/bert_graph.py via converter_lite --fmk=HF): a tiny BertForMaskedLM saved
by transformers with a WordPiece tokenizer; the converted encoder's last hidden state and MLM logits equal transformers'
within 1e-4 for a padded batch of texts of two lengths (with token types), and the fill-mask and sentence-embedding
pipelines give what transformers' outputs give."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from converter.api import Converter, FmkType
import lite
from lite.encoder_pipelines import FillMask, SentenceEmbedder

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "in", "park", "a", "big", "red", "ball", "我", "爱", "北", "京"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForMaskedLM

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])   # never normalised or split
    torch.manual_seed(4)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=96, max_position_embeddings=64)).eval()
    d = tmp_path_factory.mktemp("bert")
    model.save_pretrained(str(d))
    tok.save(str(d / "tokenizer.json"))
    return str(d), model, tok


def test_encoder_matches_transformers(bert_dir, tmp_path):
    d, model, _ = bert_dir
    path = Converter().convert(FmkType.HF, d, str(tmp_path / "bert"), verify_build=False).output_file
    m = lite.Model()
    m.build_from_file(path, lite.ModelType.MINDIR_LITE, lite.Context())
    rng = np.random.default_rng(0)
    for length in (7, 23):
        ids = rng.integers(5, 5 + len(WORDS), (2, length))
        mask = np.ones((2, length), np.int64)
        mask[1, length - 3:] = 0   # the second text is shorter: padded
        types = np.zeros((2, length), np.int64)
        types[:, length // 2:] = 1
        out = {o.name: o.get_data_to_numpy() for o in m.predict({"input_ids": ids, "attention_mask": mask,
                                                                 "token_type_ids": types})}
        with torch.no_grad():
            ref = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                        token_type_ids=torch.tensor(types), output_hidden_states=True)
        for b in range(2):
            n = int(mask[b].sum())
            want_h, want_l = ref.hidden_states[-1][b, :n].numpy(), ref.logits[b, :n].numpy()
            np.testing.assert_allclose(out["last_hidden_state"][b, :n], want_h, rtol=1e-4, atol=1e-4 * np.abs(want_h).max())
            np.testing.assert_allclose(out["logits"][b, :n], want_l, rtol=1e-4, atol=1e-4 * np.abs(want_l).max())


def test_fill_mask_and_embeddings_pipelines(bert_dir):
    d, model, tok = bert_dir
    texts = ["the cat sat on the [MASK]", "我 爱 [MASK] 京 and a [MASK] ball"]
    got = FillMask(d)(texts, top_k=3)
    for text, per_mask in zip(texts, got):
        enc = tok.encode(text)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([enc.ids])).logits[0]
        positions = [i for i, t in enumerate(enc.ids) if t == 4]
        assert len(per_mask) == len(positions) == text.count("[MASK]")
        for pos, best in zip(positions, per_mask):
            probs = torch.softmax(logits[pos].double(), 0)
            want = torch.topk(probs, 3)
            assert [t for t, _ in best] == [tok.id_to_token(int(i)) for i in want.indices]
            np.testing.assert_allclose([p for _, p in best], want.values.numpy(), rtol=1e-4)
    vectors = SentenceEmbedder(d)(["the cat sat", "a big red ball in the park"])
    for text, v in zip(["the cat sat", "a big red ball in the park"], vectors):
        with torch.no_grad():
            h = model.bert(input_ids=torch.tensor([tok.encode(text).ids])).last_hidden_state[0].mean(0).numpy()
        np.testing.assert_allclose(v, h / np.linalg.norm(h), rtol=1e-4, atol=1e-5)


def test_model_zoo_converts_and_runs_fill_mask(bert_dir, tmp_path, capsys):
    from model_zoo import cli
    d, _, _ = bert_dir
    want = FillMask(d)(["the cat sat on the [MASK]"], top_k=5)[0][0]
    assert cli.main(["convert", "bert-base-chinese", "--checkpoint", d, "--output", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert cli.main(["run", "bert-base-chinese", "--model", str(tmp_path / "m"), "--prompt",
                     "the cat sat on the [MASK]"]) == 0
    line = capsys.readouterr().out.strip()
    assert [item.split(":")[0] for item in line.split()] == [t for t, _ in want]
