"""multimodal"""
