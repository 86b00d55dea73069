"""Image preprocessing for detectors: RGB loading, bilinear resizing as OpenCV's INTER_LINEAR does it (half-pixel
centres, no antialiasing: what ultralytics' LetterBox calls), the letterbox (keep the aspect ratio, pad to the
model's size with grey 114, centred) and the inverse mapping of boxes to the original image."""
from __future__ import annotations

import numpy as np


def load_rgb(image) -> np.ndarray:
    """[H, W, 3] uint8 RGB from a path, a PIL image or an array ([H, W, 3] RGB or [H, W] grey; uint8, or float
    in [0, 1])."""
    if isinstance(image, (str, bytes)) or hasattr(image, "__fspath__"):
        from PIL import Image
        with Image.open(image) as im:
            return np.asarray(im.convert("RGB"))
    if hasattr(image, "convert") and hasattr(image, "size"):   # a PIL image
        return np.asarray(image.convert("RGB"))
    a = np.asarray(image)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"an image is [height, width, 3] RGB (or [height, width] grey), got shape {list(a.shape)}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"an empty image ({a.shape[0]}x{a.shape[1]})")
    if a.dtype == np.uint8:
        return a
    if np.issubdtype(a.dtype, np.floating):
        if not np.isfinite(a).all():
            raise ValueError("the image has NaN or infinite pixels")
        return np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)
    raise ValueError(f"image pixels are uint8 or float in [0, 1], got {a.dtype}")


def _axis_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source index pairs and the weight of the second, for half-pixel-centre linear interpolation (edges clamped)."""
    x = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    x = np.clip(x, 0.0, n_in - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, (x - lo).astype(np.float32)


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """[H, W, C] -> [height, width, C], separable linear interpolation; uint8 in, uint8 out (rounded: the runtime's
    C++ loop, lite/src/cpu/image/resize_bilinear.h), float in, float out."""
    if image.dtype == np.uint8 and image.ndim == 3:
        from .._lite import resize_bilinear_u8
        return resize_bilinear_u8(image, height, width)
    lo, hi, t = _axis_weights(image.shape[0], height)   # rows first, converting only the rows read
    t = t[:, None, None]
    rows = image[lo].astype(np.float32)
    rows += (image[hi].astype(np.float32) - rows) * t
    lo, hi, t = _axis_weights(image.shape[1], width)
    t = t[None, :, None]
    out = rows[:, lo]
    out += (rows[:, hi] - out) * t
    return np.clip(np.rint(out), 0, 255).astype(np.uint8) if image.dtype == np.uint8 else out


def letterbox(image: np.ndarray, height: int, width: int, fill: int = 114) -> tuple[np.ndarray, float,
                                                                                    tuple[int, int]]:
    """(the [height, width, 3] letterboxed image, the scale, (left, top) padding): ultralytics' LetterBox with
    auto=False, scaleup=True, center=True (round half to even where it rounds, as Python's round does)."""
    h0, w0 = image.shape[:2]
    r = min(height / h0, width / w0)
    new_w, new_h = int(round(w0 * r)), int(round(h0 * r))
    dw, dh = (width - new_w) / 2, (height - new_h) / 2
    if (new_h, new_w) != (h0, w0):
        image = resize_bilinear(image, new_h, new_w)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    out = np.full((new_h + top + bottom, new_w + left + right, image.shape[2]), fill, dtype=image.dtype)
    out[top:top + new_h, left:left + new_w] = image
    return out, r, (left, top)


def scale_boxes(boxes: np.ndarray, model_shape: tuple[int, int], image_shape: tuple[int, int]) -> np.ndarray:
    """x1, y1, x2, y2 on the letterboxed model input -> on the original image (ultralytics' scale_boxes: the gain
    and padding recomputed from the two shapes), clipped to it."""
    gain = min(model_shape[0] / image_shape[0], model_shape[1] / image_shape[1])
    pad_x = round((model_shape[1] - image_shape[1] * gain) / 2 - 0.1)
    pad_y = round((model_shape[0] - image_shape[0] * gain) / 2 - 0.1)
    out = boxes.astype(np.float32).copy()
    out[:, [0, 2]] = (out[:, [0, 2]] - pad_x) / gain
    out[:, [1, 3]] = (out[:, [1, 3]] - pad_y) / gain
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, image_shape[1])
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, image_shape[0])
    return out
