"""BEVDet (camera-only 3D detection on nuScenes): a ResNet-50 image backbone over six surround cameras, an FPN neck,
a Lift-Splat-Shoot view transformer (a depth distribution per image-feature pixel, pooled into a bird's-eye-view
grid), a BEV encoder (residual backbone + FPN_LSS neck) and a CenterPoint-style CenterHead with six task groups."""
from model_zoo.registry import Entry


def _bevdet_r50():
    return dict(
        _parameters="ResNet-50 backbone",
        cameras=6, input_size=[256, 704], source_size=[900, 1600],
        img_backbone=dict(type="ResNet", depth=50, out_indices=[2, 3]),
        img_neck=dict(type="FPNForBEVDet", in_channels=[1024, 2048], out_channels=512),
        view_transformer=dict(type="ViewTransformerLiftSplatShoot", out_channels=64,
                              xbound=[-51.2, 51.2, 0.8], ybound=[-51.2, 51.2, 0.8], zbound=[-10.0, 10.0, 20.0],
                              dbound=[1.0, 60.0, 1.0]),
        bev_grid=[128, 128],
        bev_encoder=dict(backbone="ResNetForBEVDet", in_channels=64, neck="FPN_LSS", neck_in_channels=640,
                         out_channels=256),
        head=dict(type="CenterHead", in_channels=256, share_conv_channel=64, out_size_factor=8,
                  tasks=[["car"], ["truck", "construction_vehicle"], ["bus", "trailer"], ["barrier"],
                         ["motorcycle", "bicycle"], ["pedestrian", "traffic_cone"]],
                  common_heads=dict(reg=2, height=1, dim=3, rot=2, vel=2)),
        num_classes=10, point_cloud_range=[-51.2, -51.2, -5.0, 51.2, 51.2, 3.0])


ENTRIES = [
    Entry(name="BEVDet-R50", category="driving_embodied", family="bevdet", hub_id="HuangJunJie2017/BEVDet",
          config=_bevdet_r50(),
          config_source=("the original project's configs/bevdet/bevdet-r50.py (HuangJunJie2017/BEVDet, the stored "
                         "version at commit fb9cae66, read with read_file): ResNet-50 with FPNForBEVDet to 512 "
                         "channels, LSS to 64 channels on a 0.8 m grid (128x128 over +-51.2 m, depth bins 1-60 m), BEV "
                         "encoder to 256, CenterHead with 10 nuScenes classes in 6 tasks. bev_grid is derived from "
                         "the bounds (102.4 m / 0.8 m). Later versions of the repository (dev2.x) use a CustomFPN to "
                         "256 channels instead; the parameter count is not stated there and is left out"),
          architecture="BEVDet project (mmdetection3d plugin): ResNet + FPNForBEVDet + ViewTransformerLiftSplatShoot "
                       "+ ResNetForBEVDet + FPN_LSS + CenterHead; no transformers implementation",
          graphs=("backbone", "view_transform", "head"), pipeline="detect", status="planned",
          missing=("no issue yet: graph builders from the BEVDet checkpoint (an mmdetection3d state dict) for the "
                   "image backbone and neck, the LSS view transform (depth softmax, outer product with the context "
                   "features and the BEV pooling, e.g. a ScatterND add over indices precomputed from the camera "
                   "geometry), the BEV encoder and CenterHead, and a detect pipeline that decodes the "
                   "CenterHead heatmaps into 3D boxes with per-task NMS")),
]
