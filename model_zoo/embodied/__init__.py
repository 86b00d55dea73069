"""Embodied-AI policies (vision-language-action models) built from their checkpoints\x27 tensors."""
