import glob
import os

import pytest


def _has_cuda() -> bool:
    # No NVIDIA device node, no CUDA: decided without importing torch (~1.4 s), which the suites the tests rerun in
    # child processes (other ISAs, layouts) would otherwise pay each time.
    if not glob.glob("/dev/nvidia[0-9]*"):
        return False
    import torch
    return torch.cuda.is_available()


# Triton kernels (lite_boost's GPU RainFusion) run through Triton's interpreter where there is no GPU; the mode is
# fixed when triton is first imported, so it is chosen here, before any test imports it.
if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")

CACHE_DIR = os.path.join(os.path.dirname(__file__), ".cache")


@pytest.fixture(scope="session")
def cache_dir() -> str:
    """Generated models are cached here between runs (tests/.cache, git-ignored)."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    return CACHE_DIR
