"""GLiNER span models (the gliner package's UniEncoderSpanModel, span_mode markerV0) built from the checkpoint's
gliner_config.json and weights: the DeBERTa encoder over "<<ENT>> label ... <<SEP>> words"
(model_zoo.encoders.deberta_graph), its projection to the span head's width, the label embeddings at the <<ENT>> tokens
and the word embeddings at each word's first sub-token, the BiLSTM over the words, and the span-marker head: start and
end MLPs gathered at each candidate span's first and last word, concatenated, ReLU, an output MLP; the labels through
the prompt MLP; scores = span representations x label representations.

One text per run. Inputs: input_ids [1, S]; c2p_index / p2c_index [S, S] (deberta_graph.relative_position_indices);
word_index [W] (each word's first sub-token), class_index [C] (each label's <<ENT>> token), span_start / span_end
[N] (the candidate spans' first and last word). Output: scores [N, C], logits (the pipeline applies the sigmoid)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from converter.ir import ConverterError, Graph

from .deberta_graph import deberta_encoder
from ..graph_builder import I64, GraphBuilder

ENCODER = "token_rep_layer.bert_layer.model."


def _projection(b: GraphBuilder, x: str, prefix: str, hint: str, n_in: int, n_out: int) -> str:
    """create_projection_layer: Linear(n_in, 4 n_out), ReLU, (dropout), Linear(4 n_out, n_out)."""
    h = b.linear(x, prefix + ".0", f"{hint}_up", n_in, 4 * n_out, activation="relu")
    return b.linear(h, prefix + ".3", f"{hint}_down", 4 * n_out, n_out)


def _lstm_weights(b: GraphBuilder, prefix: str, hidden: int, n_in: int):
    """PyTorch's bidirectional LSTM weights as ONNX LSTM's W [2, 4h, in], R [2, 4h, h], B [2, 8h]: gates i f g o
    reordered to ONNX's i o f c."""
    order = np.concatenate([np.arange(0, hidden), np.arange(3 * hidden, 4 * hidden), np.arange(hidden, 2 * hidden),
                            np.arange(2 * hidden, 3 * hidden)])
    W, R, B = [], [], []
    for suffix in ("", "_reverse"):
        W.append(b.weight(f"{prefix}.weight_ih_l0{suffix}", (4 * hidden, n_in))[order])
        R.append(b.weight(f"{prefix}.weight_hh_l0{suffix}", (4 * hidden, hidden))[order])
        B.append(np.concatenate([b.weight(f"{prefix}.bias_ih_l0{suffix}", (4 * hidden,))[order],
                                 b.weight(f"{prefix}.bias_hh_l0{suffix}", (4 * hidden,))[order]]))
    return b.const("lstm_W", np.stack(W)), b.const("lstm_R", np.stack(R)), b.const("lstm_B", np.stack(B))


def build_gliner_graph(config: Mapping, weights: Mapping[str, np.ndarray], weight_format: str = "float32",
                       group_size: int = 32, head: str | None = None, **_) -> Graph:
    if head not in (None, "logits", "scores"):
        raise ValueError(f"GLiNER's only head is its span scores, not {head!r}")
    get = config.get
    encoder = get("encoder_config")
    if not isinstance(encoder, Mapping):
        raise ConverterError("gliner_config.json has no encoder_config (the backbone's architecture and sizes); "
                             "save the model with a gliner release that writes it, or add the backbone's config.json "
                             "values there")
    unsupported = []
    if encoder.get("model_type") != "deberta-v2":
        unsupported.append(f"encoder {encoder.get('model_type')!r} (DeBERTa-v2/v3 only)")
    if get("span_mode", "markerV0") != "markerV0":
        unsupported.append(f"span_mode {get('span_mode')!r} (markerV0 only)")
    if get("subtoken_pooling", "first") != "first":
        unsupported.append(f"subtoken_pooling {get('subtoken_pooling')!r} (first only)")
    if int(get("num_rnn_layers", 1)) not in (0, 1):
        unsupported.append(f"num_rnn_layers {get('num_rnn_layers')} (0 or 1)")
    for key in ("post_fusion_schema", "labels_encoder", "labels_decoder", "relations_layer", "span_encoder_config"):
        if get(key):
            unsupported.append(f"{key} {get(key)!r} (plain uni-encoder span models only)")
    if get("fuse_layers"):
        unsupported.append("fuse_layers")
    if unsupported:
        raise NotImplementedError("GLiNER: " + "; ".join(unsupported) + " not supported yet")
    H_enc, H = int(encoder["hidden_size"]), int(config["hidden_size"])

    b = GraphBuilder("gliner", weights, weight_format, group_size)
    ids = b.input("input_ids", [1, -1], I64)
    c2p = b.input("c2p_index", [-1, -1], I64)
    p2c = b.input("p2c_index", [-1, -1], I64)
    word_index = b.input("word_index", [-1], I64)
    class_index = b.input("class_index", [-1], I64)
    span_start = b.input("span_start", [-1], I64)
    span_end = b.input("span_end", [-1], I64)

    x = deberta_encoder(b, encoder, ENCODER, ids, c2p, p2c)   # [1, S, H_enc]
    x = b.node("Reshape", [x, b.const("tokens_flat", np.array([-1, H_enc], np.int64))], hint="tokens")
    if "token_rep_layer.projection.weight" in weights:
        x = b.linear(x, "token_rep_layer.projection", "projection", H_enc, H)
    elif H != H_enc:
        raise ConverterError(f"hidden_size {H} differs from the encoder's {H_enc} but there is no projection")
    words = b.node("Gather", [x, word_index], {"axis": 0}, hint="words")        # [W, H]
    labels = b.node("Gather", [x, class_index], {"axis": 0}, hint="labels")     # [C, H]
    if int(get("num_rnn_layers", 1)):
        seq = b.node("Unsqueeze", [words, b.const("batch_axis", np.array([1], np.int64))], hint="words_seq")
        W, R, B = _lstm_weights(b, "rnn.lstm", H // 2, H)
        y = b.node("LSTM", [seq, W, R, B], {"hidden_size": H // 2, "direction": 2, "_num_outputs": 1}, hint="lstm")
        words = b.node("Reshape", [y, b.const("lstm_flat", np.array([-1, H], np.int64))], hint="words_lstm")
    span = "span_rep_layer.span_rep_layer."
    start = b.node("Gather", [_projection(b, words, span + "project_start", "start", H, H), span_start], {"axis": 0},
                   hint="span_start_rep")
    end = b.node("Gather", [_projection(b, words, span + "project_end", "end", H, H), span_end], {"axis": 0},
                 hint="span_end_rep")
    cat = b.node("Relu", [b.node("Concat", [start, end], {"axis": 1}, hint="span_cat")], hint="span_cat_relu")
    spans = _projection(b, cat, span + "out_project", "span_out", 2 * H, H)   # [N, H]
    prompts = _projection(b, labels, "prompt_rep_layer", "prompt", H, H)       # [C, H]
    scores = b.node("MatMul", [spans, b.node("Transpose", [prompts], {"perm": [1, 0]}, hint="prompts_t")],
                    hint="span_scores")
    scores = b.rename(scores, "scores")
    b.g.outputs.append(scores)
    b.g.metadata.update({"producer": "model_zoo.encoders.gliner_graph",
                         "architecture": "GLiNER uni-encoder span (markerV0)",
                         "weight_format": weight_format, "head": "scores"})
    return b.g
