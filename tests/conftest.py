import os

import pytest
import torch

# Triton kernels (lite_boost's GPU RainFusion) run through Triton's interpreter where there is no GPU; the mode is
# fixed when triton is first imported, so it is chosen here, before any test imports it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

CACHE_DIR = os.path.join(os.path.dirname(__file__), ".cache")


@pytest.fixture(scope="session")
def cache_dir() -> str:
    """Generated models are cached here between runs (tests/.cache, git-ignored)."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    return CACHE_DIR
