"""InternVL3.5-Flash (the original project's InternVLChatModel with the Visual Resolution Router; model_type
internvl_chat) in PyTorch, written from the InternVL3.5 report (arXiv 2508.18265) and the public description of its
modules, with the checkpoint's tensor names: the reference the runtime's graphs and lite's pipeline are tested
against. The language model is transformers' Qwen3ForCausalLM.

Image side per tile: InternViT (patch Conv, class token, learned positions; pre-norm blocks with a fused qkv, optional
q / k RMSNorm over the width, layer scales ls1 / ls2; the class token dropped), then two views of the patch grid:
pixel shuffle 0.5 + mlp1 (LayerNorm, Linear, GELU, Linear: side^2 / 4 rows) and pixel shuffle 0.25 + mlp2 (LayerNorm,
three Linears with GELUs: side^2 / 16 rows). The router pools the tile's patches with a learned query through
attention blocks (the project's forward runs attn1 / norm1 once and attn2 / norm2 three times), four residual MLP
blocks and a 2-way gate; a tile takes the small view when its first probability is above the images' quantile
flash_relative_threshold and at least flash_absolute_threshold. The prompt's <IMG_CONTEXT> run of each such tile is
cut to the small view's length before generation."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _norm(kind: str, d: int, eps: float) -> nn.Module:
    return _RMSNorm(d, eps) if kind == "rms_norm" else nn.LayerNorm(d, eps=eps)


class _Attention(nn.Module):
    def __init__(self, c: int, heads: int, qkv_bias: bool, qk_norm: bool, kind: str, eps: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(c, 3 * c, bias=qkv_bias)
        self.proj = nn.Linear(c, c)
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_norm, self.k_norm = _RMSNorm(c, eps), _RMSNorm(c, eps)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        split = (lambda t: t.view(B, N, self.heads, -1).transpose(1, 2))
        out = F.scaled_dot_product_attention(split(q), split(k), split(v))
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


class _Block(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        c, eps, kind = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-6), cfg.get("norm_type", "layer_norm")
        self.norm1, self.norm2 = _norm(kind, c, eps), _norm(kind, c, eps)
        self.attn = _Attention(c, cfg["num_attention_heads"], cfg.get("qkv_bias", True),
                               cfg.get("qk_normalization", False), kind, eps)
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(c, cfg["intermediate_size"]), nn.Linear(cfg["intermediate_size"], c)
        self.ls1, self.ls2 = nn.Parameter(torch.ones(c)), nn.Parameter(torch.ones(c))

    def forward(self, x):
        x = x + self.attn(self.norm1(x)) * self.ls1
        return x + self.mlp.fc2(F.gelu(self.mlp.fc1(self.norm2(x)))) * self.ls2


class InternVisionModel(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        c, size, patch = cfg["hidden_size"], cfg["image_size"], cfg["patch_size"]
        self.embeddings = nn.Module()
        self.embeddings.class_embedding = nn.Parameter(torch.randn(1, 1, c))
        self.embeddings.patch_embedding = nn.Conv2d(3, c, patch, patch)
        self.embeddings.position_embedding = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, c))
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(_Block(cfg) for _ in range(cfg["num_hidden_layers"]))

    def forward(self, pixels):
        x = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.embeddings.class_embedding.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.embeddings.position_embedding
        for layer in self.encoder.layers:
            x = layer(x)
        return x


def pixel_shuffle(x: torch.Tensor, scale: float) -> torch.Tensor:
    """[n, w, h, c] -> [n, w * scale, h * scale, c / scale^2], the project's ps_version v2."""
    n, w, h, c = x.shape
    x = x.reshape(n, w, int(h * scale), int(c / scale)).permute(0, 2, 1, 3)
    x = x.reshape(n, int(h * scale), int(w * scale), int(c / (scale * scale)))
    return x.permute(0, 2, 1, 3)


class CrossAttentionPooling(nn.Module):
    def __init__(self, dim: int, heads: int = 16):
        super().__init__()
        self.query_token = nn.Parameter(torch.randn(1, dim))
        for k in range(1, 5):
            setattr(self, f"attn{k}", nn.MultiheadAttention(dim, heads, batch_first=True))
            setattr(self, f"norm{k}", nn.LayerNorm(dim))

    def forward(self, tokens):   # [tiles, N, D] -> [tiles, D]
        out = self.query_token[None].expand(tokens.shape[0], -1, -1)
        for attn, norm in ((self.attn1, self.norm1), (self.attn2, self.norm2), (self.attn2, self.norm2),
                           (self.attn2, self.norm2)):
            out = norm(attn(out, tokens, tokens, need_weights=False)[0])
        return out[:, 0]


class Gating(nn.Module):
    def __init__(self, hidden: int, expansion: int = 4):
        super().__init__()
        for k in range(1, 5):
            setattr(self, f"block{k}", nn.Sequential(nn.Linear(hidden, hidden * expansion), nn.GELU(), nn.Dropout(0.0),
                                                     nn.Linear(hidden * expansion, hidden), nn.Dropout(0.0),
                                                     nn.LayerNorm(hidden)))
        self.gate = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 2))

    def forward(self, x):
        for k in range(1, 5):
            x = x + getattr(self, f"block{k}")(x)
        return torch.softmax(self.gate(x), dim=-1)


class InternVLFlash(nn.Module):
    def __init__(self, vision_config: dict, llm_config, flash_relative_threshold: float,
                 flash_absolute_threshold: float):
        super().__init__()
        from transformers import Qwen3ForCausalLM
        c, llm = vision_config["hidden_size"], llm_config.hidden_size
        self.vision_model = InternVisionModel(vision_config)
        self.language_model = Qwen3ForCausalLM(llm_config)
        self.mlp1 = nn.Sequential(nn.LayerNorm(4 * c), nn.Linear(4 * c, llm), nn.GELU(), nn.Linear(llm, llm))
        self.mlp2 = nn.Sequential(nn.LayerNorm(16 * c), nn.Linear(16 * c, 2 * llm), nn.GELU(), nn.Dropout(0.0),
                                  nn.Linear(2 * llm, 2 * llm), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * llm, llm))
        self.pooling_before_gating = CrossAttentionPooling(c)
        self.gating = Gating(c)
        self.relative, self.absolute = flash_relative_threshold, flash_absolute_threshold

    @torch.no_grad()
    def image_views(self, pixels):
        """(rows of every tile at 0.5 [tiles, side^2/4, llm], at 0.25 [tiles, side^2/16, llm], gate [tiles, 2])."""
        x = self.vision_model(pixels)[:, 1:]
        side = int(x.shape[1] ** 0.5)
        grid = x.reshape(x.shape[0], side, side, -1)
        gate = self.gating(self.pooling_before_gating(x))
        small = self.mlp2(pixel_shuffle(grid, 0.25).flatten(1, 2))
        large = self.mlp1(pixel_shuffle(grid, 0.5).flatten(1, 2))
        return large, small, gate

    def compress(self, gate):
        """Which tiles take the small view."""
        first = gate[:, 0].float()
        return (first > torch.quantile(first, self.relative)) & (first >= self.absolute)

    @torch.no_grad()
    def generate(self, pixels, input_ids, context_id: int, max_new_tokens: int):
        """Greedy new tokens; input_ids hold each tile's full run of context tokens (side^2 / 4 each, tiles in
        order), which the compressed tiles' runs are cut from."""
        large, small, gate = self.image_views(pixels)
        small_tiles = self.compress(gate)
        per = large.shape[1]
        ids = input_ids[0].tolist()
        keep, rows, seen = [], [], 0
        for t in ids:
            if t == context_id:
                tile, offset = divmod(seen, per)
                seen += 1
                if small_tiles[tile] and offset >= small.shape[1]:
                    continue
                rows.append((small if small_tiles[tile] else large)[tile, offset])
            keep.append(t)
        kept = torch.tensor([keep])
        embeds = self.language_model.get_input_embeddings()(kept).clone()
        embeds[0, kept[0] == context_id] = torch.stack(rows)
        out = self.language_model.generate(inputs_embeds=embeds, attention_mask=torch.ones_like(kept),
                                           max_new_tokens=max_new_tokens, do_sample=False)
        return out[0].tolist()
