"""A Conv's sliding window from its IR attributes (docs/ops.md): strides, dilations and explicit begin/end pads for
given input sizes, auto_pad resolved as the runtime resolves it (lite/src/kernels/spatial.cc)."""
from __future__ import annotations

from dataclasses import dataclass

NOTSET, SAME_UPPER, SAME_LOWER, VALID = 0, 1, 2, 3


@dataclass
class ConvWindow:
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pads: list[int]          # ONNX order: the begins of every spatial dim, then the ends

    def span(self, i: int) -> int:
        """Input positions one output reads along spatial dim i (the dilated kernel)."""
        return self.dilations[i] * (self.kernel[i] - 1) + 1

    def output_size(self, i: int, size: int) -> int | None:
        """Outputs along spatial dim i for `size` inputs, or None when the padded input is shorter than the window."""
        padded = size + self.pads[i] + self.pads[len(self.kernel) + i]
        return None if padded < self.span(i) else (padded - self.span(i)) // self.strides[i] + 1


def conv_window(attrs: dict, kernel: list[int], sizes: list[int]) -> ConvWindow | None:
    """The window over inputs of spatial `sizes`; None when the attributes do not fit that many dims."""
    spatial = len(sizes)
    strides = list(attrs.get("strides") or [1] * spatial)
    dilations = list(attrs.get("dilations") or [1] * spatial)
    pads = list(attrs.get("pads") or [0] * (2 * spatial))
    if len(kernel) != spatial or len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
        return None
    window = ConvWindow(list(kernel), strides, dilations, pads)
    auto_pad = int(attrs.get("auto_pad", NOTSET) or NOTSET)
    if auto_pad in (SAME_UPPER, SAME_LOWER):   # the output is ceil(size / stride), the odd pad at the end (UPPER)
        for i, size in enumerate(sizes):
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + window.span(i) - size)
            small = total // 2
            pads[i], pads[spatial + i] = (small, total - small) if auto_pad == SAME_UPPER else (total - small, small)
    elif auto_pad == VALID:
        window.pads = [0] * (2 * spatial)
    return window
