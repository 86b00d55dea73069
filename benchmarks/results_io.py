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


def publish(lines: list[str], out: str | None) -> int:
    """A benchmark's table: printed, and written to `out` when given. Returns the script's exit status (0)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        write_table(out, text)
    return 0
