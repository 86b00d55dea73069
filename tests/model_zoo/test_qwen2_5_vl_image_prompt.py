"""An image in a Qwen2.5-VL prompt on the runtime: the vision tower's graph (head "vision") computes the image rows,
LLMEngine puts them at the image-pad tokens (PromptEmbeddings) with the multimodal-RoPE positions
(lite.llm.multimodal.qwen2_vl_positions), and the language model's step graph generates. Against transformers'
Qwen2_5_VLForConditionalGeneration (with mm_token_type_ids, so it computes its 3-D positions): greedy tokens equal,
token for token, for two prompts of different lengths in one continuous batch; the first step's logits and the
"hidden" head's states within 1e-4."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from lite.llm.engine import LLMEngine
from lite.llm.multimodal import PromptEmbeddings, qwen2_vl_positions
from lite.llm.sampling import SamplingParams
from test_generation_graphs import run

IMAGE, VIDEO, START, END = 60, 61, 62, 63


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    torch.manual_seed(0)
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[1]),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    root = tmp_path_factory.mktemp("qwen2_5_vl")
    model.save_pretrained(str(root / "ckpt"))
    paths = {}
    for head, extra in (("logits", {}), ("hidden", {}), ("vision", {"latent_shape": (1, 8, 12)})):
        paths[head] = Converter().convert(FmkType.HF, str(root / "ckpt"), str(root / f"{head}.ms"), verify_build=False,
                                          checkpoint_options=CheckpointOptions(head=head, **extra)).output_file
    return model, paths


def _prompt(text_before: int, text_after: int, grid=(1, 8, 12), seed=0) -> list[int]:
    rng = np.random.default_rng(seed)
    n = grid[0] * grid[1] * grid[2] // 4
    return (rng.integers(0, 56, text_before).tolist() + [START] + [IMAGE] * n + [END]
            + rng.integers(0, 56, text_after).tolist())


def _image_rows(model, paths, seed):
    pixels = np.random.default_rng(seed).standard_normal((96, 3 * 2 * 14 * 14)).astype(np.float32)
    rows = run(paths["vision"], {"pixel_values": pixels})[0]
    return pixels, rows


def _embeddings(ids, rows):
    ids = np.array(ids)
    return PromptEmbeddings(np.flatnonzero(ids == IMAGE), rows,
                            qwen2_vl_positions(ids, [(1, 8, 12)], IMAGE, merge=2, video_token_id=VIDEO))


def test_positions_match_transformers_rope_index(vlm):
    model, _ = vlm
    ids = _prompt(5, 3) + [START] + [IMAGE] * 24 + [END] + [7, 8]
    types = torch.tensor([[1 if t == IMAGE else 0 for t in ids]])
    want, delta = model.model.get_rope_index(torch.tensor([ids]), types, image_grid_thw=torch.tensor([[1, 8, 12],
                                                                                                       [1, 6, 16]]))
    got = qwen2_vl_positions(ids, [(1, 8, 12), (1, 6, 16)], IMAGE, merge=2)
    np.testing.assert_array_equal(got, want[:, 0].numpy())
    assert int(got.max()) + 1 - len(ids) == int(delta)
    with pytest.raises(ValueError, match="grids"):
        qwen2_vl_positions(ids, [(1, 8, 12)], IMAGE, merge=2)


def test_image_prompt_generates_as_transformers(vlm):
    model, paths = vlm
    prompts = [_prompt(6, 4, seed=1), _prompt(19, 9, seed=2)]
    images = [_image_rows(model, paths, seed) for seed in (3, 4)]
    engine = LLMEngine(paths["logits"], model.config.text_config.to_dict(), num_blocks=64, block_size=16)
    mm = [_embeddings(p, rows) for p, (_, rows) in zip(prompts, images)]
    got = engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0), embeddings=mm)
    first = LLMEngine(paths["logits"], model.config.text_config.to_dict(), num_blocks=64, block_size=16) \
        .encode(prompts, embeddings=mm)
    for ids, (pixels, rows), tokens, logits in zip(prompts, images, got, first):
        with torch.no_grad():
            feats = model.model.visual(torch.from_numpy(pixels), grid_thw=torch.tensor([[1, 8, 12]]))
            feats = feats.pooler_output if hasattr(feats, "pooler_output") else feats
            np.testing.assert_allclose(rows, feats.numpy(), rtol=1e-4, atol=1e-4 * float(feats.abs().max()))
            kwargs = dict(input_ids=torch.tensor([ids]), pixel_values=torch.from_numpy(pixels),
                          image_grid_thw=torch.tensor([[1, 8, 12]]),
                          mm_token_type_ids=torch.tensor([[int(t == IMAGE) for t in ids]]))
            want_logits = model(**kwargs).logits[0, -1].numpy()
            want = model.generate(**kwargs, max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
        np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4 * np.abs(want_logits).max())
        assert tokens == want


def test_image_prompt_hidden_states_and_prefix_caching(vlm):
    """Head "hidden" at every position (Qwen-Image-Edit's text encoder reads them); the same placeholder tokens with
    another image do not reuse the first image's cached blocks, the same image does."""
    model, paths = vlm
    ids = _prompt(20, 5, seed=5)
    (pixels, rows), (_, other) = _image_rows(model, paths, 6), _image_rows(model, paths, 7)
    engine = LLMEngine(paths["hidden"], model.config.text_config.to_dict(), num_blocks=64, block_size=16)
    states = engine.encode([ids], positions=[range(len(ids))], embeddings=[_embeddings(ids, rows)])[0]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids]), pixel_values=torch.from_numpy(pixels),
                    image_grid_thw=torch.tensor([[1, 8, 12]]),
                    mm_token_type_ids=torch.tensor([[int(t == IMAGE) for t in ids]]),
                    output_hidden_states=True).hidden_states[-1][0].numpy()
    np.testing.assert_allclose(states, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

    cached = LLMEngine(paths["logits"], model.config.text_config.to_dict(), num_blocks=64, block_size=16)
    a = cached.encode([ids], embeddings=[_embeddings(ids, rows)])[0]
    b = cached.encode([ids], embeddings=[_embeddings(ids, other)])[0]
    fresh = LLMEngine(paths["logits"], model.config.text_config.to_dict(), num_blocks=64, block_size=16)
    np.testing.assert_allclose(b, fresh.encode([ids], embeddings=[_embeddings(ids, other)])[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a, b)
    req = cached.add_request("again", ids, SamplingParams(max_new_tokens=1, temperature=0),
                             embeddings=_embeddings(ids, rows))
    cached.step()
    assert cached.last_output.chunks[0].start == (len(ids) - 1) // 16 * 16   # the first image's blocks, reused
    assert req.num_tokens == len(ids) + 1


def test_embedding_inputs_are_checked(vlm):
    model, paths = vlm
    engine = LLMEngine(paths["logits"], model.config.text_config.to_dict(), num_blocks=16, block_size=16)
    ids = _prompt(2, 2)
    with pytest.raises(ValueError, match="hidden size"):
        engine.add_request("w", ids, embeddings=PromptEmbeddings(np.flatnonzero(np.array(ids) == IMAGE),
                                                                 np.zeros((24, 8), np.float32)))
    with pytest.raises(ValueError, match="must be"):
        PromptEmbeddings([1, 2], np.zeros((3, 32), np.float32))
    with pytest.raises(ValueError, match="outside"):
        engine.add_request("o", [1, 2], embeddings=PromptEmbeddings([5], np.zeros((1, 32), np.float32)))
