"""Embodied-AI policies on the runtime: observations (camera images, a task, the robot state) in, actions out."""
from .openvla import OpenVLAPolicy
from .pi05 import Pi05Policy

__all__ = ["OpenVLAPolicy", "Pi05Policy"]
