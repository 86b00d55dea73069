"""BERT (transformers model_type "bert"): word + position + token-type embeddings, post-LayerNorm encoder blocks
(multi-head self-attention, GELU MLP) and, for fill-mask, the MLM head (dense + GELU + LayerNorm, then the decoder
tied to the word embeddings)."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="bert-base-chinese", category="retrieval_vision", family="bert", model_type="bert",
          hub_id="google-bert/bert-base-chinese", architecture="transformers BertForMaskedLM -> model_zoo.encoders.bert_graph (lite.encoder_pipelines: FillMask, SentenceEmbedder)",
          config=dict(_parameters="102M", model_type="bert", vocab_size=21128, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2,
                      hidden_act="gelu", layer_norm_eps=1e-12, position_embedding_type="absolute", pad_token_id=0),
          config_source=("bert-base-chinese config.json as published (architectures BertForMaskedLM), transcribed "
                         "from public copies of it (e.g. Xenova/bert-base-chinese, _name_or_path bert-base-chinese): "
                         "vocab 21128, hidden 768, 12 layers, 12 heads, FFN 3072, 512 positions, 2 token types; "
                         "102M is BertModel's parameter count computed from these numbers"),
          graphs=("encoder",), pipeline="fill-mask", status="supported",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]},
          test="tests/model_zoo/test_checkpoint_bert.py::test_fill_mask_and_embeddings_pipelines"),
]


def _build(config, weights, **options):
    from model_zoo.encoders.bert_graph import build_bert_graph
    return build_bert_graph(config, weights, **options)


GRAPH_BUILDERS = {"bert": _build}
