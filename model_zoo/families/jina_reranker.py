"""jina-reranker-v3: a listwise reranker on a Qwen3-0.6B decoder ("last but not late interaction"). The query and up
to 64 candidate documents share one causal context; the hidden states at the query's and each document's last token
go through a small MLP projector (1024 -> 512 -> 256) and the documents are ranked by cosine similarity to the
query. The checkpoint's config.json is a transformers qwen3 config with architectures ["JinaForRanking"] (remote
code, modeling.JinaForRanking)."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="jina-reranker-v3", category="retrieval_vision", family="jina_reranker", model_type="qwen3",
          hub_id="jinaai/jina-reranker-v3",
          architecture=("JinaForRanking (the checkpoint's remote code, auto_map modeling.JinaForRanking): "
                        "transformers Qwen3Model backbone + MLP projector 1024->512->256"),
          config=dict(_parameters="0.6B", model_type="qwen3", hidden_size=1024, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                      vocab_size=151936, max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      hidden_act="silu", attention_bias=False, tie_word_embeddings=True,
                      projector_dims=[1024, 512, 256], max_documents=64),
          config_source=("jinaai/jina-reranker-v3 config.json as shown on its Hugging Face page (architectures "
                         "JinaForRanking, model_type qwen3, 28 layers, hidden 1024, 16/8 heads of 128, FFN 3072, "
                         "vocab 151936, 131072 positions, rope_theta 1e6); projector dims, 0.6B size and the "
                         "64-documents-per-window figure from the model card and Jina's release post; the projector's "
                         "activation and the exact marker tokens are left out (not seen)"),
          graphs=("encoder",), pipeline="rerank", status="planned",
          missing=("the checkpoint frontend (converter_lite --fmk=HF) has no builder for it yet; from the safetensors: the Qwen3 "
                   "decoder run once over the whole listwise prompt (no KV cache kept), returning the final hidden "
                   "states at the query's and every document's last-token positions instead of logits, then the "
                   "MLP projector and cosine scores; the rerank pipeline's listwise prompt template (query and up "
                   "to 64 documents in one window) and the weights of the projector, which live outside "
                   "Qwen3ForCausalLM's tensor names")),
]
