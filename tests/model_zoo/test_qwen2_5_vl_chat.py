"""Qwen2.5-VL chat with images on the runtime (issue 38's VLM path): a tiny Qwen2_5_VLForConditionalGeneration
checkpoint with its tokenizer, chat template and image processor config, converted by `python -m model_zoo convert
Qwen2.5-VL-3B-Instruct` (the step graph and the any-size vision tower), then chat messages with image parts through
TextEngine: images of different sizes (other patch grids) and two images in one prompt, in one continuous batch,
greedy tokens equal to transformers' generate (given the processor's inputs and token types); the any-size vision
graph equal to transformers' vision tower for images and a two-frame video grid; data-URL images; a corrupt image is
a clear error."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import torch

from model_zoo.cli import main as model_zoo

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]
WORDS = "<unk> <pad> system user assistant You are a helpful . What is in this picture ? Describe the two images".split()
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
            "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
            "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
            "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% endif %}")


VISION = {"Qwen2.5-VL-3B-Instruct": dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=32,
                                         patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                                         fullatt_block_indexes=[1]),
          "Qwen2-VL-2B-Instruct": dict(depth=2, embed_dim=32, mlp_ratio=2, num_heads=2, hidden_size=32, patch_size=14,
                                       spatial_merge_size=2, temporal_patch_size=2),
          "Qwen3-VL-2B-Instruct": dict(depth=3, hidden_size=32, intermediate_size=40, num_heads=2, patch_size=16,
                                       temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16,
                                       out_hidden_size=32, deepstack_visual_indexes=[0, 1],
                                       hidden_act="gelu_pytorch_tanh")}


def build_vlm(root, name):
    """A tiny checkpoint of the registry row `name` (Qwen2.5-VL or Qwen2-VL) with tokenizer, chat template and image
    processor config, converted by `model_zoo convert`."""
    import transformers
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    prefix = {"Qwen2.5": "Qwen2_5_VL", "Qwen2-V": "Qwen2VL", "Qwen3-V": "Qwen3VL"}[name[:7]]
    qwen3 = prefix == "Qwen3VL"
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<|im_end|>")
    tokenizer.chat_template = TEMPLATE
    ids = dict(zip(SPECIAL, tokenizer.convert_tokens_to_ids(SPECIAL)))
    vocab = len(WORDS) + len(SPECIAL)
    torch.manual_seed(0)
    model = getattr(transformers, f"{prefix}ForConditionalGeneration")(getattr(transformers, f"{prefix}Config")(
        text_config=dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         eos_token_id=ids["<|im_end|>"], bos_token_id=ids["<|im_start|>"],
                         **(dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                               "mrope_section": [4, 2, 2], "mrope_interleaved": True})
                            if qwen3 else dict(rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}))),
        vision_config=VISION[name], image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=ids["<|im_end|>"])).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.save_pretrained(str(root / "ckpt"))
    tokenizer.save_pretrained(str(root / "ckpt"))
    processor = Qwen2VLImageProcessorPil(max_pixels=28 * 28 * 64, **({"patch_size": 16} if qwen3 else {}))
    processor.save_pretrained(str(root / "ckpt"))
    assert model_zoo(["convert", name, "--checkpoint", str(root / "ckpt"), "--output", str(root / "lite")]) == 0
    return model, tokenizer, processor, ids, root


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return build_vlm(tmp_path_factory.mktemp("qwen2_5_vl_chat"), "Qwen2.5-VL-3B-Instruct")


def picture(h: int, w: int, seed: int):
    from PIL import Image
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8))


def reference(model, tokenizer, processor, ids, messages, images, new_tokens):
    """transformers' generate on what Qwen2VLProcessor gives (the image processor, each image-pad token repeated
    for its merged patches) with the token types it returns."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    pixels = processor(images=images, return_tensors="pt")
    for grid in pixels["image_grid_thw"]:
        text = text.replace("<|image_pad|>", "<|placeholder|>" * (int(grid.prod()) // 4), 1)
    input_ids = tokenizer(text.replace("<|placeholder|>", "<|image_pad|>"), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, pixel_values=pixels["pixel_values"],
                             image_grid_thw=pixels["image_grid_thw"],
                             mm_token_type_ids=(input_ids == ids["<|image_pad|>"]).int(),
                             max_new_tokens=new_tokens, do_sample=False)
    return out[0, input_ids.shape[1]:].tolist()


def test_chat_with_images_generates_as_transformers(vlm):
    chat_matches_transformers(*vlm)


def test_qwen2_vl_chat_and_vision_tower(tmp_path):
    """Qwen2-VL's ViT (LayerNorms, QuickGELU MLP, whole frames attended in every block) through the same any-size
    graph and chat path."""
    model, tokenizer, processor, ids, root = build_vlm(tmp_path, "Qwen2-VL-2B-Instruct")
    chat_matches_transformers(model, tokenizer, processor, ids, root)
    vision_tower_matches(model, root)


def test_qwen3_vl_chat_and_vision_tower(tmp_path):
    """Qwen3-VL: the learned position table interpolated to each grid, DeepStack features from two vision blocks added
    after the language model's first two layers, interleaved M-RoPE, a Qwen3 decoder (q / k norms)."""
    model, tokenizer, processor, ids, root = build_vlm(tmp_path, "Qwen3-VL-2B-Instruct")
    chat_matches_transformers(model, tokenizer, processor, ids, root)
    vision_tower_matches(model, root)


def chat_matches_transformers(model, tokenizer, processor, ids, root):
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=64)
    assert engine.vision is not None and engine.vision.any_size
    one, two, three = picture(50, 70, 1), picture(90, 60, 2), picture(40, 40, 3)
    chats = [[{"role": "user", "content": [{"type": "image", "image": one},
                                           {"type": "text", "text": "What is in this picture ?"}]}],
             [{"role": "system", "content": "You are a helpful assistant ."},
              {"role": "user", "content": [{"type": "text", "text": "Describe the two images"},
                                           {"type": "image", "image": two}, {"type": "image", "image": three}]}]]
    outs = engine.generate(chats, SamplingParams(max_new_tokens=10, temperature=0))
    assert outs[0].prompt_tokens != outs[1].prompt_tokens and outs[0].token_ids
    for chat, images, out in zip(chats, ([one], [two, three]), outs):
        want = reference(model, tokenizer, processor, ids, chat, images, 10)
        assert out.token_ids == want


def test_any_size_vision_graph_matches_transformers(vlm):
    """The any-size graph against transformers' vision tower on three grids (an image whose windows the grid's edges
    cut, a small one, a two-frame video)."""
    vision_tower_matches(vlm[0], vlm[4])


def vision_tower_matches(model, root):
    from lite.qwen2_vl_image import VisionTower, qwen3_vl_vision_inputs, vision_inputs
    tower = VisionTower(str(root / "lite" / "vision.ms"), model.config.to_dict())
    patch = model.config.vision_config.patch_size
    for grid in ((1, 10, 14), (1, 4, 4), (2, 6, 8)):
        pixels = np.random.default_rng(sum(grid)).standard_normal((int(np.prod(grid)), 3 * 2 * patch * patch))
        pixels = pixels.astype(np.float32)
        layout = (qwen3_vl_vision_inputs if tower.qwen3 else vision_inputs)(tower.config, grid)
        got = [t.get_data_to_numpy() for t in tower.model.predict({"pixel_values": pixels, **layout})]
        with torch.no_grad():
            res = model.model.visual(torch.from_numpy(pixels), grid_thw=torch.tensor([grid]))
        want = (res.pooler_output if hasattr(res, "pooler_output") else res).numpy()
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        if tower.qwen3:   # the DeepStack features of each level
            deep = np.stack([d.numpy() for d in res.deepstack_features])
            np.testing.assert_allclose(got[1], deep, rtol=1e-4, atol=1e-4 * np.abs(deep).max())


def test_data_url_images_and_bad_input(vlm, tmp_path, capsys):
    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    model, tokenizer, processor, ids, root = vlm
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=64)
    image = picture(50, 70, 1)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    question = [{"type": "text", "text": "What is in this picture ?"}]
    by_url = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}] + question}]
    by_image = [{"role": "user", "content": [{"type": "image", "image": image}] + question}]
    params = SamplingParams(max_new_tokens=6, temperature=0)
    assert engine.generate([by_url], params)[0].token_ids == engine.generate([by_image], params)[0].token_ids
    broken = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                                                      + base64.b64encode(b"not a png")
                                                                                      .decode()}}] + question}]
    with pytest.raises(ValueError, match="cannot be read"):
        engine.generate([broken], params)
    image.save(tmp_path / "pic.png")
    assert model_zoo(["run", "Qwen2.5-VL-3B-Instruct", "--model", str(root / "lite"), "--image",
                      str(tmp_path / "pic.png"), "--prompt", "What is in this picture ?", "--max-new-tokens",
                      "4"]) == 0
    with open(root / "lite" / "model_zoo.json") as f:
        assert json.load(f)["name"] == "Qwen2.5-VL-3B-Instruct"


def test_server_takes_image_parts(vlm):
    """`/v1/chat/completions` with an OpenAI image_url part (a data URL) through the official client: the reply of
    the same chat run on the engine directly; a corrupt image is a 400."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "llm"))
    from test_server import post, start_server

    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    from lite.serve import create_app
    _, _, _, _, root = vlm
    image = picture(60, 50, 4)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [{"type": "text", "text": "What is in this picture ?"}, {"type": "image_url", "image_url": {"url": url}}]
    alone = TextEngine.from_pretrained(str(root / "lite"), num_blocks=64).generate(
        [[{"role": "user", "content": content}]], SamplingParams(max_new_tokens=8, temperature=0))[0]
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=64)
    address, srv, thread = start_server(create_app(engine, "tiny-vl", max_model_len=256))
    try:
        client = openai.OpenAI(base_url=f"{address}/v1", api_key="unused", max_retries=0, timeout=60)
        reply = client.chat.completions.create(model="tiny-vl", max_tokens=8, temperature=0,
                                               messages=[{"role": "user", "content": content}])
        assert reply.choices[0].message.content == alone.text
        assert reply.usage.prompt_tokens == alone.prompt_tokens
        status, body = post(address, "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}).encode())
        assert status == 400 and "image" in body["error"]["message"]
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def test_chat_with_videos_generates_as_transformers(vlm):
    """Video parts (a list of frames with their fps; frame counts that fill and that do not fill a temporal patch)
    beside an image in one continuous batch: greedy tokens equal transformers' generate given the same video pixels,
    grids and seconds per temporal patch (Qwen2.5-VL's temporal positions scale by tokens_per_second x it)."""
    import json as json_

    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    from lite.qwen2_vl_image import qwen2_vl_pixels, qwen2_vl_video_pixels
    model, tokenizer, processor, ids, root = vlm
    video_config = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 16, "patch_size": 14, "merge_size": 2,
                    "temporal_patch_size": 2}
    with open(root / "lite" / "video_preprocessor_config.json", "w") as f:
        json_.dump(video_config, f)
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=96)
    five = [picture(56, 56, 10 + i) for i in range(5)]
    four = [picture(60, 90, 20 + i) for i in range(4)]
    image = picture(50, 70, 30)
    chats = [[{"role": "user", "content": [{"type": "video", "video": five, "fps": 1.0},
                                           {"type": "text", "text": "What is in this picture ?"}]}],
             [{"role": "user", "content": [{"type": "image", "image": image},
                                           {"type": "video", "video": four, "fps": 4.0},
                                           {"type": "text", "text": "Describe the two images"}]}]]
    outs = engine.generate(chats, SamplingParams(max_new_tokens=8, temperature=0))
    for chat, out in zip(chats, outs):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        feed = {}
        for part in chat[0]["content"]:
            if part["type"] == "image":
                pixels, grid = qwen2_vl_pixels(part["image"], processor.to_dict())
                text = text.replace("<|image_pad|>", "<|placeholder|>" * (int(np.prod(grid)) // 4), 1)
                feed.update(pixel_values=torch.from_numpy(pixels), image_grid_thw=torch.tensor([list(grid)]))
            elif part["type"] == "video":
                pixels, grid = qwen2_vl_video_pixels(part["video"], video_config)
                text = text.replace("<|video_pad|>", "<|vplaceholder|>" * (int(np.prod(grid)) // 4), 1)
                feed.update(pixel_values_videos=torch.from_numpy(pixels), video_grid_thw=torch.tensor([list(grid)]),
                            second_per_grid_ts=torch.tensor([2 / part["fps"]]))
        text = text.replace("<|placeholder|>", "<|image_pad|>").replace("<|vplaceholder|>", "<|video_pad|>")
        input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
        types = (input_ids == ids["<|image_pad|>"]).int() + 2 * (input_ids == ids["<|video_pad|>"]).int()
        with torch.no_grad():
            want = model.generate(input_ids=input_ids, mm_token_type_ids=types, max_new_tokens=8, do_sample=False,
                                  **feed)
        assert out.token_ids == want[0, input_ids.shape[1]:].tolist()
    with pytest.raises(ValueError, match="video"):
        engine.add([{"role": "user", "content": [{"type": "video", "video": []}]}])


def test_qwen3_vl_video_with_timestamps(tmp_path):
    """Qwen3-VL videos: each temporal patch its own run after a "<t seconds>" timestamp (Qwen3VLProcessor's times,
    from the part's fps), DeepStack features and 3-D positions per run: greedy tokens equal transformers' generate
    given the same video pixels."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    from lite.llm import SamplingParams
    from lite.llm.text_engine import TextEngine
    from lite.qwen2_vl_image import qwen2_vl_video_pixels
    model, tokenizer, processor, ids, root = build_vlm(tmp_path, "Qwen3-VL-2B-Instruct")
    engine = TextEngine.from_pretrained(str(root / "lite"), num_blocks=96)
    frames = [picture(64, 96, 40 + i) for i in range(5)]
    chat = [{"role": "user", "content": [{"type": "video", "video": frames, "fps": 2.0},
                                         {"type": "text", "text": "What is in this picture ?"}]}]
    out = engine.generate([chat], SamplingParams(max_new_tokens=8, temperature=0))[0]
    video_config = {**processor.to_dict(), "size": {"shortest_edge": 128 * 32 * 32, "longest_edge": 768 * 32 * 32}}
    video_config.pop("min_pixels", None), video_config.pop("max_pixels", None)
    pixels, grid = qwen2_vl_video_pixels(frames, video_config, whole_clip_bounds=True)
    stamps = Qwen3VLProcessor._calculate_timestamps(None, list(range(len(frames))), 2.0, 2)
    per = grid[1] * grid[2] // 4
    runs = "".join(f"<{t:.1f} seconds><|vision_start|>" + "<|video_pad|>" * per + "<|vision_end|>" for t in stamps)
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    text = text.replace("<|vision_start|><|video_pad|><|vision_end|>", runs)
    input_ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        want = model.generate(input_ids=input_ids, pixel_values_videos=torch.from_numpy(pixels),
                              video_grid_thw=torch.tensor([list(grid)]),
                              mm_token_type_ids=2 * (input_ids == ids["<|video_pad|>"]).int(), max_new_tokens=8,
                              do_sample=False)
    assert len(stamps) == grid[0] == 3
    assert out.token_ids == want[0, input_ids.shape[1]:].tolist()
