"""Denoising schedulers in NumPy, read from a diffusers `scheduler_config.json`, for pipelines whose networks run on
the runtime (no torch at inference).

`UniPCFlowScheduler`: diffusers' UniPCMultistepScheduler in its flow-matching form (use_flow_sigmas,
prediction_type flow_prediction, predict_x0: Wan's scheduler): the shifted flow sigmas, the UniP predictor and
UniC corrector of order up to `solver_order` (bh1 / bh2), lower-order final steps, `disable_corrector`. Other
configurations are refused by name. `FlowMatchEulerScheduler`: diffusers' FlowMatchEulerDiscreteScheduler (static
shift, no dynamic shifting)."""
from __future__ import annotations

import json
import os
from typing import Mapping

import numpy as np


def read_scheduler_config(path: str) -> dict:
    """A scheduler config: a scheduler_config.json file, or a directory holding one (or a scheduler/ folder)."""
    for p in (path, os.path.join(path, "scheduler_config.json"), os.path.join(path, "scheduler",
                                                                                "scheduler_config.json")):
        if os.path.isfile(p):
            with open(p) as f:
                return json.load(f)
    raise FileNotFoundError(f"no scheduler_config.json at {path}")


def make_scheduler(config: Mapping):
    name = config.get("_class_name", "UniPCMultistepScheduler")
    if name == "UniPCMultistepScheduler":
        return UniPCFlowScheduler(config)
    if name == "FlowMatchEulerDiscreteScheduler":
        return FlowMatchEulerScheduler(config)
    from .ddpm_schedulers import DISCRETE
    if name in DISCRETE:
        return DISCRETE[name](config)
    raise NotImplementedError(f"scheduler {name} is not implemented (built: UniPCMultistepScheduler in flow mode, "
                              f"FlowMatchEulerDiscreteScheduler, {', '.join(DISCRETE)})")


class UniPCFlowScheduler:
    def __init__(self, config: Mapping):
        c = dict(config)
        unsupported = {k: c.get(k) for k, ok in (
            ("use_flow_sigmas", True), ("prediction_type", "flow_prediction"), ("predict_x0", True),
            ("thresholding", False), ("use_karras_sigmas", False), ("use_exponential_sigmas", False),
            ("use_beta_sigmas", False), ("use_dynamic_shifting", False)) if c.get(k, ok) != ok}
        if c.get("solver_p") or c.get("shift_terminal"):
            unsupported["solver_p / shift_terminal"] = True
        if unsupported:
            raise NotImplementedError(f"UniPCMultistepScheduler with {unsupported} is not implemented (built: the flow "
                                      "form Wan uses: use_flow_sigmas, flow_prediction, predict_x0)")
        self.train_steps = int(c.get("num_train_timesteps", 1000))
        self.shift = float(c.get("flow_shift", 1.0))
        self.order = int(c.get("solver_order", 2))
        self.solver_type = c.get("solver_type", "bh2")
        if self.solver_type in ("midpoint", "heun", "logrho"):
            self.solver_type = "bh2"
        if self.solver_type not in ("bh1", "bh2"):
            raise NotImplementedError(f"UniPC solver_type {self.solver_type!r}")
        self.lower_order_final = bool(c.get("lower_order_final", True))
        self.disable_corrector = set(c.get("disable_corrector", []) or [])
        self.final_sigma = c.get("final_sigmas_type", "zero")
        if self.final_sigma not in ("zero", "sigma_min"):
            raise ValueError(f"final_sigmas_type {self.final_sigma!r}")

    def set_timesteps(self, steps: int) -> np.ndarray:
        """The timesteps (int64, as the transformer is given them) of `steps` denoising steps."""
        if steps < 1:
            raise ValueError("at least one denoising step")
        sigmas = np.linspace(1, 1 / self.train_steps, steps + 1)[:-1]
        sigmas = self.shift * sigmas / (1 + (self.shift - 1) * sigmas)
        if abs(sigmas[0] - 1) < 1e-6:
            sigmas[0] -= 1e-6
        self.timesteps = (sigmas * self.train_steps).astype(np.int64)
        last = sigmas[-1] if self.final_sigma == "sigma_min" else 0.0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(np.float32)
        self.outputs: list[np.ndarray | None] = [None] * self.order
        self.lower_order_nums, self.step_index, self.last_sample, self.this_order = 0, 0, None, 1
        return self.timesteps

    def _lambda(self, i: int) -> np.float32:
        s = np.float32(self.sigmas[i])
        with np.errstate(divide="ignore"):   # the final sigma 0: lambda = +inf, and the update reduces to x0
            return np.log(np.float32(1) - s) - np.log(s)

    def _coefficients(self, t: int, s0: int, history: list[int], order: int):
        """h, the ratios r_k of the earlier steps, and the b / R system of the bh update."""
        lambda_t, lambda_s0 = self._lambda(t), self._lambda(s0)
        h = lambda_t - lambda_s0
        rks = [(self._lambda(si) - lambda_s0) / h for si in history] + [np.float32(1)]
        hh = -h
        with np.errstate(invalid="ignore", divide="ignore"):
            return self._bh(hh, rks, order)

    def _bh(self, hh, rks, order: int):
        h_phi_1 = np.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        B_h = hh if self.solver_type == "bh1" else np.expm1(hh)
        R, b, factorial = [], [], 1
        for i in range(1, order + 1):
            R.append(np.power(np.array(rks, np.float32), i - 1))
            b.append(h_phi_k * factorial / B_h)
            factorial *= i + 1
            h_phi_k = h_phi_k / hh - 1 / factorial
        return h_phi_1, B_h, rks[:-1], np.array(R, np.float32), np.array(b, np.float32)

    def _base(self, x: np.ndarray, t: int, s0: int, m0: np.ndarray, h_phi_1) -> tuple[np.ndarray, np.float32]:
        sigma_t, sigma_s0 = np.float32(self.sigmas[t]), np.float32(self.sigmas[s0])
        alpha_t = np.float32(1) - sigma_t
        return (sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0).astype(np.float32), alpha_t

    def _predict(self, x: np.ndarray, order: int) -> np.ndarray:
        i = self.step_index
        m0 = self.outputs[-1]
        history = [i - k for k in range(1, order)]
        h_phi_1, B_h, rks, R, b = self._coefficients(i + 1, i, history, order)
        x_t, alpha_t = self._base(x, i + 1, i, m0, h_phi_1)
        if not history:
            return x_t
        D1s = [(self.outputs[-(k + 1)] - m0) / rk for k, rk in zip(range(1, order), rks)]
        rhos = np.array([0.5], np.float32) if order == 2 else np.linalg.solve(R[:-1, :-1], b[:-1]).astype(np.float32)
        res = sum(r * d for r, d in zip(rhos, D1s))
        return (x_t - alpha_t * B_h * res).astype(np.float32)

    def _correct(self, model_t: np.ndarray, last: np.ndarray, order: int) -> np.ndarray:
        i = self.step_index
        m0 = self.outputs[-1]
        history = [i - (k + 1) for k in range(1, order)]
        h_phi_1, B_h, rks, R, b = self._coefficients(i, i - 1, history, order)
        x_t, alpha_t = self._base(last, i, i - 1, m0, h_phi_1)
        rhos = np.array([0.5], np.float32) if order == 1 else np.linalg.solve(R, b).astype(np.float32)
        res = sum((r * (self.outputs[-(k + 1)] - m0) / rk for k, r, rk in zip(range(1, order), rhos[:-1], rks)),
                  np.zeros_like(m0))
        return (x_t - alpha_t * B_h * (res + rhos[-1] * (model_t - m0))).astype(np.float32)

    def step(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """The next latents from the transformer's flow prediction at the current step."""
        i = self.step_index
        if i >= len(self.timesteps):
            raise RuntimeError("all steps are done; call set_timesteps again")
        x0 = (sample - np.float32(self.sigmas[i]) * model_output).astype(np.float32)
        if i > 0 and (i - 1) not in self.disable_corrector and self.last_sample is not None:
            sample = self._correct(x0, self.last_sample, self.this_order)
        self.outputs = self.outputs[1:] + [x0]
        order = min(self.order, len(self.timesteps) - i) if self.lower_order_final else self.order
        self.this_order = min(order, self.lower_order_nums + 1)
        self.last_sample = sample
        prev = self._predict(sample, self.this_order)
        self.lower_order_nums = min(self.lower_order_nums + 1, self.order)
        self.step_index += 1
        return prev


class FlowMatchEulerScheduler:
    def __init__(self, config: Mapping):
        c = dict(config)
        for key in ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                    "stochastic_sampling"):
            if c.get(key):
                raise NotImplementedError(f"FlowMatchEulerDiscreteScheduler with {key} is not implemented")
        self.train_steps = int(c.get("num_train_timesteps", 1000))
        self.shift = float(c.get("shift", 1.0))
        self.dynamic = bool(c.get("use_dynamic_shifting", False))
        self.shift_type = c.get("time_shift_type", "exponential")
        self.shift_terminal = c.get("shift_terminal")   # stretch the schedule to end at this sigma (Qwen-Image)
        if self.shift_type not in ("exponential", "linear"):
            raise NotImplementedError(f"time_shift_type {self.shift_type!r}")
        self.config = c

    def _shifted(self, sigmas):
        return self.shift * sigmas / (1 + (self.shift - 1) * sigmas)

    def _time_shift(self, mu: float, sigmas):
        if self.shift_type == "exponential":
            return np.exp(mu) / (np.exp(mu) + (1 / sigmas - 1))
        return mu / (mu + (1 / sigmas - 1))

    def set_timesteps(self, steps: int, sigmas: np.ndarray | None = None, mu: float | None = None) -> np.ndarray:
        """`sigmas` (a pipeline's own schedule, e.g. FLUX's linspace(1, 1/steps)) and `mu` (the resolution-dependent
        shift, needed with use_dynamic_shifting) as diffusers takes them."""
        if steps < 1:
            raise ValueError("at least one denoising step")
        if self.dynamic and mu is None:
            raise ValueError("this scheduler shifts by resolution (use_dynamic_shifting): pass mu")
        if sigmas is None:
            # diffusers spaces the steps between its training schedule's shifted ends, then shifts them again
            sigma_min = float(self._shifted(np.float32(1.0 / self.train_steps))) if not self.dynamic else \
                1.0 / self.train_steps
            sigmas = np.linspace(self.train_steps, sigma_min * self.train_steps, steps) / self.train_steps
        sigmas = np.asarray(sigmas, np.float64)   # shifted in float64, then float32, as diffusers does
        sigmas = self._time_shift(mu, sigmas) if self.dynamic else self._shifted(sigmas)
        if self.shift_terminal:
            if len(sigmas) < 2:   # the one sigma is the schedule's end: nothing to stretch (diffusers divides by 0)
                raise ValueError("shift_terminal needs at least two denoising steps")
            one_minus = 1 - sigmas
            sigmas = 1 - one_minus / (one_minus[-1] / (1 - self.shift_terminal))
        sigmas = sigmas.astype(np.float32)
        self.timesteps = (sigmas * np.float32(self.train_steps)).astype(np.float32)
        self.sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
        self.step_index = 0
        return self.timesteps

    def step(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        i = self.step_index
        self.step_index += 1
        return (sample + (self.sigmas[i + 1] - self.sigmas[i]) * model_output).astype(np.float32)
