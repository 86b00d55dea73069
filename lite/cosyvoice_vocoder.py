"""CosyVoice's HiFT vocoder on the runtime: mel [80, T] -> waveform (24 kHz for CosyVoice 2 and 3), one graph
(model_zoo/multimodal/cosyvoice_hift_graph.py) per call, non-streaming. The config decides which generator: CosyVoice
2's HiFTGenerator or CosyVoice 3's CausalHiFTGenerator (`causal`, see cosyvoice_hift_graph.hift_config).

    vocoder = CosyVoiceVocoder("hift.ms", hift_config)         # the CosyVoice yaml's hift kwargs
    wave = vocoder.waveform(mel, rng=np.random.default_rng(0))  # float32 [T x samples_per_frame]

The sine generator's random draws are made here, as the original makes them, unless given: `phase`
[nb_harmonics + 1] with phase[0] = 0 (SineGen2, every rate but 22050 Hz: its initial phase in cycles, uniform [0, 1),
which the original, and so the graph, never reads when samples_per_frame >= 3; SineGen, 22050 Hz: radians, uniform
(-pi, pi)), then `noise` [T x samples_per_frame, nb_harmonics + 1]: standard normal for HiFTGenerator; uniform [0, 1)
for CausalHiFTGenerator, whose original draws a table of them once, when built, and reads its first rows on every
call (its rand_ini likewise, and unread). `draws(rng, frames)` returns both, in that order: phase =
rng.uniform(low, high, harmonics) (float64, rounded to float32), then noise = rng.standard_normal((1, samples,
harmonics), dtype=float32) or rng.random((1, samples, harmonics), dtype=float32)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .checkpoint_graph import load_graph


class CosyVoiceVocoder:
    def __init__(self, path: str, config: Mapping, threads: int = 1):
        from model_zoo.multimodal.cosyvoice_hift_graph import hift_config, upsample_scale, uses_sinegen2
        cfg = hift_config(config)
        self.config = cfg
        self.in_channels = int(cfg["in_channels"])
        self.harmonics = int(cfg["nb_harmonics"]) + 1
        self.samples_per_frame = upsample_scale(cfg)
        self.sampling_rate = int(cfg["sampling_rate"])
        self.sinegen2 = uses_sinegen2(cfg)
        self.causal = bool(cfg["causal"])
        self.model = load_graph(path, threads)
        names = [t.name for t in self.model.get_inputs()]
        if names != ["mel", "phase", "noise"]:
            raise ValueError(f"{path} is not a HiFT vocoder graph: inputs {names}, expected ['mel', 'phase', 'noise']")

    def draw_phase(self, rng: np.random.Generator) -> np.ndarray:
        low, high = (0.0, 1.0) if self.sinegen2 else (-np.pi, np.pi)
        phase = rng.uniform(low, high, self.harmonics).astype(np.float32)
        phase[0] = 0
        return phase

    def draw_noise(self, rng: np.random.Generator, samples: int) -> np.ndarray:
        """[1, samples, harmonics] float32: standard normal (HiFTGenerator), uniform [0, 1) (CausalHiFTGenerator)."""
        shape = (1, int(samples), self.harmonics)
        return rng.random(shape, dtype=np.float32) if self.causal else rng.standard_normal(shape, dtype=np.float32)

    def draws(self, rng: np.random.Generator, frames: int) -> tuple[np.ndarray, np.ndarray]:
        """The draws waveform(mel of `frames` frames, rng) makes: (phase, noise), in that order."""
        phase = self.draw_phase(rng)
        return phase, self.draw_noise(rng, int(frames) * self.samples_per_frame)

    def _mel(self, mel) -> np.ndarray:
        mel = np.asarray(mel)
        if not (np.issubdtype(mel.dtype, np.floating) and mel.dtype.itemsize <= 8):
            raise ValueError(f"mel must be a float32 array (float64 / float16 are converted), got dtype {mel.dtype}")
        if mel.ndim == 3 and mel.shape[0] == 1:
            mel = mel[0]
        if mel.ndim != 2 or mel.shape[0] != self.in_channels or mel.shape[1] < 1:
            raise ValueError(f"mel must be [{self.in_channels}, T] or [1, {self.in_channels}, T] with T >= 1, "
                             f"got shape {list(np.shape(mel))}")
        mel = np.ascontiguousarray(mel, dtype=np.float32)
        if not np.isfinite(mel).all():
            raise ValueError("mel holds NaN or infinite values")
        return mel[None]

    def waveform(self, mel: np.ndarray, rng: np.random.Generator | None = None, phase: np.ndarray | None = None,
                 noise: np.ndarray | None = None) -> np.ndarray:
        """mel [80, T] or [1, 80, T] -> float32 [T x samples_per_frame]."""
        mel = self._mel(mel)
        samples = mel.shape[2] * self.samples_per_frame
        rng = np.random.default_rng() if rng is None else rng
        if phase is None:
            phase = self.draw_phase(rng)
        phase = np.asarray(phase)
        if phase.shape != (self.harmonics,) or not np.issubdtype(phase.dtype, np.floating):
            raise ValueError(f"phase must be a float array of shape [{self.harmonics}], got {phase.dtype} "
                             f"{list(phase.shape)}")
        if noise is None:
            noise = self.draw_noise(rng, samples)
        noise = np.asarray(noise)
        if noise.ndim == 2:
            noise = noise[None]
        if noise.shape != (1, samples, self.harmonics) or not np.issubdtype(noise.dtype, np.floating):
            raise ValueError(f"noise must be a float array [{samples}, {self.harmonics}] (T x samples_per_frame, "
                             f"nb_harmonics + 1) or with a leading 1, got {noise.dtype} {list(np.shape(noise))}")
        out = self.model.predict([mel, np.ascontiguousarray(phase, np.float32),
                                  np.ascontiguousarray(noise, np.float32)])
        return np.array(out[0].get_data_to_numpy().reshape(-1), dtype=np.float32)
