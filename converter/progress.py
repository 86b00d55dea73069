"""Progress of long conversions (optimisation passes, calibration samples, GPTQ layers, weights written): a bar on
stderr where it is a terminal, INFO log lines otherwise (shown with converter_lite -v / --logLevel=INFO)."""
from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("converter")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(level: str) -> None:
    """converter_lite --logLevel: where the converter's log lines go (stderr) and from which level."""
    level = level.upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[converter] %(levelname)s %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


class Progress:
    """`total` steps of one phase. On a terminal a bar redrawn in place (at most 10 times a second); elsewhere one
    INFO line at the start and one at the end, and DEBUG lines per step."""

    def __init__(self, label: str, total: int, stream=None, enabled: bool = True) -> None:
        self.label, self.total, self.done, self.enabled = label, max(int(total), 0), 0, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.bar = enabled and bool(getattr(self.stream, "isatty", lambda: False)()) and \
            log.getEffectiveLevel() <= logging.WARNING
        self.t0 = self._drawn = time.perf_counter()
        if enabled and not self.bar:
            log.info("%s: %d steps", label, self.total)

    def step(self, detail: str = "", n: int = 1) -> None:
        self.done = min(self.done + n, self.total) if self.total else self.done + n
        if not self.enabled:
            return
        if self.bar:
            now = time.perf_counter()
            if now - self._drawn >= 0.1 or self.done == self.total:
                self._draw(detail)
                self._drawn = now
        else:
            log.debug("%s: %d/%d %s", self.label, self.done, self.total, detail)

    def _draw(self, detail: str) -> None:
        width = 30
        filled = width * self.done // self.total if self.total else width
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{detail[:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
        if self.bar:
            self._draw("")
            self.stream.write(f" {elapsed:.1f} s\n")
            self.stream.flush()
        else:
            log.info("%s: %d/%d done in %.2f s", self.label, self.done, self.total, elapsed)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
