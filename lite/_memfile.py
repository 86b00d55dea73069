"""Anonymous in-memory files for bytes that must not get a name on disk (a decrypted model, a converter's temporary
model): memfd where the system has it, an unlinked temporary file elsewhere."""
from __future__ import annotations

import os
import tempfile


def anonymous_fd(name: str) -> int:
    """A new, empty, nameless file open for reading and writing; its path is /proc/self/fd/<fd> on Linux."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name, 0)
    fd, path = tempfile.mkstemp(suffix=".ms")
    os.unlink(path)
    return fd
