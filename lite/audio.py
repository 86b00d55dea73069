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
