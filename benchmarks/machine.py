"""The machine a result table was measured on, and the packages it ran, for its header."""
from __future__ import annotations

import platform


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def package_version(package: str) -> str:
    """An installed distribution's version, or "(not installed)"."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return "(not installed)"
