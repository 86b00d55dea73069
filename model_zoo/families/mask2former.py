"""Mask2Former (Mask2FormerForUniversalSegmentation): a backbone (here Swin-S), a multi-scale deformable-attention
pixel decoder, and a transformer decoder whose queries cross-attend with masked attention to the pixel features and
each predict a class and a mask."""
from model_zoo.registry import Entry


def _swin_small_coco_instance():
    backbone = dict(model_type="swin", embed_dim=96, depths=[2, 2, 18, 2], num_heads=[3, 6, 12, 24], window_size=7,
                    patch_size=4, out_features=["stage1", "stage2", "stage3", "stage4"])
    return dict(_parameters="Swin-S backbone", model_type="mask2former", backbone_config=backbone, feature_size=256,
                mask_feature_size=256, hidden_dim=256, encoder_layers=6, encoder_feedforward_dim=1024,
                decoder_layers=10, num_attention_heads=8, dim_feedforward=2048, num_queries=100, common_stride=4,
                num_labels=80)


ENTRIES = [
    Entry(name="Mask2Former", category="driving_embodied", family="mask2former",
          hub_id="facebook/mask2former-swin-small-coco-instance", model_type="mask2former",
          config=_swin_small_coco_instance(),
          config_source=("transformers 5.24's Mask2FormerConfig defaults (with its default SwinConfig backbone), "
                         "whose docstring names facebook/mask2former-swin-small-coco-instance; num_labels 80 is COCO "
                         "instance segmentation's class count. 'Mask2Former' is taken to be that checkpoint (the one "
                         "transformers documents); its config.json was not read (the Hub is not reachable from this "
                         "machine), and the parameter count is left out"),
          architecture=("transformers Mask2FormerForUniversalSegmentation (SwinBackbone + Mask2FormerPixelDecoder with "
                        "multi-scale deformable attention + Mask2FormerTransformerDecoder)"),
          graphs=("backbone", "head"), pipeline="segment", status="planned",
          missing=("no issue yet: graph builders from the checkpoint for the Swin backbone (shifted-window "
                   "attention), the pixel decoder's multi-scale deformable attention (a sampling op the converter "
                   "would need) and the masked-attention transformer decoder, and a segment pipeline that turns class "
                   "and mask logits into instance masks")),
]
