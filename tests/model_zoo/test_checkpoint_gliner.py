"""GLiNER (gliner's uni-encoder span model on a DeBERTa-v3 backbone) through the checkpoint path: a tiny configuration
with seeded random weights and a word-piece tokenizer, saved by gliner itself (gliner_config.json,
pytorch_model.bin, tokenizer.json), converted with --fmk=HF and run by lite.span_ner.SpanNER: the span scores of two
texts within 1e-4 of gliner's PyTorch model, and predict_entities equal to gliner's (same spans, labels and order,
scores within 1e-5). DeBERTa's log-bucketed relative positions equal transformers' for every length to 600."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("gliner")

WORDS = ("alice bob carol paris london berlin works lives in at the company acme globex city person organization "
         "location visited and met with from to new york").split()
TEXTS = ["alice works at acme in paris and met bob from globex .",
         "carol lives in new york , visited london with alice , bob and the company globex-acme to berlin !"]
LABELS = ["person", "organization", "location"]


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", ",", ".", "!", "-"] + WORDS +
                                        ["##s", "##e", "##a", "a", "b", "c"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1),
                                                                                               ("[SEP]", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                   unk_token="[UNK]", mask_token="[MASK]")
    fast.add_tokens(["<<ENT>>", "<<SEP>>"], special_tokens=True)
    return fast


def tiny_gliner(directory, share_att_key=True):
    from gliner import GLiNERConfig
    from gliner.model import UniEncoderSpanGLiNER
    from transformers import DebertaV2Config
    fast = tokenizer()
    encoder = DebertaV2Config(vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=64, relative_attention=True,
                              position_buckets=8, max_relative_positions=24, pos_att_type=["p2c", "c2p"],
                              share_att_key=share_att_key, norm_rel_ebd="layer_norm", position_biased_input=False,
                              hidden_act="gelu", type_vocab_size=0, layer_norm_eps=1e-7)
    config = GLiNERConfig(model_name="microsoft/deberta-v3-small", encoder_config=encoder, hidden_size=24, max_width=4,
                          span_mode="markerV0", num_rnn_layers=1, dropout=0.0, vocab_size=len(fast),
                          class_token_index=fast.convert_tokens_to_ids("<<ENT>>"))
    torch.manual_seed(5)
    model = UniEncoderSpanGLiNER(config, tokenizer=fast).eval()
    with torch.no_grad():   # far from the initialisation's near-constant scores, so spans and labels are decided
        for name, p in model.named_parameters():
            if not name.endswith(("LayerNorm.weight", "LayerNorm.bias")):
                p.normal_(0.0, 0.25)
    model.save_pretrained(str(directory))
    return model


def torch_scores(model, text, labels):
    prepared = model.prepare_batch([text], labels, None)
    batch = model.collate_batch([prepared["input_x"][0]], prepared["entity_types"], model.create_collator())
    keys = ("input_ids", "attention_mask", "words_mask", "text_lengths", "span_idx", "span_mask")
    with torch.no_grad():
        logits = model.model(**{k: batch[k] for k in keys}).logits[0]   # [W, K, C]
    return logits.numpy(), batch["input_ids"][0].numpy()


@pytest.fixture(scope="module")
def gliner_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gliner")
    return tiny_gliner(d / "ckpt"), d / "ckpt"


def test_relative_positions_equal_transformers():
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    from model_zoo.encoders.deberta_graph import log_bucket_positions
    for buckets, max_pos in ((256, 512), (8, 24), (-1, -1)):
        for n in (1, 7, 130, 300, 600):
            x = torch.zeros(1, n, 4)
            want = build_relative_position(x, x, bucket_size=buckets, max_position=max_pos)[0].numpy()
            np.testing.assert_array_equal(log_bucket_positions(n, buckets, max_pos), want)


@pytest.mark.parametrize("share_att_key", [True, False])
def test_span_scores_equal_gliner(tmp_path, share_att_key):
    from lite.span_ner import SpanNER, split_words
    model = tiny_gliner(tmp_path / "ckpt", share_att_key)
    ner = SpanNER(str(tmp_path / "ckpt"))
    for text in TEXTS:
        want, want_ids = torch_scores(model, text, LABELS)
        words = [w for w, _, _ in split_words(text)]
        feeds, n = ner.inputs(words, LABELS)
        np.testing.assert_array_equal(feeds["input_ids"][0], want_ids)
        logits, spans, _ = ner.scores(words, LABELS)
        expected = want[spans[:, 0], spans[:, 1] - spans[:, 0]]
        np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def entities(found):
    return [(e["start"], e["end"], e["text"], e["label"]) for e in found]


def threshold_for(logits, passing=0.2):
    """A threshold about `passing` of the (span, label) pairs pass."""
    ranked = np.sort(logits.ravel())
    return float(1 / (1 + np.exp(-ranked[int(len(ranked) * (1 - passing))])))


@pytest.mark.parametrize("flat_ner,multi_label", [(True, False), (False, False), (True, True)])
def test_decoding_equals_gliner(gliner_dir, flat_ner, multi_label):
    """The decoder on gliner's own probabilities gives gliner's entities exactly (flat, nested, multi-label)."""
    from lite.span_ner import SpanNER, decode, split_words
    model, d = gliner_dir
    ner = SpanNER(str(d))
    for text in TEXTS:
        found = split_words(text)
        logits, spans, _ = ner.scores([w for w, _, _ in found], LABELS)
        threshold = threshold_for(logits)
        want = model.predict_entities(text, LABELS, threshold=threshold, flat_ner=flat_ner, multi_label=multi_label)
        assert want, "the threshold should let some entities through"
        probs = torch.sigmoid(torch.from_numpy(torch_scores(model, text, LABELS)[0]))
        got = decode(text, found, spans, probs[spans[:, 0], spans[:, 1] - spans[:, 0]].numpy(), LABELS, threshold,
                     flat_ner, multi_label)
        assert entities(got) == entities(want)
        np.testing.assert_array_equal([e["score"] for e in got], [e["score"] for e in want])


def test_predict_entities_equal_gliner(gliner_dir):
    """End to end (our scores, our decoding) the entities equal gliner's; the scores within 1e-5."""
    from lite.span_ner import SpanNER, split_words
    model, d = gliner_dir
    ner = SpanNER(str(d))
    for text in TEXTS:
        threshold = threshold_for(ner.scores([w for w, _, _ in split_words(text)], LABELS)[0])
        want = model.predict_entities(text, LABELS, threshold=threshold)
        got = ner.predict_entities(text, LABELS, threshold=threshold)
        assert want and entities(got) == entities(want)
        np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], rtol=1e-5, atol=1e-6)


def test_compressed_weights_stay_near(gliner_dir, tmp_path):
    import shutil

    from lite.span_ner import SpanNER, split_words
    model, d = gliner_dir
    shutil.copytree(d, tmp_path / "c")
    ner = SpanNER(str(tmp_path / "c"), weight_format="int8")
    words = [w for w, _, _ in split_words(TEXTS[0])]
    logits, spans, _ = ner.scores(words, LABELS)
    want = torch_scores(model, TEXTS[0], LABELS)[0][spans[:, 0], spans[:, 1] - spans[:, 0]]
    err = np.abs(logits - want).max() / np.abs(want).max()
    assert 0 < err < 5e-2


@pytest.mark.parametrize("edit,pattern", [
    (lambda c: c.pop("encoder_config"), "no encoder_config"),
    (lambda c: c.update(span_mode="token_level"), "span_mode 'token_level'"),
    (lambda c: c["encoder_config"].update(conv_kernel_size=3), "conv_kernel_size"),
])
def test_unsupported_configurations_are_named(gliner_dir, tmp_path, edit, pattern):
    import json
    import shutil

    from converter.api import Converter, FmkType
    from converter.ir import ConverterError
    _, d = gliner_dir
    shutil.copytree(d, tmp_path / "c")
    config = json.loads((tmp_path / "c" / "gliner_config.json").read_text())
    edit(config)
    (tmp_path / "c" / "gliner_config.json").write_text(json.dumps(config))
    with pytest.raises(ConverterError, match=pattern):
        Converter().convert(FmkType.HF, str(tmp_path / "c"), str(tmp_path / "out.ms"), verify_build=False)
    assert not (tmp_path / "out.ms").exists()


def test_registry_convert_and_run(gliner_dir, tmp_path, capsys):
    """python -m model_zoo convert / run for the registry's GLiNER row on the tiny checkpoint."""
    import json

    from model_zoo import cli
    model, d = gliner_dir
    assert cli.main(["convert", "GLiNER-Large-v2.5", "--checkpoint", str(d), "--output", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    text = TEXTS[0]
    assert cli.main(["run", "GLiNER-Large-v2.5", "--model", str(tmp_path / "m"), "--prompt", text,
                     "--threshold", "0.0"] + [a for label in LABELS for a in ("--label", label)]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    want = model.predict_entities(text, LABELS, threshold=0.0)
    assert entities(found) == entities(want)
