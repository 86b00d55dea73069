"""Audio front end for speech models, in NumPy: reading and resampling audio, and the Whisper-style log-mel
spectrogram (transformers' WhisperFeatureExtractor / Qwen3ASRFeatureExtractor: a centred STFT with a periodic Hann
window and reflect padding, the last frame dropped, power spectrum through Slaney-normalised mel filters, log10
clamped to 8 below the maximum, then (x + 4) / 4)."""
from __future__ import annotations

import io
import os
import wave

import numpy as np


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, np.float64)
    mel = 3.0 * f / 200.0
    log_region = f >= 1000.0
    return np.where(log_region, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    f = 200.0 * m / 3.0
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), f)


def mel_filters(sampling_rate: int, n_fft: int, n_mels: int, f_min: float = 0.0,
                f_max: float | None = None) -> np.ndarray:
    """[n_fft / 2 + 1, n_mels] triangular filters on the Slaney mel scale, each normalised to unit area (Slaney)."""
    f_max = sampling_rate / 2 if f_max is None else f_max
    freqs = np.linspace(0, sampling_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))
    widths = np.diff(edges)
    slopes = edges[None, :] - freqs[:, None]                      # [freqs, n_mels + 2]
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (edges[2:n_mels + 2] - edges[:n_mels])       # Slaney: constant energy per filter
    return filters.astype(np.float32)


def log_mel(audio: np.ndarray, n_mels: int = 128, sampling_rate: int = 16000, n_fft: int = 400,
            hop_length: int = 160, filters: np.ndarray | None = None) -> np.ndarray:
    """[n_mels, len(audio) // hop_length] float32 log-mel features of mono float32 audio."""
    x = np.asarray(audio, np.float32).reshape(-1)
    if x.size < 2:
        raise ValueError(f"audio of {x.size} samples is too short for a spectrogram")
    half = n_fft // 2
    if x.size <= half:
        raise ValueError(f"audio of {x.size} samples is shorter than half the {n_fft}-sample window")
    padded = np.pad(x, half, mode="reflect")
    frames = 1 + (padded.size - n_fft) // hop_length
    index = np.arange(n_fft)[None, :] + hop_length * np.arange(frames)[:, None]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)   # periodic Hann
    spectrum = np.fft.rfft(padded[index] * window, axis=1)
    power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)[:-1]                # the last frame dropped
    if filters is None:
        filters = mel_filters(sampling_rate, n_fft, n_mels, 0.0, 8000.0)
    mel = power @ filters                                                                      # [frames, n_mels]
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).T.astype(np.float32)


def log_mel_magnitude(audio: np.ndarray, sampling_rate: int = 24000, n_fft: int = 1024, hop_length: int = 256,
                      n_mels: int = 128, f_min: float = 0.0, f_max: float | None = 12000.0) -> np.ndarray:
    """[frames, n_mels] float32 log mel magnitudes as HiFi-GAN-style vocoders and Qwen3-TTS's speaker encoder compute
    them: reflect padding of (n_fft - hop) / 2 each side, frames of n_fft every hop (not centred) under a periodic
    Hann window, magnitude sqrt(re^2 + im^2 + 1e-9) through Slaney mel filters, log of at least 1e-5."""
    x = np.asarray(audio, np.float32).reshape(-1)
    pad = (n_fft - hop_length) // 2
    if x.size <= pad:
        raise ValueError(f"audio of {x.size} samples is too short for a {n_fft}-point spectrogram")
    padded = np.pad(x, pad, mode="reflect")
    if padded.size < n_fft:
        raise ValueError(f"audio of {x.size} samples is shorter than one {n_fft}-sample frame")
    frames = 1 + (padded.size - n_fft) // hop_length
    index = np.arange(n_fft)[None, :] + hop_length * np.arange(frames)[:, None]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
    spectrum = np.fft.rfft(padded[index] * window, axis=1)
    magnitude = np.sqrt(spectrum.real ** 2 + spectrum.imag ** 2 + 1e-9).astype(np.float32)
    mel = magnitude @ mel_filters(sampling_rate, n_fft, n_mels, f_min, f_max)
    return np.log(np.maximum(mel, 1e-5)).astype(np.float32)


def kaldi_mel_banks(num_bins: int, padded: int, sampling_rate: int, low_freq: float = 20.0,
                    high_freq: float = 0.0) -> np.ndarray:
    """[padded / 2, num_bins] triangular filters equally spaced on Kaldi's mel scale (1127 ln(1 + f / 700)), not
    normalised (Kaldi's MelBanks; high_freq <= 0 counts back from the Nyquist frequency)."""
    nyquist = sampling_rate / 2
    high = high_freq if high_freq > 0 else nyquist + high_freq

    def mel(f):
        return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)

    lo, hi = mel(low_freq), mel(high)
    delta = (hi - lo) / (num_bins + 1)
    left = lo + delta * np.arange(num_bins)
    center, right = left + delta, left + 2 * delta
    m = mel(np.arange(padded // 2) * sampling_rate / padded)[:, None]
    rising = (m - left) / (center - left)
    falling = (right - m) / (right - center)
    weights = np.where(m <= center, rising, falling)
    return np.where((m > left) & (m < right), weights, 0.0).astype(np.float32)


def kaldi_fbank(samples: np.ndarray, num_bins: int = 80, sampling_rate: int = 16000, frame_ms: float = 25.0,
                shift_ms: float = 10.0, preemphasis: float = 0.97, low_freq: float = 20.0) -> np.ndarray:
    """[frames, num_bins] log mel filter-bank energies as Kaldi's compute-fbank (and kaldi-native-fbank) compute
    them with their defaults and no dither: frames of 25 ms every 10 ms that fit whole (snip_edges), each with its DC
    offset removed, pre-emphasised, Povey-windowed and zero-padded to a power of two; the power spectrum through the
    mel banks, log of at least float32's epsilon. `samples` at Kaldi's scale (16-bit integer values)."""
    x = np.asarray(samples, np.float64).reshape(-1)
    length, shift = int(sampling_rate * frame_ms / 1000), int(sampling_rate * shift_ms / 1000)
    if x.size < length:
        return np.zeros((0, num_bins), np.float32)
    frames = 1 + (x.size - length) // shift
    f = x[np.arange(length)[None, :] + shift * np.arange(frames)[:, None]]
    f = f - f.mean(axis=1, keepdims=True)
    f = np.concatenate([f[:, :1] * (1 - preemphasis), f[:, 1:] - preemphasis * f[:, :-1]], axis=1)
    f = f * (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / (length - 1))) ** 0.85
    padded = 1 << (length - 1).bit_length()
    spectrum = np.fft.rfft(f, n=padded, axis=1)
    power = spectrum.real ** 2 + spectrum.imag ** 2
    energies = power[:, :padded // 2] @ kaldi_mel_banks(num_bins, padded, sampling_rate, low_freq).astype(np.float64)
    return np.log(np.maximum(energies, np.finfo(np.float32).eps)).astype(np.float32)


def read_kaldi_matrix(path: str) -> np.ndarray:
    """A Kaldi matrix file (or the first entry of an archive), binary (float or double) or text."""
    with open(path, "rb") as f:
        data = f.read()
    start = data.find(b"\0B")
    if start >= 0:
        pos = start + 2
        kind = data[pos:pos + 3]
        if kind not in (b"FM ", b"DM "):
            raise ValueError(f"{path}: a binary Kaldi object of type {kind!r}, not a float / double matrix")
        pos += 3
        sizes = []
        for _ in range(2):
            if data[pos:pos + 1] != b"\x04":
                raise ValueError(f"{path}: malformed Kaldi matrix header")
            sizes.append(int(np.frombuffer(data[pos + 1:pos + 5], "<i4")[0]))
            pos += 5
        rows, cols = sizes
        dtype = "<f4" if kind == b"FM " else "<f8"
        need = rows * cols * np.dtype(dtype).itemsize
        if rows < 0 or cols < 0 or len(data) - pos < need:
            raise ValueError(f"{path}: truncated Kaldi matrix ({rows} x {cols})")
        return np.frombuffer(data[pos:pos + need], dtype).reshape(rows, cols).astype(np.float64)
    text = data.decode("utf-8", "replace")
    if "[" not in text or "]" not in text:
        raise ValueError(f"{path}: not a Kaldi matrix (no binary header, no [ ... ] text)")
    body = text[text.index("[") + 1:text.rindex("]")]
    rows = [r.split() for r in body.strip().splitlines() if r.strip()]
    try:
        return np.array([[float(v) for v in r] for r in rows], np.float64)
    except ValueError:
        raise ValueError(f"{path}: a Kaldi text matrix with rows of different lengths or non-numbers") from None


def cmvn_from_stats(stats: np.ndarray, floor: float = 1e-20) -> tuple[np.ndarray, np.ndarray]:
    """(means, 1 / standard deviations) from Kaldi's global CMVN statistics [2, dim + 1] (sums, squared sums, the
    frame count last in the first row)."""
    if stats.ndim != 2 or stats.shape[0] != 2 or stats.shape[1] < 2:
        raise ValueError(f"CMVN statistics must be [2, dim + 1], got {list(stats.shape)}")
    count = stats[0, -1]
    if count < 1:
        raise ValueError(f"CMVN statistics over {count} frames")
    means = stats[0, :-1] / count
    variances = np.maximum(stats[1, :-1] / count - means * means, floor)
    return means.astype(np.float32), (1.0 / np.sqrt(variances)).astype(np.float32)


def resample(audio: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """Band-limited resampling (Fourier method: the spectrum cut or zero-extended to the new length)."""
    x = np.asarray(audio, np.float64).reshape(-1)
    if source_rate == target_rate:
        return x.astype(np.float32)
    if source_rate <= 0 or target_rate <= 0:
        raise ValueError(f"sampling rates must be positive, got {source_rate} -> {target_rate}")
    n_out = int(round(x.size * target_rate / source_rate))
    spectrum = np.fft.rfft(x)
    keep = min(spectrum.size, n_out // 2 + 1)
    out = np.zeros(n_out // 2 + 1, np.complex128)
    out[:keep] = spectrum[:keep]
    if n_out % 2 == 0 and keep == n_out // 2 + 1 and n_out < x.size:
        out[-1] = out[-1].real   # the new Nyquist bin of a shortened signal is real
    return (np.fft.irfft(out, n_out) * (n_out / x.size)).astype(np.float32)


def _read_wav(source) -> tuple[np.ndarray, int]:
    try:
        with wave.open(source, "rb") as w:
            rate, channels, width, frames = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            raw = w.readframes(frames)
    except (wave.Error, EOFError) as e:
        name = source if isinstance(source, (str, os.PathLike)) else "the audio bytes"
        raise ValueError(f"cannot read {name} as a PCM WAV file: {e}") from None
    if width == 1:
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        data = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        data = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / 8388608.0
    elif width == 4:
        data = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    else:
        raise ValueError(f"{width}-byte WAV samples are not supported")
    return data.reshape(-1, channels).mean(axis=1), rate


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """Mono 16-bit PCM WAV of float samples in [-1, 1] (clipped)."""
    pcm = (np.clip(np.asarray(samples, np.float32).reshape(-1), -1.0, 1.0) * 32767.0).round().astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(rate))
        w.writeframes(pcm.tobytes())
    return buffer.getvalue()


def write_wav(path: str, samples: np.ndarray, rate: int) -> str:
    """Writes wav_bytes to `path` atomically (a temporary file, then renamed); returns the path."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(wav_bytes(samples, rate))
    os.replace(tmp, path)
    return path


def load_audio(source, sampling_rate: int = 16000) -> np.ndarray:
    """Mono float32 audio at `sampling_rate` from a PCM WAV path or bytes, a float array (taken to be at
    `sampling_rate`) or an (array, rate) pair; other rates are resampled."""
    if isinstance(source, tuple) and len(source) == 2:
        data, rate = np.asarray(source[0], np.float32), int(source[1])
        if data.ndim == 2:
            data = data.mean(axis=0 if data.shape[0] < data.shape[1] else 1)
    elif isinstance(source, np.ndarray):
        data, rate = source.astype(np.float32), sampling_rate
    elif isinstance(source, (bytes, bytearray)):
        data, rate = _read_wav(io.BytesIO(bytes(source)))
    elif isinstance(source, (str, os.PathLike)):
        if not os.path.isfile(source):
            raise FileNotFoundError(f"no audio file '{source}'")
        data, rate = _read_wav(os.fspath(source))
    else:
        raise TypeError(f"audio is a WAV path or bytes, an array or (array, rate), not {type(source).__name__}")
    if data.ndim != 1:
        raise ValueError(f"audio must be mono (1-D), got shape {data.shape}")
    if not np.all(np.isfinite(data)):
        raise ValueError("the audio holds NaN or infinite samples")
    return resample(data, rate, sampling_rate)
