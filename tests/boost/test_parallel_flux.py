"""ParallelManager on diffusers' FluxTransformer2DModel: Ulysses over the joint [text, image] attention on gloo in
spawned processes equals the single-process model (image tokens divisible by the world size or not, 2 and 4 ranks),
a whole FluxPipeline with its AutoencoderKL decoded by bands of rows gives the single-process image, restore undoes
it; what it does not cover is refused by name."""
from __future__ import annotations

import pytest
import torch

from lite_boost import ParallelManager
from lite_boost.parallel import restore

from test_ulysses import count_all_to_all, spawn


def tiny_flux(heads: int = 4, guidance: bool = True):
    from diffusers import FluxTransformer2DModel
    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=2, num_single_layers=2,
                                   attention_head_dim=16, num_attention_heads=heads, joint_attention_dim=24,
                                   pooled_projection_dim=12, guidance_embeds=guidance, axes_dims_rope=(4, 6, 6)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(rows: int, cols: int, text: int = 7):
    g = torch.Generator().manual_seed(1)
    ids = torch.zeros(rows * cols, 3)
    ids[:, 1] = torch.arange(rows).repeat_interleave(cols).float()
    ids[:, 2] = torch.arange(cols).repeat(rows).float()
    return dict(hidden_states=torch.randn(2, rows * cols, 8, generator=g),
                encoder_hidden_states=torch.randn(2, text, 24, generator=g),
                pooled_projections=torch.randn(2, 12, generator=g), timestep=torch.tensor([0.9, 0.4]),
                img_ids=ids, txt_ids=torch.zeros(text, 3), guidance=torch.tensor([3.5, 3.5]), return_dict=False)


def _matches(rank, world, shapes):
    for rows, cols in shapes:
        model = tiny_flux()
        feed = inputs(rows, cols)
        with torch.no_grad():
            want = model(**feed)[0]
            ParallelManager(model)
            with count_all_to_all() as calls:
                got = model(**feed)[0]
            # four all-to-alls per attention: 2 double + 2 single blocks
            assert len(calls) == 4 * 4, len(calls)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            restore(model)
            torch.testing.assert_close(model(**feed)[0], want, atol=1e-6, rtol=1e-6)
    if world == 2:
        _pipeline_matches()
    if world == 2:   # what it refuses, by name
        with pytest.raises(ValueError, match="heads"):
            ParallelManager(tiny_flux(heads=3))
        with pytest.raises(NotImplementedError, match="Wan"):
            ParallelManager(tiny_flux(), {"attention": {"sparse_type": "rf_v2", "sparsity": 0.5}})


def _pipeline_matches():
    """A whole FluxPipeline: the transformer under Ulysses and the AutoencoderKL decoding by bands of rows (10 latent
    rows), the same image as one process."""
    import warnings

    import numpy as np
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast, T5Config, T5EncoderModel
    words = ["<pad>", "</s>", "<unk>", "a", "red", "fox"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    tok.model_max_length = 16
    torch.manual_seed(1)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(words), hidden_size=12, intermediate_size=16,
                                        num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16,
                                        eos_token_id=1)).eval()
    t5 = T5EncoderModel(T5Config(vocab_size=len(words), d_model=24, d_kv=6, d_ff=32, num_layers=1,
                                 num_heads=4)).eval()
    vae = AutoencoderKL(latent_channels=2, block_out_channels=[8, 16], down_block_types=["DownEncoderBlock2D"] * 2,
                        up_block_types=["UpDecoderBlock2D"] * 2, layers_per_block=1, norm_num_groups=4,
                        use_quant_conv=False, use_post_quant_conv=False, scaling_factor=0.3611,
                        shift_factor=0.1159).eval()
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=clip, tokenizer=tok,
                        text_encoder_2=t5, tokenizer_2=tok, transformer=tiny_flux())
    pipe.set_progress_bar_config(disable=True)
    args = dict(prompt="a red fox", height=20, width=24, num_inference_steps=2, max_sequence_length=16,
                output_type="np")
    with torch.no_grad():
        want = pipe(**args, generator=torch.Generator().manual_seed(0)).images
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)   # no component left whole
            ParallelManager(pipe)
        assert pipe.vae._lite_boost_parallel and pipe.transformer._lite_boost_parallel
        got = pipe(**args, generator=torch.Generator().manual_seed(0)).images
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("world,shapes", [(2, [(3, 5), (4, 4)]),
                                          pytest.param(4, [(3, 5)], marks=pytest.mark.slow)])   # 4 ranks: ~12 s
def test_ulysses_flux_equals_single_process(world, shapes):
    """15 image tokens (padded on the last ranks) and 16; at 2 ranks also the refusals; 4 ranks with -m slow."""
    spawn(_matches, world, shapes)


def test_flux_at_world_size_one_is_untouched():
    model = tiny_flux()
    assert ParallelManager(model) is model and not getattr(model, "_lite_boost_parallel", None)
