"""Grounding DINO (transformers model_type "grounding-dino", GroundingDinoForObjectDetection): open-vocabulary
detection from an image and a text prompt. A Swin backbone (three feature levels plus one extra) and a BERT text
encoder feed a feature enhancer (deformable self-attention on the image, self-attention on the text,
image-to-text and text-to-image cross-attention), language-guided query selection (900 queries) and a cross-modality
decoder with deformable attention; boxes come with per-token logits matched back to the prompt's phrases."""
from model_zoo.registry import Entry

ENTRIES = [
    Entry(name="Grounding-DINO-Base", category="retrieval_vision", family="grounding_dino",
          model_type="grounding-dino", hub_id="IDEA-Research/grounding-dino-base",
          architecture="transformers GroundingDinoForObjectDetection (Swin backbone + BERT text encoder)",
          config=dict(model_type="grounding-dino",
                      backbone_config=dict(model_type="swin", embed_dim=128, depths=[2, 2, 18, 2],
                                           num_heads=[4, 8, 16, 32], window_size=12, image_size=384,
                                           out_features=["stage2", "stage3", "stage4"]),
                      text_config=dict(model_type="bert"),
                      d_model=256, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                      decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, encoder_n_points=4,
                      decoder_n_points=4, num_feature_levels=4, num_queries=900, max_text_len=256,
                      activation_function="relu", position_embedding_type="sine",
                      positional_embedding_temperature=20, decoder_bbox_embed_share=True, query_dim=4),
          config_source=("IDEA-Research/grounding-dino-base config.json as shown on its Hugging Face page (Swin-B "
                         "backbone: embed_dim 128, depths [2, 2, 18, 2], heads [4, 8, 16, 32], window 12, 384 px; "
                         "d_model 256, 6+6 layers, FFN 2048, 8 heads, 4 sampling points, 4 levels, 900 queries, "
                         "256 text tokens); the text encoder's own numbers (bert-base-uncased in transformers' "
                         "defaults) and the parameter count are left out (not seen in that config)"),
          graphs=("detector",), pipeline="detect", status="planned",
          missing=("no checkpoint path: issue 34's frontend does not cover model_type grounding-dino, and it is not "
                   "among the ONNX models this project runs either; the runtime has no multi-scale deformable "
                   "attention (bilinear sampling of 4 points on each of 4 feature levels per head and query; there "
                   "is no GridSample kernel), and a builder would also have to express Swin's shifted-window "
                   "attention (cyclic shift, window partition, relative position bias), the BERT text encoder with "
                   "phrase-level masks and the image-text fusion layers; the detect pipeline needs the '.'-separated "
                   "phrase prompt, box/text thresholds and the mapping of token logits back to phrases")),
]
