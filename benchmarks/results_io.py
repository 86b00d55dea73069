"""Writing result tables: atomically (temp file in the same directory, then rename), so an interrupted run
never leaves a half-written table."""
from __future__ import annotations

import os
import tempfile


def write_table(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=d, delete=False, suffix=".tmp") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    os.replace(f.name, path)
