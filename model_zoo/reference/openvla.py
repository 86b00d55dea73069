"""A PyTorch reference of OpenVLA (openvla/openvla-7b's remote code, `OpenVLAForActionPrediction` in
prismatic/extern/hf/modeling_prismatic.py), written here because neither transformers nor timm (which needs
torchvision) runs beside this project's torch: the tests build tiny OpenVLAs with it and compare lite against it.

What it follows, with the checkpoint's tensor names:
- `vision_backbone.featurizer` / `.fused_featurizer`: timm VisionTransformers (DINOv2 ViT-L/14 with 4 register tokens
  and LayerScale; SigLIP So400m/14 without class token), patch Conv with bias, positions added to the patches only
  (DINOv2's no_embed_class; SigLIP has no prefix tokens), then [class, registers, patches]; pre-LayerNorm blocks (eps
  1e-6) with a fused qkv Linear, exact GELU MLP, LayerScale as `ls1.scale_factor` / `ls2.scale_factor` (Prismatic's
  renamed gamma). Prismatic reads `get_intermediate_layers(n={depth - 2})`: the output of the second-to-last block,
  prefix tokens dropped, no final norm.
- The fused backbone splits pixel_values [B, 6, S, S] into the DINOv2 view (channels 0-2) and the SigLIP view (3-5)
  and concatenates the two towers' patch features; `projector` fc1 (x4) - GELU - fc2 - GELU - fc3 to the LLM width.
- `language_model`: transformers' LlamaForCausalLM; the patch rows go right after the prompt's BOS.
- predict_action: the prompt "In: What action should the robot take to {task}?\\nOut:" with BOS, token 29871 (Llama's
  empty "▁") appended, greedy generation of action_dim tokens; token t -> bin (vocab_size - pad_to_multiple_of) - t -
  1 clipped to [0, bins - 2] -> bin centre of linspace(-1, 1, n_action_bins) -> q01 / q99 un-normalisation where
  the dataset's mask allows."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


class TimmViT(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, mlp: int, patch: int, size: int, class_token: bool,
                 registers: int, layer_scale: bool):
        super().__init__()
        self.heads, self.prefix = heads, int(class_token) + registers
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, registers, dim)) if registers else None
        self.pos_embed = nn.Parameter(torch.zeros(1, (size // patch) ** 2, dim))
        self.blocks = nn.ModuleList(_Block(dim, heads, mlp, layer_scale) for _ in range(depth))

    def penultimate_patches(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2) + self.pos_embed
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
        x = torch.cat(prefix + [x], 1)
        for blk in self.blocks[:-1]:
            x = blk(x)
        return x[:, self.prefix:]


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int, layer_scale: bool):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)
        if layer_scale:
            self.ls1, self.ls2 = nn.Module(), nn.Module()
            self.ls1.scale_factor = nn.Parameter(torch.full((dim,), 1e-5))
            self.ls2.scale_factor = nn.Parameter(torch.full((dim,), 1e-5))
        else:
            self.ls1 = self.ls2 = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        qkv = self.attn.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        a = self.attn.proj(a.transpose(1, 2).reshape(B, N, D))
        x = x + (a * self.ls1.scale_factor if self.ls1 is not None else a)
        m = self.mlp.fc2(torch.nn.functional.gelu(self.mlp.fc1(self.norm2(x))))
        return x + (m * self.ls2.scale_factor if self.ls2 is not None else m)


class OpenVLAReference(nn.Module):
    """`towers`: the featurizer's and the fused featurizer's TimmViT arguments; `text_config`: a LlamaConfig dict."""

    def __init__(self, towers: list[dict], text_config: dict, pad_to_multiple_of: int = 64, n_action_bins: int = 256,
                 norm_stats: dict | None = None):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        self.vision_backbone = nn.Module()
        self.vision_backbone.featurizer = TimmViT(**towers[0])
        self.vision_backbone.fused_featurizer = TimmViT(**towers[1])
        vision_dim = towers[0]["dim"] + towers[1]["dim"]
        llm = LlamaConfig(**text_config)
        self.projector = nn.Module()
        self.projector.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
        self.projector.fc2 = nn.Linear(4 * vision_dim, llm.hidden_size)
        self.projector.fc3 = nn.Linear(llm.hidden_size, llm.hidden_size)
        self.language_model = LlamaForCausalLM(llm)
        self.vocab_size = llm.vocab_size - pad_to_multiple_of
        bins = np.linspace(-1, 1, n_action_bins)
        self.bin_centers = (bins[:-1] + bins[1:]) / 2.0
        self.norm_stats = norm_stats or {}

    def patch_rows(self, pixel_values: torch.Tensor) -> torch.Tensor:
        img, fused = torch.split(pixel_values, [3, 3], dim=1)
        patches = torch.cat([self.vision_backbone.featurizer.penultimate_patches(img),
                             self.vision_backbone.fused_featurizer.penultimate_patches(fused)], dim=2)
        p = self.projector
        return p.fc3(torch.nn.functional.gelu(p.fc2(torch.nn.functional.gelu(p.fc1(patches)))))

    @torch.no_grad()
    def generate_action_tokens(self, input_ids: torch.Tensor, pixel_values: torch.Tensor, n: int) -> list[int]:
        """Greedy: the BOS, the patch rows, the rest of the prompt, then n tokens (no cache: tiny models only)."""
        rows = self.patch_rows(pixel_values)
        embed = self.language_model.get_input_embeddings()
        ids, out = input_ids, []
        for _ in range(n):
            e = embed(ids)
            x = torch.cat([e[:, :1], rows, e[:, 1:]], 1)
            token = int(self.language_model(inputs_embeds=x).logits[0, -1].argmax())
            out.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], 1)
        return out

    def actions_from_tokens(self, tokens: list[int], unnorm_key: str | None = None) -> np.ndarray:
        discretized = np.clip(self.vocab_size - np.asarray(tokens) - 1, 0, self.bin_centers.shape[0] - 1)
        normalized = self.bin_centers[discretized]
        if not self.norm_stats:
            return normalized
        stats = self.norm_stats[unnorm_key or next(iter(self.norm_stats))]["action"]
        mask = np.asarray(stats.get("mask", np.ones_like(stats["q01"], dtype=bool)))
        high, low = np.asarray(stats["q99"]), np.asarray(stats["q01"])
        return np.where(mask, 0.5 * (normalized + 1) * (high - low) + low, normalized)
