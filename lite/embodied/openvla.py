"""OpenVLA on the runtime: one camera picture and an instruction -> a 7-DoF action (or as many dimensions as the
dataset statistics give).

    policy = OpenVLAPolicy("path/to/openvla-7b")          # the checkpoint directory, or `model_zoo convert`'s output
    action = policy.act("frame.png", "pick up the spoon", unnorm_key="bridge_orig")

As OpenVLAForActionPrediction.predict_action with PrismaticProcessor's inputs: the picture resized to the towers'
square (bicubic, no crop: "resize-naive"), normalised for DINOv2 (ImageNet mean / std) and for SigLIP (0.5 / 0.5) and
stacked as six channels; the vision graph gives the patch rows that follow the prompt's BOS; the prompt "In: What
action should the robot take to <task>?\\nOut:" (task lower-cased) with Llama's empty token 29871 appended; the
engine decodes action_dim tokens greedily; token t becomes bin (vocab - pad_to_multiple_of) - t - 1 (clipped), its
centre in [-1, 1], then the dataset's q01 / q99 range where its mask allows."""
from __future__ import annotations

import json
import os

import numpy as np

from ..checkpoint_graph import checkpoint_graph
from ..clip import _open_image

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
EMPTY_TOKEN = 29871   # "▁" in Llama 2's vocabulary: predict_action appends it after "Out:"


def preprocess_fused(image, size: int) -> np.ndarray:
    """[6, size, size] float32: the DINOv2 view (ImageNet normalisation) over the SigLIP view (mean 0.5, std 0.5)."""
    from PIL import Image
    img = _open_image(image)
    if img.size != (size, size):
        img = img.resize((size, size), Image.BICUBIC)
    x = np.asarray(img, np.float32).transpose(2, 0, 1) * np.float32(1 / 255)
    dino = (x - np.asarray(IMAGENET_MEAN, np.float32)[:, None, None]) / np.asarray(IMAGENET_STD, np.float32)[:, None,
                                                                                                           None]
    siglip = (x - np.float32(0.5)) / np.float32(0.5)
    return np.ascontiguousarray(np.concatenate([dino, siglip]), np.float32)


class OpenVLAPolicy:
    """The vision graph (vision[_format].ms) and the engine's step graph (decoder_b16[_format].ms), converted on first
    use from the checkpoint directory. `precision_mode`: by default "preferred_bf16" for bfloat16 weights (bf16
    products, as TextEngine), else "enforce_fp32"; int8 / int4 weights quantise the decoder's activations on the fly."""

    def __init__(self, model_dir: str, weight_format: str = "float32", threads: int = 1, block_size: int = 16,
                 precision_mode: str | None = None):
        from tokenizers import Tokenizer

        from ..llm.engine import LLMEngine
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        if not self.config.get("use_fused_vision_backbone", True):
            raise NotImplementedError("OpenVLA with a single vision tower (the released checkpoints fuse two)")
        self.image_size = int((self.config.get("image_sizes") or [224])[0])
        text = self.config.get("text_config") or {}
        self.vocab_size = int(text["vocab_size"]) - int(self.config.get("pad_to_multiple_of", 0))
        bins = np.linspace(-1, 1, int(self.config.get("n_action_bins", 256)))
        self.bin_centers = (bins[:-1] + bins[1:]) / 2.0
        self.norm_stats = self.config.get("norm_stats") or {}
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no tokenizer.json in {model_dir} (OpenVLA's prompt is read with Llama 2's "
                                    "tokenizer)")
        self.tokenizer = Tokenizer.from_file(path)
        suffix = "" if weight_format == "float32" else f"_{weight_format}"
        decoder = os.path.join(model_dir, f"decoder_b{block_size}{suffix}.ms")
        if not os.path.isfile(decoder):   # the step graph, converted once beside the checkpoint
            from converter.api import Converter, FmkType
            from converter.frontends.hf_frontend import CheckpointOptions
            Converter().convert(FmkType.HF, model_dir, decoder, verify_build=False, checkpoint_options=CheckpointOptions(
                weight_format=weight_format, block_size=block_size))
        if precision_mode is None:
            precision_mode = "preferred_bf16" if weight_format == "bfloat16" else "enforce_fp32"
        self.vision = checkpoint_graph(model_dir, "vision", "vision", weight_format, threads, precision_mode)
        # no prefix caching: every camera frame is a new prompt past the BOS, nothing would be reused
        self.engine = LLMEngine(decoder, self.config, block_size=block_size, threads=threads, prefix_caching=False,
                                precision_mode=precision_mode, dynamic_quant=weight_format in ("int8", "int4"))

    def action_dim(self, unnorm_key: str | None = None) -> int:
        return len(self._stats(unnorm_key)["q01"]) if self.norm_stats else 7

    def _stats(self, unnorm_key: str | None) -> dict:
        if unnorm_key is None:
            if len(self.norm_stats) != 1:
                raise ValueError(f"the model was trained on several datasets: pass unnorm_key, one of "
                                 f"{', '.join(sorted(self.norm_stats))}")
            unnorm_key = next(iter(self.norm_stats))
        if unnorm_key not in self.norm_stats:
            raise ValueError(f"unnorm_key {unnorm_key!r} is not one of {', '.join(sorted(self.norm_stats)) or '-'}")
        return self.norm_stats[unnorm_key]["action"]

    def prompt_ids(self, task: str) -> list[int]:
        """The prompt's ids as PrismaticProcessor gives them (BOS first), with the empty token predict_action adds."""
        text = f"In: What action should the robot take to {task.lower()}?\nOut:"
        return list(self.tokenizer.encode(text).ids) + [EMPTY_TOKEN]

    def image_rows(self, image) -> np.ndarray:
        pixels = preprocess_fused(image, self.image_size)[None]
        return self.vision.predict({"pixel_values": pixels})[0].get_data_to_numpy()[0]

    def action_tokens(self, image, task: str, n: int) -> list[int]:
        from ..llm import SamplingParams
        from ..llm.multimodal import PromptEmbeddings
        rows = self.image_rows(image)
        ids = self.prompt_ids(task)
        prompt = ids[:1] + [0] * len(rows) + ids[1:]   # placeholders after BOS, replaced by the rows
        embeds = PromptEmbeddings(np.arange(1, 1 + len(rows)), rows)
        return self.engine.generate([prompt], SamplingParams(max_new_tokens=n, temperature=0),
                                    embeddings=[embeds])[0]

    def actions_from_tokens(self, tokens: list[int], unnorm_key: str | None = None) -> np.ndarray:
        discretized = np.clip(self.vocab_size - np.asarray(tokens, np.int64) - 1, 0, self.bin_centers.shape[0] - 1)
        normalized = self.bin_centers[discretized]
        if not self.norm_stats:
            return normalized
        stats = self._stats(unnorm_key)
        mask = np.asarray(stats.get("mask", np.ones(len(stats["q01"]), bool)), bool)
        high, low = np.asarray(stats["q99"], np.float64), np.asarray(stats["q01"], np.float64)
        return np.where(mask, 0.5 * (normalized + 1) * (high - low) + low, normalized)

    def act(self, image, task: str, unnorm_key: str | None = None) -> np.ndarray:
        """The action for one picture (path, PIL image or uint8 array) and instruction, in the dataset's units
        (`unnorm_key`: which dataset's statistics; needed when the checkpoint has several)."""
        n = self.action_dim(unnorm_key)
        return self.actions_from_tokens(self.action_tokens(image, task, n), unnorm_key)
