"""CosyVoice 2's flow-matching model on the runtime: speech tokens + a prompt's mel + the speaker's x-vector -> an
80-bin mel spectrogram, non-streaming (model_zoo/multimodal/cosyvoice_flow_graph.py builds the two graphs).

    flow = CosyVoiceFlow("flow_encoder.ms", "flow_estimator.ms", noise, flow_config)
    mel = flow.mel(tokens, prompt_tokens, prompt_feat, embedding)       # [80, token_mel_ratio x len(tokens)]

As CausalMaskedDiffWithXvec.inference(streaming=False, finalize=True): the encoder graph on the prompt's tokens then
the target's (mu: token_mel_ratio frames per token) and the normalised, projected x-vector (spks); the conditions are
the prompt's mel in the first frames and zeros after; from the fixed noise table's first frames (temperature 1), n
Euler steps over the cosine schedule t = 1 - cos(pi / 2 s), each one estimator call on a batch of two (conditioned;
mu, spks and cond zeroed) mixed by classifier-free guidance, (1 + r) v_cond - r v_uncond with r the config's
inference_cfg_rate; the prompt's frames cut off. The arithmetic of the loop is float32, step for step as the
original (dt recomputed from the schedule minus the running t)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .checkpoint_graph import load_graph


class CosyVoiceFlow:
    """`noise`: the CFM's fixed noise table (model_zoo.reference.cosyvoice_flow.flow_noise_table(): [1, 80, 15000],
    the pipeline ships it beside the graphs), [1, mel, L] or [mel, L]; `config`: the flow's kwargs (the CosyVoice 2
    yaml's `flow:` as a dict)."""

    def __init__(self, encoder_path: str, estimator_path: str, noise: np.ndarray, config: Mapping, threads: int = 1):
        decoder = dict(config.get("decoder") or {})
        cfm = dict(decoder.get("cfm_params") or {})
        self.vocab = int(config.get("vocab_size", 6561))
        self.mel_bins = int(config.get("output_size", 80))
        self.spk_dim = int(config.get("spk_embed_dim", 192))
        self.ratio = int(config.get("token_mel_ratio", 2))
        self.cfg_rate = float(cfm.get("inference_cfg_rate", 0.7))
        self.t_scheduler = str(cfm.get("t_scheduler", "cosine"))
        if self.t_scheduler not in ("cosine", "linear") or cfm.get("solver", "euler") != "euler":
            raise ValueError(f"the flow's solver must be euler with a cosine or linear t_scheduler, not "
                             f"{cfm.get('solver', 'euler')!r} / {self.t_scheduler!r}")
        noise = np.asarray(noise)
        if noise.ndim == 3 and noise.shape[0] == 1:
            noise = noise[0]
        if noise.ndim != 2 or noise.shape[0] != self.mel_bins or not np.issubdtype(noise.dtype, np.floating):
            raise ValueError(f"the noise table must be float [1, {self.mel_bins}, frames], got {noise.dtype} "
                             f"{list(np.shape(noise))}")
        self.noise = np.ascontiguousarray(noise, np.float32)
        self.encoder = load_graph(encoder_path, threads)
        self.estimator = load_graph(estimator_path, threads)

    # -- the graphs -----------------------------------------------------------------------------------------------
    @staticmethod
    def _run(model, feeds: dict) -> dict:
        outs = model.predict(feeds)
        return {o.name: t.get_data_to_numpy() for o, t in zip(model.get_outputs(), outs)}

    def encode(self, tokens: np.ndarray, embedding: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All tokens (prompt then target) [N] and the x-vector [spk_embed_dim] -> (mu [80, ratio N], spks [80])."""
        got = self._run(self.encoder, {"tokens": np.ascontiguousarray(np.asarray(tokens, np.int64).reshape(1, -1)),
                                       "embedding": np.ascontiguousarray(embedding, np.float32).reshape(1, -1)})
        return got["mu"][0], got["spks"][0]

    def velocity(self, x: np.ndarray, mask: np.ndarray, mu: np.ndarray, t: np.ndarray, spks: np.ndarray,
                 cond: np.ndarray) -> np.ndarray:
        """One estimator call: x, mu, cond [B, 80, T], mask [B, 1, T], t [B], spks [B, 80] -> dphi [B, 80, T]."""
        feeds = {"x": x, "mask": mask, "mu": mu, "t": t, "spks": spks, "cond": cond}
        return self._run(self.estimator, {k: np.ascontiguousarray(v, np.float32) for k, v in feeds.items()})["dphi"]

    def time_span(self, n_timesteps: int) -> np.ndarray:
        """The n + 1 times of the Euler steps, float32: 1 - cos(pi / 2 s) (cosine) or s, s = 0, 1/n, .., 1."""
        s = np.linspace(0, 1, n_timesteps + 1, dtype=np.float32)
        if self.t_scheduler == "cosine":
            s = np.float32(1) - np.cos(s * np.float32(0.5) * np.float32(np.pi))
        return s.astype(np.float32)

    # -- inference ------------------------------------------------------------------------------------------------
    def _token_ids(self, tokens, what: str) -> np.ndarray:
        ids = np.asarray([] if tokens is None else tokens)
        if ids.ndim == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.ndim != 1:
            raise ValueError(f"{what} must be a sequence of token ids, got shape {list(ids.shape)}")
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            if not np.issubdtype(ids.dtype, np.floating) or not np.all(ids == np.round(ids)):
                raise ValueError(f"{what} must be integer token ids, got {ids.dtype}")
        ids = ids.astype(np.int64)
        bad = ids[(ids < 0) | (ids >= self.vocab)]
        if bad.size:
            raise ValueError(f"{what} hold id {int(bad[0])}, outside the speech-token vocabulary [0, {self.vocab})")
        return ids

    def mel(self, tokens, prompt_tokens, prompt_feat, embedding, n_timesteps: int = 10) -> np.ndarray:
        """tokens [N] (the target's speech tokens), prompt_tokens [Np] (may be empty), prompt_feat [Tp, 80] (the
        prompt's mel, Tp = token_mel_ratio x Np, as CosyVoice 2's frontend aligns them; [0, 80] or None without a
        prompt), embedding [spk_embed_dim] (the x-vector) -> the mel [80, token_mel_ratio x N], float32."""
        target = self._token_ids(tokens, "tokens")
        prompt = self._token_ids(prompt_tokens, "prompt_tokens")
        if target.size == 0:
            raise ValueError("tokens is empty")
        feat = np.zeros((0, self.mel_bins), np.float32) if prompt_feat is None else np.asarray(prompt_feat)
        if feat.ndim == 3 and feat.shape[0] == 1:
            feat = feat[0]
        if feat.ndim != 2 or feat.shape[1] != self.mel_bins:
            raise ValueError(f"prompt_feat must be [frames, {self.mel_bins}], got shape {list(feat.shape)}")
        if feat.shape[0] != self.ratio * prompt.size:
            raise ValueError(f"prompt_feat has {feat.shape[0]} frames for {prompt.size} prompt tokens; the flow takes "
                             f"{self.ratio} per token (cut both to n = min(frames // {self.ratio}, tokens), as "
                             "CosyVoice 2's frontend does)")
        xvec = np.asarray(embedding, np.float32)
        if xvec.ndim == 2 and xvec.shape[0] == 1:
            xvec = xvec[0]
        if xvec.shape != (self.spk_dim,):
            raise ValueError(f"embedding must be [{self.spk_dim}], got shape {list(xvec.shape)}")
        if not (np.all(np.isfinite(xvec)) and np.all(np.isfinite(feat))):
            raise ValueError("embedding and prompt_feat must be finite")
        if int(n_timesteps) != n_timesteps or n_timesteps < 1:
            raise ValueError(f"n_timesteps must be a positive integer, got {n_timesteps}")
        frames, prompt_frames = self.ratio * (prompt.size + target.size), feat.shape[0]
        if frames > self.noise.shape[1]:
            raise ValueError(f"{frames} mel frames are more than the noise table's {self.noise.shape[1]}")

        mu, spks = self.encode(np.concatenate([prompt, target]), xvec)
        cond = np.zeros((self.mel_bins, frames), np.float32)
        cond[:, :prompt_frames] = feat.T
        # the batch of two: row 0 conditioned, row 1 with mu, spks and cond zero
        mu_in = np.zeros((2, self.mel_bins, frames), np.float32)
        spks_in = np.zeros((2, self.mel_bins), np.float32)
        cond_in = np.zeros((2, self.mel_bins, frames), np.float32)
        mu_in[0], spks_in[0], cond_in[0] = mu, spks, cond
        mask_in = np.ones((2, 1, frames), np.float32)
        x = self.noise[:, :frames].copy()
        t_span = self.time_span(int(n_timesteps))
        t, dt = t_span[0], t_span[1] - t_span[0]
        guided, free = np.float32(1.0 + self.cfg_rate), np.float32(self.cfg_rate)
        for step in range(1, len(t_span)):
            v = self.velocity(np.stack([x, x]), mask_in, mu_in, np.array([t, t], np.float32), spks_in, cond_in)
            x = x + dt * (guided * v[0] - free * v[1])
            t = t + dt
            if step < len(t_span) - 1:
                dt = t_span[step + 1] - t
        return np.ascontiguousarray(x[:, prompt_frames:], np.float32)
