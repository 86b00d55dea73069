"""VGGT (Visual Geometry Grounded Transformer) and VGGT-Omega: feed-forward multi-view 3D reconstruction. VGGT patch-
embeds each frame with a DINOv2 ViT-L/14 (registers), adds a camera token and register tokens, and runs an aggregator
of 24 alternating frame-wise and global self-attention blocks; a camera head regresses each frame's pose encoding and
DPT heads predict depth and point maps (and a tracking head tracks query points). VGGT-Omega scales the recipe: one
dense head, registers that carry inter-frame information (register attention, partly replacing global attention) and
no high-resolution convolutions."""
from model_zoo.registry import Entry


def _vggt_1b():
    return dict(
        _parameters="1B",
        img_size=518, patch_size=14,
        patch_embed="dinov2_vitl14_reg",
        aggregator=dict(embed_dim=1024, depth=24, num_heads=16, mlp_ratio=4.0, num_register_tokens=4,
                        aa_order=["frame", "global"], aa_block_size=1, qk_norm=True, rope_freq=100),
        camera_head=dict(dim_in=2048),
        depth_head=dict(type="DPTHead", dim_in=2048, output_dim=2),
        point_head=dict(type="DPTHead", dim_in=2048, output_dim=4),
        track_head=dict(dim_in=2048, patch_size=14))


ENTRIES = [
    Entry(name="VGGT", category="driving_embodied", family="vggt", hub_id="facebook/VGGT-1B", config=_vggt_1b(),
          config_source=("the original project's code defaults (facebookresearch/vggt: VGGT(img_size=518, "
                         "patch_size=14, embed_dim=1024) and Aggregator(depth=24, num_heads=16, mlp_ratio=4, "
                         "num_register_tokens=4, patch_embed='dinov2_vitl14_reg', aa_order frame/global, qk_norm, "
                         "rope_freq=100), heads on 2*embed_dim), as found in public copies of vggt/models/vggt.py and "
                         "aggregator.py; the released checkpoint facebook/VGGT-1B is built with those defaults"),
          architecture=("VGGT project (facebookresearch/vggt): Aggregator (DINOv2 ViT-L/14 patch embed + alternating "
                        "frame/global attention) + CameraHead + DPTHead (depth, points) + TrackHead; no transformers "
                        "implementation"),
          graphs=("aggregator", "heads"), pipeline="depth", status="planned",
          missing=("no issue yet: graph builders from the VGGT checkpoint for the DINOv2 patch embedding, the "
                   "alternating frame / global attention aggregator (2D rotary, q/k norm, a frame count that varies "
                   "per call) and the camera and DPT heads, and a depth pipeline that turns the outputs into per-frame "
                   "depth, point maps and camera poses")),
    Entry(name="VGGT-Omega", category="driving_embodied", family="vggt", hub_id="facebookresearch/vggt-omega",
          config=dict(_parameters="1B"),
          config_source=("the VGGT-Omega paper (arXiv 2605.15195, CVPR 2026) as summarised in its abstract and public "
                         "reviews: a 1B-parameter flagship of a family scaled from 0.2B to 10B, with register "
                         "attention, a single dense head and no high-resolution convolutions. Code and configs were "
                         "announced as pending and none were found, so every hyper-parameter (depth, width, heads, "
                         "registers, input size) is left out"),
          architecture=("VGGT-Omega project (facebookresearch/vggt-omega): VGGT-style aggregator with register "
                        "attention + one dense prediction head; no transformers implementation"),
          graphs=("aggregator", "dense_head"), pipeline="depth", status="planned",
          missing=("no issue yet: the published architecture and checkpoint layout (not found), then graph builders "
                   "for its aggregator with register attention and its dense head, and the depth pipeline")),
]
