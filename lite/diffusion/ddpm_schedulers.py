"""The discrete-time (DDPM beta schedule) schedulers of Stable Diffusion in NumPy, read from a diffusers
`scheduler_config.json`: PNDMScheduler (the PLMS form SD 1.x ships, skip_prk_steps), DDIMScheduler (eta 0, SD 2.x)
and EulerDiscreteScheduler (SDXL; linear sigma interpolation). epsilon and v_prediction. Forms not built (PRK warm-up
steps, stochastic DDIM, Karras / exponential / beta sigmas, thresholding, zero-terminal-SNR rescaling) are refused by
name.

Interface (as lite.diffusion.schedulers'): `set_timesteps(steps)` returns the timesteps the network sees, in order;
`scale_model_input(sample)` the network's input at the current step; `step(model_output, sample)` the next sample;
`init_noise_sigma` scales the initial noise."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np


def _betas(c: Mapping) -> np.ndarray:
    n = int(c.get("num_train_timesteps", 1000))
    start, end = float(c.get("beta_start", 0.0001)), float(c.get("beta_end", 0.02))
    kind = c.get("beta_schedule", "linear")
    if c.get("trained_betas") is not None:
        return np.asarray(c["trained_betas"], np.float32)
    if kind == "linear":
        return np.linspace(start, end, n, dtype=np.float32)
    if kind == "scaled_linear":
        return (np.linspace(start ** 0.5, end ** 0.5, n, dtype=np.float32) ** 2).astype(np.float32)
    if kind == "squaredcos_cap_v2":   # diffusers' betas_for_alpha_bar (cosine)
        bar = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2   # noqa: E731
        return np.array([min(1 - bar((i + 1) / n) / bar(i / n), 0.999) for i in range(n)], np.float32)
    raise NotImplementedError(f"beta_schedule {kind!r} is not implemented (built: linear, scaled_linear, "
                              "squaredcos_cap_v2)")


def _refuse(name: str, c: Mapping, allowed: Mapping) -> None:
    bad = {k: c.get(k) for k, ok in allowed.items() if c.get(k, ok) != ok}
    if bad:
        raise NotImplementedError(f"{name} with {bad} is not implemented")


def _spaced(spacing: str, train: int, steps: int, offset: int) -> np.ndarray:
    """Descending integer timesteps (diffusers' timestep_spacing)."""
    if steps < 1 or steps > train:
        raise ValueError(f"steps must be in [1, {train}], not {steps}")
    if spacing == "linspace":
        return np.linspace(0, train - 1, steps).round()[::-1].astype(np.int64)
    if spacing == "leading":
        return (np.arange(steps) * (train // steps)).round()[::-1].astype(np.int64) + offset
    if spacing == "trailing":
        return np.round(np.arange(train, 0, -train / steps)).astype(np.int64) - 1
    raise NotImplementedError(f"timestep_spacing {spacing!r} (built: linspace, leading, trailing)")


class _Discrete:
    ALPHA_TO_ONE = True   # set_alpha_to_one's default (PNDM's is False)

    def __init__(self, config: Mapping):
        c = dict(config)
        self.config = c
        _refuse(type(self).__name__, c, {"thresholding": False, "rescale_betas_zero_snr": False})
        self.prediction = c.get("prediction_type", "epsilon")
        if self.prediction not in ("epsilon", "v_prediction"):
            raise NotImplementedError(f"prediction_type {self.prediction!r} (built: epsilon, v_prediction)")
        self.train_steps = int(c.get("num_train_timesteps", 1000))
        self.alphas_cumprod = np.cumprod(1.0 - _betas(c), dtype=np.float32)
        self.final_alpha = np.float32(1.0) if c.get("set_alpha_to_one", self.ALPHA_TO_ONE) else self.alphas_cumprod[0]
        self.spacing = c.get("timestep_spacing", "leading")
        self.offset = int(c.get("steps_offset", 0))
        self.init_noise_sigma = 1.0
        self.steps = 0

    def alpha(self, t: int) -> np.float32:
        return self.alphas_cumprod[t] if t >= 0 else self.final_alpha

    def scale_model_input(self, sample: np.ndarray) -> np.ndarray:
        return sample


class PNDMScheduler(_Discrete):
    """PLMS (skip_prk_steps): a first step from the model output at t, a second from the mean of two outputs at
    t (Heun-like), then the 2nd / 3rd / 4th-order linear multistep combinations."""
    ALPHA_TO_ONE = False

    def __init__(self, config: Mapping):
        super().__init__(config)
        if not self.config.get("skip_prk_steps", False):
            raise NotImplementedError("PNDMScheduler's Runge-Kutta warm-up (skip_prk_steps false) is not implemented")

    def set_timesteps(self, steps: int) -> np.ndarray:
        ts = _spaced(self.spacing, self.train_steps, steps, self.offset)[::-1]   # ascending, as diffusers builds it
        self.steps, self.ets, self.counter, self.cur_sample = steps, [], 0, None
        self.timesteps = np.concatenate([ts[:-1], ts[-2:-1], ts[-1:]])[::-1].astype(np.int64)
        return self.timesteps

    def step(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        t = int(self.timesteps[self.counter])
        prev = t - self.train_steps // self.steps
        if self.counter != 1:
            self.ets = self.ets[-3:] + [model_output]
        else:
            prev, t = t, t + self.train_steps // self.steps
        e = self.ets
        if len(e) == 1 and self.counter == 0:
            self.cur_sample = sample
        elif len(e) == 1 and self.counter == 1:
            model_output, sample, self.cur_sample = (model_output + e[-1]) / 2, self.cur_sample, None
        elif len(e) == 2:
            model_output = (3 * e[-1] - e[-2]) / 2
        elif len(e) == 3:
            model_output = (23 * e[-1] - 16 * e[-2] + 5 * e[-3]) / 12
        else:
            model_output = (1 / 24) * (55 * e[-1] - 59 * e[-2] + 37 * e[-3] - 9 * e[-4])
        self.counter += 1
        a_t, a_prev = self.alpha(t), self.alpha(prev)
        b_t, b_prev = 1 - a_t, 1 - a_prev
        if self.prediction == "v_prediction":
            model_output = a_t ** 0.5 * model_output + b_t ** 0.5 * sample
        denom = a_t * b_prev ** 0.5 + (a_t * b_t * a_prev) ** 0.5
        out = (a_prev / a_t) ** 0.5 * sample - (a_prev - a_t) * model_output / denom
        return out.astype(np.float32)


class DDIMScheduler(_Discrete):
    """Deterministic DDIM (eta 0): x0 and epsilon from the prediction, x0 clipped where clip_sample says."""

    def set_timesteps(self, steps: int) -> np.ndarray:
        self.steps, self.index = steps, 0
        self.timesteps = _spaced(self.spacing, self.train_steps, steps, self.offset)
        return self.timesteps

    def step(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        t = int(self.timesteps[self.index])
        self.index += 1
        a_t = self.alpha(t)
        a_prev = self.alpha(t - self.train_steps // self.steps)
        b_t = 1 - a_t
        if self.prediction == "epsilon":
            x0 = (sample - b_t ** 0.5 * model_output) / a_t ** 0.5
            eps = model_output
        else:
            x0 = a_t ** 0.5 * sample - b_t ** 0.5 * model_output
            eps = a_t ** 0.5 * model_output + b_t ** 0.5 * sample
        if self.config.get("clip_sample", True):
            r = float(self.config.get("clip_sample_range", 1.0))
            x0 = np.clip(x0, -r, r)
        return (a_prev ** 0.5 * x0 + (1 - a_prev) ** 0.5 * eps).astype(np.float32)


class EulerDiscreteScheduler(_Discrete):
    """Euler in sigma space (s_churn 0): sigmas interpolated linearly at the timesteps, the input scaled by
    1 / sqrt(sigma^2 + 1)."""

    def __init__(self, config: Mapping):
        super().__init__(config)
        _refuse("EulerDiscreteScheduler", self.config, {
            "interpolation_type": "linear", "use_karras_sigmas": False, "use_exponential_sigmas": False,
            "use_beta_sigmas": False, "timestep_type": "discrete", "final_sigmas_type": "zero"})
        self.spacing = self.config.get("timestep_spacing", "linspace")

    def set_timesteps(self, steps: int) -> np.ndarray:
        train = self.train_steps
        if self.spacing == "linspace":
            ts = np.linspace(0, train - 1, steps, dtype=np.float32)[::-1].copy()
        elif self.spacing == "leading":
            ts = (np.arange(steps) * (train // steps)).round()[::-1].astype(np.float32) + self.offset
        elif self.spacing == "trailing":
            ts = np.arange(train, 0, -train / steps).round().astype(np.float32) - 1
        else:
            raise NotImplementedError(f"timestep_spacing {self.spacing!r} (built: linspace, leading, trailing)")
        a = self.alphas_cumprod
        sigmas = np.interp(ts, np.arange(len(a)), ((1 - a) / a) ** 0.5)
        self.sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
        self.init_noise_sigma = float(self.sigmas.max() if self.spacing in ("linspace", "trailing")
                                      else (self.sigmas.max() ** 2 + 1) ** 0.5)
        self.timesteps, self.index = ts.astype(np.float32), 0
        return self.timesteps

    def scale_model_input(self, sample: np.ndarray) -> np.ndarray:
        return (sample / ((self.sigmas[self.index] ** 2 + 1) ** 0.5)).astype(np.float32)

    def step(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        sigma = self.sigmas[self.index]
        if self.prediction == "epsilon":
            x0 = sample - sigma * model_output
        else:
            x0 = model_output * (-sigma / (sigma ** 2 + 1) ** 0.5) + sample / (sigma ** 2 + 1)
        out = sample + (sample - x0) / sigma * (self.sigmas[self.index + 1] - sigma)
        self.index += 1
        return out.astype(np.float32)


DISCRETE = {"PNDMScheduler": PNDMScheduler, "DDIMScheduler": DDIMScheduler,
            "EulerDiscreteScheduler": EulerDiscreteScheduler}
