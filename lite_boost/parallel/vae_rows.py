"""Exact row-parallel decode of an image VAE (diffusers `AutoencoderKL`: Stable Diffusion's, FLUX's) across ranks.

Rank r holds a contiguous band of latent rows [s_r, e_r) and runs every decoder layer on its band only:
- a 3x3 convolution reads one row beyond each edge of the band: the ranks all-gather their first and last rows
  (a halo of 2 x C x W per rank) and each pads its band with its neighbours' rows (zeros at the image's edges, as
  the convolution's own zero padding);
- GroupNorm's statistics are over the whole image: the per-group sums (with the element count) are all-reduced,
  then the squared deviations from the global mean, so each band is normalised exactly as the whole image is;
- the mid block's attention (one head over all pixels) all-gathers keys and values and attends the band's queries;
- nearest 2x upsampling doubles the band's rows (band edges stay aligned); 1x1 convolutions, SiLU and residuals are
  per pixel.
The bands are all-gathered at the end, so every rank returns the whole image. Every layer computes what a single
decode computes for those rows (the sums in GroupNorm are only reassociated): equal to it within float32 rounding.

Cost per rank: 1/N of every convolution (the decoder's work), plus per layer one small all-gather (conv halos) or
two all-reduces of B x groups values (GroupNorm), and one all-gather of the mid block's k / v; speed-up close to N
while a band has many more rows than the halo."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from .ulysses import rank, world_size


def band(rows: int, n: int, r: int) -> tuple[int, int]:
    """Rank r's rows [start, end) of `rows` split into n contiguous bands (the first rows % n one row longer)."""
    base, extra = divmod(rows, n)
    start = r * base + min(r, extra)
    return start, start + base + (1 if r < extra else 0)


def _gather_rows(x: Tensor, group) -> list[Tensor]:
    """Every rank's band of x (rows along dim 2), in rank order; bands may differ in length by one row."""
    n = world_size(group)
    rows = torch.tensor([x.shape[2]], dtype=torch.int64)
    counts = [torch.zeros_like(rows) for _ in range(n)]
    dist.all_gather(counts, rows, group=group)
    most = int(max(c.item() for c in counts))
    padded = x if x.shape[2] == most else torch.cat(
        [x, x.new_zeros(*x.shape[:2], most - x.shape[2], *x.shape[3:])], dim=2)
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded.contiguous(), group=group)
    return [p[:, :, :int(c.item())] for p, c in zip(parts, counts)]


def _conv(conv, x: Tensor, group) -> Tensor:
    k, s, p = conv.kernel_size[0], conv.stride, conv.padding
    if k == 1 and p[0] == 0:
        return conv(x)
    if k != 3 or p[0] != 1 or s != (1, 1) or conv.padding_mode != "zeros" or conv.dilation != (1, 1):
        raise NotImplementedError(f"row-parallel decode of a {conv.kernel_size} convolution with stride {s}, padding "
                                  f"{p}, {conv.padding_mode} (built: 1x1 and 3x3 stride 1, zero padding 1)")
    n, r = world_size(group), rank(group)
    edges = torch.cat([x[:, :, :1], x[:, :, -1:]], dim=2).contiguous()   # my first and last rows
    parts = [torch.empty_like(edges) for _ in range(n)]
    dist.all_gather(parts, edges, group=group)
    zero = x.new_zeros(*x.shape[:2], 1, x.shape[3])
    above = parts[r - 1][:, :, 1:2] if r > 0 else zero
    below = parts[r + 1][:, :, 0:1] if r < n - 1 else zero
    return F.conv2d(torch.cat([above, x, below], dim=2), conv.weight, conv.bias, padding=(0, p[1]))


def _group_norm(norm, x: Tensor, group) -> Tensor:
    b, c = x.shape[:2]
    g = norm.num_groups
    xg = x.reshape(b, g, -1).float()
    sums = torch.cat([xg.sum(-1).flatten(), torch.tensor([float(xg.shape[-1])])])   # the group sums and my count
    dist.all_reduce(sums, group=group)
    count = sums[-1]
    mean = (sums[:-1] / count).reshape(b, g, 1)
    dev = ((xg - mean) ** 2).sum(-1)
    dist.all_reduce(dev, group=group)
    y = ((xg - mean) * torch.rsqrt(dev / count + norm.eps)[..., None]).reshape(x.shape).to(x.dtype)
    if norm.affine:
        y = y * norm.weight.view(1, c, *[1] * (x.ndim - 2)) + norm.bias.view(1, c, *[1] * (x.ndim - 2))
    return y


def _resnet(block, x: Tensor, group) -> Tensor:
    if block.upsample is not None or block.downsample is not None:
        raise NotImplementedError("row-parallel decode of a resampling ResNet block")
    h = _conv(block.conv1, block.nonlinearity(_group_norm(block.norm1, x, group)), group)
    h = block.dropout(block.nonlinearity(_group_norm(block.norm2, h, group)))
    h = _conv(block.conv2, h, group)
    if block.conv_shortcut is not None:
        x = _conv(block.conv_shortcut, x, group)
    return (x + h) / block.output_scale_factor


def _attention(attn, x: Tensor, group) -> Tensor:
    if attn.spatial_norm is not None or attn.norm_cross or getattr(attn, "norm_q", None) is not None:
        raise NotImplementedError("row-parallel decode of an attention with spatial / cross / q-k norms")
    b, c, h, w = x.shape
    residual = x
    x = _group_norm(attn.group_norm, x, group) if attn.group_norm is not None else x
    tokens = x.reshape(b, c, h * w).transpose(1, 2)
    q, k, v = attn.to_q(tokens), attn.to_k(tokens), attn.to_v(tokens)
    heads = attn.heads

    def whole(t: Tensor) -> Tensor:   # this band's tokens -> every pixel's, in image order
        img = t.transpose(1, 2).reshape(b, t.shape[2], h, w)
        return torch.cat(_gather_rows(img, group), dim=2).flatten(2).transpose(1, 2)

    split = (lambda t: t.reshape(b, t.shape[1], heads, -1).transpose(1, 2))
    out = F.scaled_dot_product_attention(split(q), split(whole(k)), split(whole(v)), scale=attn.scale)
    out = attn.to_out[1](attn.to_out[0](out.transpose(1, 2).reshape(b, h * w, -1)))
    out = out.transpose(1, 2).reshape(b, c, h, w)
    if attn.residual_connection:
        out = out + residual
    return out / attn.rescale_output_factor


def _upsample(up, x: Tensor, group) -> Tensor:
    if getattr(up, "norm", None) is not None or getattr(up, "conv_transpose", False):
        raise NotImplementedError("row-parallel decode of a normalised or transposed-conv upsampler")
    if up.interpolate:
        x = F.interpolate(x, scale_factor=2.0, mode="nearest")
    if up.use_conv:
        x = _conv(up.conv, x, group)
    return x


def decode_rows(vae, z: Tensor, group=None) -> Tensor:
    """Decodes latents z [B, C, H, W] across the ranks of `group` by bands of rows; every rank returns the whole
    image (as vae.decode's sample)."""
    n, r = world_size(group), rank(group)
    if n == 1:
        return type(vae).decode(vae, z, return_dict=False)[0]
    if z.shape[2] < n:
        raise ValueError(f"{z.shape[2]} latent rows cannot be split across {n} ranks")
    dec = vae.decoder
    if getattr(dec, "upcast", False) or not hasattr(dec, "up_blocks"):
        raise NotImplementedError(f"row-parallel decode of {type(dec).__name__} with upcasting")
    start, end = band(z.shape[2], n, r)
    x = z[:, :, start:end]
    if getattr(vae, "post_quant_conv", None) is not None:
        x = _conv(vae.post_quant_conv, x, group)
    x = _conv(dec.conv_in, x, group)
    mid = dec.mid_block
    x = _resnet(mid.resnets[0], x, group)
    for attn, res in zip(mid.attentions, mid.resnets[1:]):
        if attn is not None:
            x = _attention(attn, x, group)
        x = _resnet(res, x, group)
    for block in dec.up_blocks:
        for res in block.resnets:
            x = _resnet(res, x, group)
        for up in block.upsamplers or []:
            x = _upsample(up, x, group)
    x = _conv(dec.conv_out, dec.conv_act(_group_norm(dec.conv_norm_out, x, group)), group)
    return torch.cat(_gather_rows(x, group), dim=2)
