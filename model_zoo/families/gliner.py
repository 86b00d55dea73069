"""GLiNER (the gliner package; not in transformers): zero-shot named-entity recognition. The entity labels are
prepended to the text as <<ENT>> label ... <<SEP>> prompt tokens, a bidirectional encoder (DeBERTa-v3 for the large
models) encodes prompt and words together, a BiLSTM refines the word representations, and a span head
(span_mode markerV0) scores every span of up to max_width words against every label embedding."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="GLiNER-Large-v2.5", category="retrieval_vision", family="gliner", model_type="gliner",
          hub_id="gliner-community/gliner_large-v2.5",
          architecture=("gliner UniEncoderSpanGLiNER (the original project's code): transformers DebertaV2Model "
                        "encoder + BiLSTM + span-marker head -> model_zoo.encoders.gliner_graph "
                        "(model_zoo.encoders.deberta_graph: "
                        "disentangled attention as the fused Attention's additive mask); pipeline lite.span_ner"),
          config=dict(model_type="gliner",
                      encoder=dict(model_type="deberta-v2", name="microsoft/deberta-v3-large", hidden_size=1024,
                                   num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                                   vocab_size=128100, max_position_embeddings=512, relative_attention=True,
                                   position_buckets=256, pos_att_type=["p2c", "c2p"], share_att_key=True,
                                   norm_rel_ebd="layer_norm", position_biased_input=False, hidden_act="gelu",
                                   layer_norm_eps=1e-7)),
          config_source=("the encoder is microsoft/deberta-v3-large (the backbone named in the gliner_config.json of "
                         "every published GLiNER large model seen: urchade/gliner_large-v1, gliner_large_bio-v0.2, "
                         "Ihor/gliner-large-v2.1-post-train); its numbers are deberta-v3-large's config.json as "
                         "published. gliner_large-v2.5's own gliner_config.json was not reachable, so its span-head "
                         "settings (hidden_size, max_width, max_len, span_mode, class token index) and the "
                         "parameter count are left out; that v2.5 keeps the deberta-v3-large backbone is assumed, "
                         "not seen"),
          graphs=("gliner_scores",), pipeline="ner", status="supported",
          test="tests/model_zoo/test_checkpoint_gliner.py::test_predict_entities_equal_gliner",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"],
                     "note": "the directory gliner saves: gliner_config.json (with encoder_config), "
                             "pytorch_model.bin or model.safetensors, tokenizer.json"}),
]


def _build(config, weights, **options):
    from model_zoo.encoders.gliner_graph import build_gliner_graph
    return build_gliner_graph(config, weights, **options)


GRAPH_BUILDERS = {"gliner": _build}
