import os

import pytest

CACHE_DIR = os.path.join(os.path.dirname(__file__), ".cache")


@pytest.fixture(scope="session")
def cache_dir() -> str:
    """Generated models are cached here between runs (tests/.cache, git-ignored)."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    return CACHE_DIR
