"""jina-reranker-v3: a listwise reranker on a Qwen3-0.6B decoder ("last but not late interaction"). The query and up
to 64 candidate documents share one causal context; the hidden states at the query's and each document's last token
go through a small MLP projector (1024 -> 512 -> 512, ReLU, no biases) and the documents are ranked by cosine
similarity to the query. The checkpoint's config.json is a transformers qwen3 config with architectures
["JinaForRanking"] (remote code, modeling.JinaForRanking)."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="jina-reranker-v3", category="retrieval_vision", family="jina_reranker", model_type="qwen3",
          hub_id="jinaai/jina-reranker-v3",
          architecture=("JinaForRanking (the checkpoint's remote code, auto_map modeling.JinaForRanking): "
                        "transformers Qwen3Model backbone + MLP projector 1024->512->512 -> model_zoo.language.decoder_graph "
                        "(head projector); pipeline lite.llm.retrieval.ListwiseReranker"),
          config=dict(_parameters="0.6B", model_type="qwen3", hidden_size=1024, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                      vocab_size=151936, max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      hidden_act="silu", attention_bias=False, tie_word_embeddings=True,
                      projector_dims=[1024, 512, 512], max_documents=64),
          config_source=("jinaai/jina-reranker-v3 config.json as shown on its Hugging Face page (architectures "
                         "JinaForRanking, model_type qwen3, 28 layers, hidden 1024, 16/8 heads of 128, FFN 3072, "
                         "vocab 151936, 131072 positions, rope_theta 1e6); 0.6B size and the 64-documents figure from the "
                         "model card and Jina's release post; the projector (Linear 1024->512, ReLU, Linear "
                         "512->512, no biases), the marker tokens <|embed_token|> / <|rerank_token|> and the listwise "
                         "prompt from the checkpoint's published modeling.py as transcribed in public code (the "
                         "model card's 256-dim figure disagrees with that code; the converter reads the projector's "
                         "shapes from the checkpoint)"),
          graphs=("decoder_projector",), pipeline="rerank", status="supported",
          test="tests/model_zoo/test_jina_reranker.py::test_one_block_scores_equal_the_reference",
          converter={"fmk": "HF", "precisions": ["float32", "bfloat16", "float16", "int8", "int4"]}),
]
