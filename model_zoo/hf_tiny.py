"""Tiny `transformers` / `diffusers` architectures with seeded random weights, exported to ONNX.

Each entry builds a shrunken config of a real architecture (no downloads), wraps the model so it
returns one tensor, and describes its inputs with symbolic dims. `export_onnx` caches exports on disk,
keyed by name and library versions. Used by the architecture tests and the benchmarks.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

OPSET = 18


@dataclass
class Arch:
    name: str
    build: Callable[[], object]            # -> torch.nn.Module returning one tensor
    inputs: dict[str, tuple]               # name -> (dtype, shape with str symbols)
    make_feeds: Callable[[dict[str, int], np.random.Generator], dict[str, np.ndarray]]
    dynamo: bool = False                   # some decoders only export with the dynamo exporter
    shapes: list[dict[str, int]] = field(default_factory=list)   # two dynamic shapes to test


def _wrap(model, call):
    """A module whose forward takes the inputs positionally (no *args: torch.export maps dynamic
    shapes onto named parameters) and returns one tensor."""
    import inspect

    import torch

    arity = len(inspect.signature(call).parameters) - 1

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

    def forward1(self, a):
        return call(self.model, a)

    def forward2(self, a, b):
        return call(self.model, a, b)

    def forward3(self, a, b, c):
        return call(self.model, a, b, c)

    Wrapped.forward = {1: forward1, 2: forward2, 3: forward3}[arity]
    return Wrapped().eval()


def _ids(vocab):
    return lambda d, rng: {"input_ids": rng.integers(0, vocab, (d["b"], d["s"])).astype(np.int64)}


def _ids_mask(vocab):
    def make(d, rng):
        mask = np.ones((d["b"], d["s"]), np.int64)
        mask[-1, max(1, d["s"] // 2):] = 0   # padding in the last sample
        return {"input_ids": rng.integers(0, vocab, (d["b"], d["s"])).astype(np.int64), "attention_mask": mask}
    return make


def _pixels(c, hw_key="hw"):
    return lambda d, rng: {"pixel_values": rng.standard_normal((d["b"], c, d[hw_key], d[hw_key])).astype(np.float32)}


def bert():
    import transformers as T
    cfg = T.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=64)
    return _wrap(T.BertModel(cfg), lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).last_hidden_state)


def gpt2():
    import transformers as T
    cfg = T.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return _wrap(T.GPT2Model(cfg), lambda m, ids: m(input_ids=ids, use_cache=False).last_hidden_state)


def qwen2():
    import transformers as T
    cfg = T.Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return _wrap(T.Qwen2ForCausalLM(cfg), lambda m, ids: m(input_ids=ids, use_cache=False).logits)


def llama():
    import transformers as T
    cfg = T.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return _wrap(T.LlamaForCausalLM(cfg), lambda m, ids: m(input_ids=ids, use_cache=False).logits)


def vit():
    import transformers as T
    cfg = T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                      image_size=32, patch_size=8)
    return _wrap(T.ViTModel(cfg), lambda m, x: m(pixel_values=x).last_hidden_state)


def resnet():
    import transformers as T
    cfg = T.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck")
    return _wrap(T.ResNetModel(cfg), lambda m, x: m(pixel_values=x).pooler_output)


def _he_init(model):
    """Variance-preserving (fan-in) convolution weights. transformers initialises MobileNetV2 with
    std 0.02, which shrinks its activations to ~1e-21 by the last layer: outputs that compare as equal
    whatever the kernels compute. Trained networks keep them O(1); so do these weights: He's gain (sqrt 2) where
    a ReLU6 follows, gain 1 on the linear projections. (He's gain on those too doubled the variance every block:
    a saturating, chaotic network in which bf16 rounding alone moved the output to cosine 0.992.)"""
    import torch
    followed_by_act = {id(m.convolution): m.activation is not None for m in model.modules()
                       if isinstance(getattr(m, "convolution", None), torch.nn.Conv2d)}
    for mod in model.modules():
        if isinstance(mod, torch.nn.Conv2d):
            gain = "relu" if followed_by_act.get(id(mod), True) else "linear"
            torch.nn.init.kaiming_normal_(mod.weight, mode="fan_in", nonlinearity=gain)
    return model


def mobilenet_v2():
    import transformers as T
    cfg = T.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.25, min_depth=4)
    return _wrap(_he_init(T.MobileNetV2Model(cfg)), lambda m, x: m(pixel_values=x).last_hidden_state)


def convnext():
    import transformers as T
    cfg = T.ConvNextConfig(num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
    return _wrap(T.ConvNextModel(cfg), lambda m, x: m(pixel_values=x).last_hidden_state)


def clip_text():
    import transformers as T
    cfg = T.CLIPTextConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, max_position_embeddings=64)
    return _wrap(T.CLIPTextModel(cfg), lambda m, ids: m(input_ids=ids).last_hidden_state)


def clip_vision():
    import transformers as T
    cfg = T.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             image_size=32, patch_size=8)
    return _wrap(T.CLIPVisionModel(cfg), lambda m, x: m(pixel_values=x).last_hidden_state)


def t5_encoder():
    import transformers as T
    cfg = T.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    return _wrap(T.T5EncoderModel(cfg), lambda m, ids: m(input_ids=ids).last_hidden_state)


def _whisper_cfg():
    import transformers as T
    return T.WhisperConfig(vocab_size=128, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                           decoder_ffn_dim=64, max_source_positions=32, max_target_positions=32,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)


def whisper_encoder():
    import transformers as T
    model = T.WhisperModel(_whisper_cfg())
    return _wrap(model.encoder, lambda m, x: m(input_features=x).last_hidden_state)


def whisper_decoder():
    import transformers as T
    model = T.WhisperModel(_whisper_cfg())
    return _wrap(model.decoder, lambda m, ids, enc: m(input_ids=ids, encoder_hidden_states=enc,
                                                       use_cache=False).last_hidden_state)


def wan_dit():
    from diffusers import WanTransformer3DModel
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4,
                                  out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32, num_layers=2,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32)
    return _wrap(model, lambda m, x, t, ctx: m(hidden_states=x, timestep=t, encoder_hidden_states=ctx,
                                                return_dict=False)[0])


TINY_ARCHS: dict[str, Arch] = {a.name: a for a in [
    Arch("resnet", resnet, {"pixel_values": ("float32", ["b", 3, "hw", "hw"])}, _pixels(3),
         shapes=[{"b": 1, "hw": 32}, {"b": 2, "hw": 48}]),
    Arch("mobilenet_v2", mobilenet_v2, {"pixel_values": ("float32", ["b", 3, "hw", "hw"])}, _pixels(3),
         shapes=[{"b": 1, "hw": 32}, {"b": 2, "hw": 64}]),
    Arch("convnext", convnext, {"pixel_values": ("float32", ["b", 3, "hw", "hw"])}, _pixels(3),
         shapes=[{"b": 1, "hw": 32}, {"b": 2, "hw": 64}]),
    Arch("vit", vit, {"pixel_values": ("float32", ["b", 3, 32, 32])}, lambda d, rng: {
        "pixel_values": rng.standard_normal((d["b"], 3, 32, 32)).astype(np.float32)},
         shapes=[{"b": 1}, {"b": 3}]),
    Arch("bert", bert, {"input_ids": ("int64", ["b", "s"]), "attention_mask": ("int64", ["b", "s"])},
         _ids_mask(128), shapes=[{"b": 1, "s": 7}, {"b": 3, "s": 16}]),
    Arch("gpt2", gpt2, {"input_ids": ("int64", ["b", "s"])}, _ids(128), dynamo=True,
         shapes=[{"b": 1, "s": 5}, {"b": 2, "s": 12}]),
    Arch("qwen2", qwen2, {"input_ids": ("int64", ["b", "s"])}, _ids(128), dynamo=True,
         shapes=[{"b": 1, "s": 6}, {"b": 2, "s": 13}]),
    Arch("llama", llama, {"input_ids": ("int64", ["b", "s"])}, _ids(128), dynamo=True,
         shapes=[{"b": 1, "s": 6}, {"b": 2, "s": 13}]),
    Arch("clip_text", clip_text, {"input_ids": ("int64", ["b", "s"])}, _ids(128),
         shapes=[{"b": 1, "s": 7}, {"b": 2, "s": 16}]),
    Arch("clip_vision", clip_vision, {"pixel_values": ("float32", ["b", 3, 32, 32])}, lambda d, rng: {
        "pixel_values": rng.standard_normal((d["b"], 3, 32, 32)).astype(np.float32)}, shapes=[{"b": 1}, {"b": 2}]),
    Arch("t5_encoder", t5_encoder, {"input_ids": ("int64", ["b", "s"])}, _ids(128),
         shapes=[{"b": 1, "s": 7}, {"b": 2, "s": 20}]),
    Arch("whisper_encoder", whisper_encoder, {"input_features": ("float32", ["b", 16, 64])}, lambda d, rng: {
        "input_features": rng.standard_normal((d["b"], 16, 64)).astype(np.float32)}, shapes=[{"b": 1}, {"b": 2}]),
    Arch("whisper_decoder", whisper_decoder, {"input_ids": ("int64", ["b", "s"]),
                                              "encoder_hidden_states": ("float32", ["b", 32, 32])},
         lambda d, rng: {"input_ids": rng.integers(0, 128, (d["b"], d["s"])).astype(np.int64),
                         "encoder_hidden_states": rng.standard_normal((d["b"], 32, 32)).astype(np.float32)},
         dynamo=True, shapes=[{"b": 1, "s": 4}, {"b": 2, "s": 9}]),
    Arch("wan_dit", wan_dit, {"hidden_states": ("float32", [1, 4, "t", 8, 8]), "timestep": ("int64", [1]),
                              "encoder_hidden_states": ("float32", [1, "l", 16])},
         lambda d, rng: {"hidden_states": rng.standard_normal((1, 4, d["t"], 8, 8)).astype(np.float32),
                         "timestep": np.array([500], np.int64),
                         "encoder_hidden_states": rng.standard_normal((1, d["l"], 16)).astype(np.float32)},
         dynamo=True, shapes=[{"t": 2, "l": 5}, {"t": 3, "l": 9}]),
]}


def _pixels_fixed(size):
    return lambda d, rng: {"pixel_values": rng.standard_normal((d["b"], 3, size, size)).astype(np.float32)}


def _full_builders():
    import transformers as T
    return {
        "bert_base": lambda: _wrap(T.BertModel(T.BertConfig()),
                                   lambda m, ids, mask: m(input_ids=ids, attention_mask=mask).last_hidden_state),
        "vit_base": lambda: _wrap(T.ViTModel(T.ViTConfig()), lambda m, x: m(pixel_values=x).last_hidden_state),
        "gpt2_small": lambda: _wrap(T.GPT2Model(T.GPT2Config()),
                                    lambda m, ids: m(input_ids=ids, use_cache=False).last_hidden_state),
        "resnet50": lambda: _wrap(T.ResNetModel(T.ResNetConfig()), lambda m, x: m(pixel_values=x).pooler_output),
        "mobilenet_v2_full": lambda: _wrap(_he_init(T.MobileNetV2Model(T.MobileNetV2Config())),
                                           lambda m, x: m(pixel_values=x).last_hidden_state),
        "convnext_tiny": lambda: _wrap(T.ConvNextModel(T.ConvNextConfig()), lambda m, x: m(pixel_values=x).last_hidden_state),
        "clip_vision_base": lambda: _wrap(T.CLIPVisionModel(T.CLIPVisionConfig()),
                                          lambda m, x: m(pixel_values=x).last_hidden_state),
        "t5_small_encoder": lambda: _wrap(T.T5EncoderModel(T.T5Config()), lambda m, ids: m(input_ids=ids).last_hidden_state),
        # Issue 5's decoder: Qwen2 layout at hidden 512, 4 layers, 8 query / 2 key-value heads, 32k vocabulary.
        "qwen2_decoder": lambda: _wrap(T.Qwen2ForCausalLM(T.Qwen2Config(
            vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=512)), lambda m, ids: m(input_ids=ids, use_cache=False).logits),
        # Whisper-tiny's encoder (80 mel bins x 3000 frames -> 1500 positions, 4 layers, 6 heads, width 384).
        "whisper_tiny_encoder": lambda: _wrap(T.WhisperModel(T.WhisperConfig(
            num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536)).encoder,
            lambda m, x: m(input_features=x).last_hidden_state),
    }


def _lazy(name):
    return lambda: _full_builders()[name]()


# Full-size configs (random weights): run under the `slow` marker.
FULL_ARCHS: dict[str, Arch] = {a.name: a for a in [
    Arch("bert_base", _lazy("bert_base"), {"input_ids": ("int64", ["b", "s"]), "attention_mask": ("int64", ["b", "s"])},
         _ids_mask(30522), shapes=[{"b": 1, "s": 128}, {"b": 2, "s": 64}]),
    Arch("vit_base", _lazy("vit_base"), {"pixel_values": ("float32", ["b", 3, 224, 224])}, _pixels_fixed(224),
         shapes=[{"b": 1}, {"b": 2}]),
    Arch("gpt2_small", _lazy("gpt2_small"), {"input_ids": ("int64", ["b", "s"])}, _ids(50257), dynamo=True,
         shapes=[{"b": 1, "s": 32}, {"b": 2, "s": 64}]),
    Arch("resnet50", _lazy("resnet50"), {"pixel_values": ("float32", ["b", 3, "hw", "hw"])}, _pixels(3),
         shapes=[{"b": 1, "hw": 224}, {"b": 2, "hw": 160}]),
    Arch("mobilenet_v2_full", _lazy("mobilenet_v2_full"), {"pixel_values": ("float32", ["b", 3, "hw", "hw"])},
         _pixels(3), shapes=[{"b": 1, "hw": 224}, {"b": 2, "hw": 160}]),
    Arch("convnext_tiny", _lazy("convnext_tiny"), {"pixel_values": ("float32", ["b", 3, "hw", "hw"])}, _pixels(3),
         shapes=[{"b": 1, "hw": 224}, {"b": 2, "hw": 160}]),
    Arch("clip_vision_base", _lazy("clip_vision_base"), {"pixel_values": ("float32", ["b", 3, 224, 224])},
         _pixels_fixed(224), shapes=[{"b": 1}, {"b": 2}]),
    Arch("t5_small_encoder", _lazy("t5_small_encoder"), {"input_ids": ("int64", ["b", "s"])}, _ids(32128),
         shapes=[{"b": 1, "s": 32}, {"b": 2, "s": 77}]),
    Arch("qwen2_decoder", _lazy("qwen2_decoder"), {"input_ids": ("int64", ["b", "s"])}, _ids(32000), dynamo=True,
         shapes=[{"b": 1, "s": 128}, {"b": 2, "s": 37}]),
    Arch("whisper_tiny_encoder", _lazy("whisper_tiny_encoder"), {"input_features": ("float32", ["b", 80, 3000])},
         lambda d, rng: {"input_features": rng.standard_normal((d["b"], 80, 3000)).astype(np.float32)},
         shapes=[{"b": 1}, {"b": 2}]),
]}


_HE_INIT = ("mobilenet_v2", "mobilenet_v2_full")


def _cache_key(arch: Arch) -> str:
    import torch
    import transformers
    init = "-he2" if arch.name in _HE_INIT else ""   # the weights changed: a new cache entry
    return f"{arch.name}{init}-t{torch.__version__}-tf{transformers.__version__}-o{OPSET}".replace("+", "_")


def export_onnx(name: str, cache_dir: str) -> str:
    """Exports the tiny architecture (seeded) to ONNX once; later calls return the cached file."""
    import torch
    arch = TINY_ARCHS[name] if name in TINY_ARCHS else FULL_ARCHS[name]
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, _cache_key(arch) + ".onnx")
    if os.path.exists(path):
        return path
    torch.manual_seed(0)
    model = arch.build()
    rng = np.random.default_rng(0)
    feeds = arch.make_feeds(arch.shapes[-1], rng)   # the larger shape: torch.export specialises dims of size 1
    args = tuple(torch.from_numpy(feeds[k]) for k in arch.inputs)
    dynamic_axes = {k: {i: d for i, d in enumerate(shape) if isinstance(d, str)} for k, (_, shape) in arch.inputs.items()}
    dims: dict[str, object] = {}
    if arch.dynamo:
        # torch.export wants dynamic shapes per forward parameter (a, b, c), with shared Dim objects.
        def dim(symbol: str):
            return dims.setdefault(symbol, torch.export.Dim(symbol, min=1, max=4096))
        dynamic = {"dynamic_shapes": {p: ({i: dim(d) for i, d in axes.items()} or None)
                                      for p, axes in zip("abc", dynamic_axes.values())}}
    else:
        dynamic = {"dynamic_axes": {k: v for k, v in dynamic_axes.items() if v}}
    import tempfile

    import onnx
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp_dir:
        tmp = os.path.join(tmp_dir, "model.onnx")
        with torch.no_grad():
            torch.onnx.export(model, args, tmp, input_names=list(arch.inputs), output_names=["output"],
                              opset_version=OPSET, dynamo=arch.dynamo, **dynamic)
        # The dynamo exporter may write weights to a side file; keep one self-contained file when it fits
        # protobuf's 2 GB limit.
        single = os.path.join(tmp_dir, "single.onnx")
        onnx.save(onnx.load(tmp), single)
        os.replace(single, path)
    return path
