"""FlashOCC (camera-only 3D semantic occupancy on Occ3D-nuScenes): BEVDet's image side (ResNet-50, CustomFPN, LSS
view transform collapsed to a 2D bird's-eye-view map) and BEV encoder, then a 2D occupancy head whose channel-to-height
reshape turns each BEV cell's features into Dz height bins of per-voxel class logits (no 3D convolutions)."""
from model_zoo.registry import Entry


def _flashocc_r50():
    return dict(
        _parameters="ResNet-50 backbone",
        cameras=6, input_size=[256, 704], source_size=[900, 1600],
        img_backbone=dict(type="ResNet", depth=50, out_indices=[2, 3]),
        img_neck=dict(type="CustomFPN", in_channels=[1024, 2048], out_channels=256),
        view_transformer=dict(type="LSSViewTransformer", in_channels=256, out_channels=64, downsample=16,
                              collapse_z=True, x=[-40, 40, 0.4], y=[-40, 40, 0.4], z=[-1, 5.4, 6.4],
                              depth=[1.0, 45.0, 0.5]),
        bev_grid=[200, 200],
        bev_encoder=dict(backbone="CustomResNet", in_channels=64, num_channels=[128, 256, 512], neck="FPN_LSS",
                         neck_in_channels=640, out_channels=256),
        occ_head=dict(type="BEVOCCHead2D", in_dim=256, out_dim=256, Dz=16, num_classes=18, use_predicter=True),
        num_classes=18)


ENTRIES = [
    Entry(name="FlashOCC", category="driving_embodied", family="flashocc", hub_id="Yzichen/FlashOCC",
          config=_flashocc_r50(),
          config_source=("the original project's projects/configs/flashocc/flashocc-r50.py (Yzichen/FlashOCC, read "
                         "with read_file): ResNet-50 + CustomFPN to 256, LSS to 64 channels on a 0.4 m grid over "
                         "+-40 m (200x200, derived from the bounds), depth bins 1-45 m by 0.5, BEV encoder to 256, "
                         "BEVOCCHead2D with Dz 16 and 18 classes (17 semantic + free). 'FlashOCC' is taken to be the "
                         "R50 configuration (the repository also has M0, R101, 4D-stereo and Swin-B ones); the "
                         "parameter count is not stated and is left out"),
          architecture=("FlashOCC project (mmdetection3d plugin, BEVDetOCC): ResNet + CustomFPN + LSSViewTransformer + "
                        "CustomResNet + FPN_LSS + BEVOCCHead2D; no transformers implementation"),
          graphs=("backbone", "view_transform", "head"), pipeline="segment", status="planned",
          missing=("no issue yet: graph builders from the FlashOCC checkpoint (an mmdetection3d state dict) for the "
                   "image backbone and neck, the LSS view transform (depth softmax and the BEV pooling, e.g. a "
                   "ScatterND add over indices precomputed from the camera geometry), the BEV encoder and the "
                   "channel-to-height occupancy head, and a segment pipeline that turns the 200x200x16 logits into an "
                   "occupancy grid")),
]
