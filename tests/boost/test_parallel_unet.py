"""ParallelManager on diffusers' UNet2DConditionModel (Stable Diffusion): every spatial transformer's tokens split
across gloo ranks in spawned processes equals the single-process UNet (token counts not divisible by the world size;
Ulysses where the heads divide, k / v gathered where they do not), for SD 1.5's and SDXL's forms and a whole
StableDiffusionPipeline (its AutoencoderKL decoding by bands of rows); restore undoes it. The 4-rank case runs with -m slow."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from test_ulysses import count_all_to_all, spawn


def tiny_unet(kind: str):
    from diffusers import UNet2DConditionModel
    torch.manual_seed(0)
    if kind == "sd15":   # 3 heads at both levels: k / v gathered at 2 and 4 ranks
        cfg = dict(block_out_channels=(24, 48), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=3, layers_per_block=1,
                   norm_num_groups=8, cross_attention_dim=12)
    else:   # SDXL's form: 2 then 4 heads, two transformer layers, text_time conditioning
        cfg = dict(block_out_channels=(16, 32), down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                   up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=[2, 4],
                   transformer_layers_per_block=[1, 2], layers_per_block=1, norm_num_groups=8,
                   use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
                   projection_class_embeddings_input_dim=6 * 8 + 10, cross_attention_dim=12)
    unet = UNet2DConditionModel(**cfg).eval()
    with torch.no_grad():
        for p in unet.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return unet


def feed(kind: str):
    g = torch.Generator().manual_seed(1)
    args = dict(sample=torch.randn(2, 4, 6, 10, generator=g), timestep=torch.tensor([900.0, 250.0]),
                encoder_hidden_states=torch.randn(2, 7, 12, generator=g), return_dict=False)
    if kind == "sdxl":
        args["added_cond_kwargs"] = {"text_embeds": torch.randn(2, 10, generator=g),
                                     "time_ids": torch.tensor([[48.0, 80, 0, 0, 48, 80]] * 2)}
    return args


def _matches(rank, world):
    for kind in ("sd15", "sdxl"):
        unet, args = tiny_unet(kind), feed(kind)   # 60 tokens at the top level, 15 below
        with torch.no_grad():
            want = unet(**args)[0]
            ParallelManager(unet)
            with count_all_to_all() as calls:
                got = unet(**args)[0]
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            # self-attentions taking Ulysses (heads divisible by the ranks): SD 1.5's are all 3-head (none); SDXL's
            # 2-head ones (down 1 + up 2) at 2 ranks and its 4-head ones (down 2 + mid 2 + up 4) at 2 and 4
            ulysses = {("sd15", 2): 0, ("sd15", 4): 0, ("sdxl", 2): 3 + 8, ("sdxl", 4): 8}[kind, world]
            assert len(calls) == 4 * ulysses, (kind, world, len(calls))   # four all-to-alls per Ulysses attention
            restore(unet)
            torch.testing.assert_close(unet(**args)[0], want, atol=1e-6, rtol=1e-6)
    if world == 2:
        with pytest.raises(NotImplementedError, match="Wan"):
            ParallelManager(tiny_unet("sd15"), {"attention": {"sparse_type": "rf_v2", "sparsity": 0.5}})


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])   # 4 ranks: ~13 s
def test_unet_sequence_parallel_equals_single_process(world):
    spawn(_matches, world)


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    words = ["<pad>", "</s>", "<unk>", "<s>", "a", "red", "fox"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 3), ("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.model_max_length = 16
    return fast


def _pipeline_matches(rank, world):
    import warnings
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline
    from transformers import CLIPTextConfig, CLIPTextModel
    torch.manual_seed(2)
    text = CLIPTextModel(CLIPTextConfig(vocab_size=20, hidden_size=12, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=16, eos_token_id=1)).eval()
    vae = AutoencoderKL(block_out_channels=[8, 16], down_block_types=["DownEncoderBlock2D"] * 2,
                        up_block_types=["UpDecoderBlock2D"] * 2, layers_per_block=1, norm_num_groups=4).eval()
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=word_tokenizer(),
                                   unet=tiny_unet("sd15"), scheduler=DDIMScheduler(), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    noise = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 4, 12, 20)).astype(np.float32))
    args = dict(prompt="a red fox", height=24, width=40, num_inference_steps=2, latents=noise, output_type="np")
    with torch.no_grad():
        want = pipe(**args).images
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no component left whole
            ParallelManager(pipe)   # the UNet's transformers split, the AutoencoderKL decoding by bands of rows
        assert pipe.unet._lite_boost_parallel and pipe.vae._lite_boost_parallel
        got = pipe(**args).images
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_stable_diffusion_pipeline_on_two_ranks():
    spawn(_pipeline_matches, 2)


def test_unet_at_world_size_one_is_untouched():
    unet = tiny_unet("sd15")
    assert ParallelManager(unet) is unet and not getattr(unet, "_lite_boost_parallel", None)
