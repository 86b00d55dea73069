"""Vision-language generation: lite's engine (the vision tower's graph, then the step graph with the image rows and
3-D positions) beside PyTorch eager (transformers' Qwen2_5_VLForConditionalGeneration.generate), one run, the same
seeded random weights.

A Qwen2.5-VL-3B-shaped model: its real widths (vision 1280 wide, 16 heads, SwiGLU 3420, window 112; language model
2048 wide, 16 heads / 2 KV heads, MLP 11008, vocab 151936) with `--vision-depth` of the tower's 32 blocks (full
attention in the last of every 8) and `--layers` of the language model's 36, so both fit a small machine; per-block
times add up. One 448 x 448 image (a 32 x 32 patch grid: 256 image tokens) in a prompt of `--text` text tokens.
Time to first token = the image through the tower + the prompt's prefill + the first token; decode tokens/s over the
`--new-tokens` after it, greedy, batch 1, at 1 and 2 threads; prefix caching off (the same image and text every
round would otherwise skip the prefill). Beside them ONNX Runtime (`ort_peer`: the tower exported by torch.onnx, the
language model by ONNX Runtime GenAI's builder) and OpenVINO GenAI's VLMPipeline (`ov_peer`: exported by
optimum-intel from a side virtualenv); benchmarks/requirements.txt. Each engine runs once a round, the order
rotating; the median of `--repeat` rounds.

    python -m benchmarks.multimodal --out benchmarks/results/multimodal.md"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from .machine import cpu_name, package_version as _version  # noqa: E402
from .results_io import publish  # noqa: E402

IMAGE, VIDEO = 151655, 151656


def build(work: str, layers: int, depth: int):
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    path = os.path.join(work, f"qwen2_5_vl_3b_{layers}l_{depth}v")
    full = [i for i in range(depth) if i % 8 == 7] or [depth - 1]
    config = Qwen2_5_VLConfig(
        text_config=dict(hidden_size=2048, num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=2,
                         intermediate_size=11008, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
                         max_position_embeddings=4096, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]}),
        vision_config=dict(depth=depth, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=full, tokens_per_second=2),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=151652, vision_end_token_id=151653)
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    with torch.no_grad():   # every table away from its initial value
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    if not os.path.isfile(os.path.join(path, "config.json")):
        model.save_pretrained(path)
    return model, path


def ort_peer(model, path: str, work: str, pixels: np.ndarray, grid, ids: list[int], threads: int):
    """ONNX Runtime beside lite: the vision tower exported by torch.onnx (TorchScript tracing at this image's patch
    grid, cached as vision_<t>x<h>x<w>.onnx) on an InferenceSession, and the language model built by ONNX Runtime
    GenAI's model builder (its Qwen2.5-VL support: the text decoder, embedding table inside). GenAI takes token ids,
    not image rows, so the image's positions are fed as their placeholder ids: the same prefill shape and work (a
    table row gathered instead of a row given) but not the same tokens; the answer is not compared. Returns
    run(new_tokens) -> (time to first token, total time)."""
    import onnxruntime as ort
    import torch

    from .llm_peers import load_onnxruntime_genai
    onnx_path = os.path.join(path, f"vision_{grid[0]}x{grid[1]}x{grid[2]}.onnx")
    if not os.path.isfile(onnx_path):
        visual = model.model.visual if hasattr(model.model, "visual") else model.visual
        fixed = torch.tensor([list(grid)])

        class Tower(torch.nn.Module):   # the grid a constant: the tower's Python loops unroll at this image size
            def __init__(self):
                super().__init__()
                self.visual = visual

            def forward(self, pixel_values):
                out = self.visual(pixel_values, grid_thw=fixed)
                return getattr(out, "pooler_output", None) if not isinstance(out, torch.Tensor) else out

        with torch.no_grad():
            torch.onnx.export(Tower().eval(), (torch.from_numpy(pixels),), onnx_path + ".tmp",
                              input_names=["pixel_values"], output_names=["image_embeds"], opset_version=17,
                              dynamo=False)
        os.replace(onnx_path + ".tmp", onnx_path)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    vision = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    og, lm, _, _ = load_onnxruntime_genai(path, os.path.join(work, "peers"), "float32", threads)

    def run(new_tokens: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        vision.run(None, {"pixel_values": pixels})
        params = og.GeneratorParams(lm)
        params.set_search_options(max_length=len(ids) + new_tokens, min_length=len(ids) + new_tokens,
                                  do_sample=False, batch_size=1)
        gen = og.Generator(lm, params)
        gen.append_tokens(np.asarray([ids], dtype=np.int32))
        gen.generate_next_token()
        first = time.perf_counter() - t0
        for _ in range(new_tokens - 1):
            gen.generate_next_token()
        return first, time.perf_counter() - t0
    return run


def _openvino_checkpoint(src: str, out: str) -> None:
    """The checkpoint as optimum-intel's exporter needs it: the same weights, a small byte-level BPE tokenizer with
    Qwen2.5-VL's special tokens (the config's image / video / vision ids set to theirs), the image processor's config
    and a chat template (a real checkpoint has them; the benchmark's has weights only)."""
    import json
    import shutil

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from .llm_peers import QWEN2_SPLIT, TOKENIZER_TEXT
    os.makedirs(out, exist_ok=True)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
               "<|video_pad|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TOKENIZER_TEXT * 4, trainers.BpeTrainer(
        vocab_size=512, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}"
                          "{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}"
                          "<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}"
                          "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
                          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    fast.save_pretrained(out)
    ids = {t: tok.token_to_id(t) for t in special}
    for name in os.listdir(src):
        if name.endswith(".safetensors") or name in ("model.safetensors.index.json", "generation_config.json"):
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
               vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
               eos_token_id=ids["<|im_end|>"], bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    cfg.setdefault("torch_dtype", "float32")
    processor = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
                 "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                 "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                 "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                 "merge_size": 2}
    for name, value in (("config.json", cfg), ("preprocessor_config.json", processor),
                        ("processor_config.json", {"processor_class": "Qwen2_5_VLProcessor"})):
        with open(os.path.join(out, name), "w") as f:
            json.dump(value, f, indent=1)


def _prompt_of(tokenizer_json: str, tokens: int) -> str:
    """A text the tokenizer splits into exactly `tokens` tokens: a word that is one token with its leading space,
    repeated."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    for word in ("the", "a", "of", "and", "to", "in", "is"):
        text = " ".join([word] * tokens)
        if len(tok.encode(text, add_special_tokens=False).ids) == tokens:
            return text
    raise RuntimeError(f"no single-token word found in {tokenizer_json}")


def ov_peer(path: str, work: str, image: np.ndarray, text_tokens: int, threads: int):
    """OpenVINO GenAI's VLMPipeline beside lite: the checkpoint exported by optimum-intel (`optimum-cli export
    openvino --task image-text-to-text --weight-format fp32`, from a side virtualenv: optimum-intel 2.2 exports
    Qwen2.5-VL with transformers <= 5.0 only; benchmarks.llm_peers.make_optimum_venv), run in float32
    (INFERENCE_PRECISION_HINT f32) with the image and a text of `text_tokens` tokens, no chat template. Returns
    run(new_tokens) -> (seconds, prompt tokens)."""
    import openvino as ov
    import openvino_genai as ov_genai

    from .llm_peers import optimum_export
    ir = path + "_openvino_fp32"
    if not os.path.isfile(os.path.join(ir, "openvino_language_model.xml")):
        _openvino_checkpoint(path, path + "_ov_checkpoint")
        optimum_export(path + "_ov_checkpoint", "image-text-to-text", ir, os.path.join(work, "optimum-intel-vlm-venv"),
                       transformers_spec="transformers==5.0.0", extra_files=("preprocessor_config.json",))
    pipe = ov_genai.VLMPipeline(ir, "CPU", INFERENCE_PRECISION_HINT="f32", INFERENCE_NUM_THREADS=threads)
    # VLMPipeline keeps the last call's KV cache and reuses the prompt's common prefix (the image's rows first): the
    # same image twice skips the prefill (measured: 4.2 s against 6.7 s at one thread). Two images of the same size,
    # alternated, make every call prefill, as lite's and PyTorch's runs do (prefix caching off).
    pictures = [ov.Tensor(np.ascontiguousarray(image[None], np.uint8)),
                ov.Tensor(np.ascontiguousarray(255 - image[None], np.uint8))]
    prompt = _prompt_of(os.path.join(path + "_ov_checkpoint", "tokenizer.json"), text_tokens)
    calls = [0]

    def run(new_tokens: int) -> tuple[float, int]:
        config = ov_genai.GenerationConfig()
        config.max_new_tokens = config.min_new_tokens = new_tokens
        config.apply_chat_template = False
        calls[0] += 1
        t0 = time.perf_counter()
        result = pipe.generate(prompt, images=[pictures[calls[0] % 2]], generation_config=config)
        return time.perf_counter() - t0, result.perf_metrics.get_num_input_tokens()
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=6, help="language-model layers (of 36)")
    ap.add_argument("--vision-depth", type=int, default=8, help="vision blocks (of 32)")
    ap.add_argument("--text", type=int, default=32, help="text tokens around the image")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lite_multimodal_bench"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch
    from converter.api import Converter, FmkType
    from converter.frontends.hf_frontend import CheckpointOptions
    from lite.llm.engine import LLMEngine
    from lite.llm.multimodal import PromptEmbeddings, qwen2_vl_positions
    from lite.llm.sampling import SamplingParams
    from lite.qwen2_vl_image import VisionTower, qwen2_vl_pixels
    os.makedirs(args.work, exist_ok=True)
    model, path = build(args.work, args.layers, args.vision_depth)
    config = model.config.to_dict()
    decoder, vision = os.path.join(path, "decoder.ms"), os.path.join(path, "vision.ms")
    for out, head in ((decoder, "logits"), (vision, "vision")):
        if not os.path.isfile(out):
            Converter().convert(FmkType.HF, path, out, verify_build=False,
                                checkpoint_options=CheckpointOptions(head=head))
    from PIL import Image
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (448, 448, 3), np.uint8))
    pixels, grid = qwen2_vl_pixels(image)
    n = grid[1] * grid[2] // 4
    before = args.text // 2
    ids = (rng.integers(100, 150000, before).tolist() + [151652] + [IMAGE] * n + [151653]
           + rng.integers(100, 150000, args.text - before).tolist())
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        tower = VisionTower(vision, config, threads=threads)
        engine = LLMEngine(decoder, config["text_config"], num_blocks=64, block_size=16, threads=threads,
                           max_num_batched_tokens=512, prefix_caching=False)   # the same prompt every round

        def lite_run(new_tokens):
            t0 = time.perf_counter()
            embeds, g = tower(image)
            where = np.flatnonzero(np.asarray(ids) == IMAGE)
            mm = PromptEmbeddings(where, embeds, qwen2_vl_positions(ids, [g], IMAGE, 2, VIDEO))
            tokens = engine.generate([ids], SamplingParams(max_new_tokens=new_tokens, temperature=0),
                                     embeddings=[mm])[0]
            return time.perf_counter() - t0, tokens

        feed = dict(input_ids=torch.tensor([ids]), pixel_values=torch.from_numpy(pixels),
                    image_grid_thw=torch.tensor([list(grid)]),
                    mm_token_type_ids=torch.tensor([[int(t == IMAGE) for t in ids]]))

        def torch_run(new_tokens):
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(**feed, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            return time.perf_counter() - t0, out[0, len(ids):].tolist()

        ort_run = ort_peer(model, path, args.work, pixels, grid, ids, threads)
        ov_run = ov_peer(path, args.work, np.asarray(image), args.text, threads)
        lite_run(2), torch_run(2), ort_run(2), ov_run(2)   # warm-up (plans, packed weights)
        same = lite_run(8)[1] == torch_run(8)[1]
        ov_prompt = ov_run(1)[1]
        engines = ("lite", "torch", "ort", "ov")
        times = {f"{e}_{k}": [] for e in engines for k in ("ttft", "all")}
        for r in range(args.repeat):
            for engine_name in engines[r % 4:] + engines[:r % 4]:
                if engine_name == "ort":   # one call gives both: GenAI reports its first token on the way
                    first, total = ort_run(args.new_tokens + 1)
                    times["ort_ttft"].append(first)
                    times["ort_all"].append(total)
                    continue
                run = {"lite": lite_run, "torch": torch_run, "ov": ov_run}[engine_name]
                times[f"{engine_name}_ttft"].append(run(1)[0])
                times[f"{engine_name}_all"].append(run(args.new_tokens + 1)[0])
        med = {k: statistics.median(v) for k, v in times.items()}
        row = dict(threads=threads, same=same, ov_prompt=ov_prompt, lite_prompt=len(ids), **med,
                   **{f"{e}_tps": args.new_tokens / max(med[f"{e}_all"] - med[f"{e}_ttft"], 1e-9) for e in engines})
        rows.append(row)
        print(row, flush=True)
        del engine, tower
    command = (f"python -m benchmarks.multimodal --layers {args.layers} --vision-depth {args.vision_depth} "
               f"--text {args.text} --new-tokens {args.new_tokens}")
    lines = [
        "# Vision-language generation: lite vs PyTorch eager, ONNX Runtime and OpenVINO",
        "",
        f"{cpu_name()}; {time.strftime('%Y-%m-%d')}. `{command}`. A Qwen2.5-VL-3B-shaped model (its real widths; "
        f"{args.vision_depth} of the vision tower's 32 blocks, {args.layers} of the language model's 36 layers; "
        "seeded random weights, float32), one 448 x 448 image (256 image tokens) in a prompt of "
        f"{args.text} text tokens, greedy, batch 1. TTFT: the image through the vision tower, the prefill and the "
        f"first token (prefix caching off: every round prefills); decode: the {args.new_tokens} tokens after it. "
        f"Median of {args.repeat} rounds, engines "
        "in rotating order. PyTorch: transformers' generate (SDPA). ORT: ONNX Runtime "
        f"{_version('onnxruntime')} on the vision tower exported by torch.onnx at this image size, and ONNX Runtime "
        f"GenAI {_version('onnxruntime-genai')}'s model builder's text decoder (float32), the image positions fed as "
        "placeholder ids (GenAI takes no image rows: the same prefill work, not the same tokens). OV: OpenVINO GenAI "
        f"{_version('openvino-genai')}'s VLMPipeline, float32 (INFERENCE_PRECISION_HINT f32), the checkpoint exported "
        "by optimum-intel 2.2 (fp32) with a small tokenizer; its own image preprocessing and prompt (the same image, "
        f"{rows[0]['ov_prompt'] if rows else '?'} prompt tokens against lite's "
        f"{rows[0]['lite_prompt'] if rows else '?'}; two images alternated: the pipeline reuses the previous call's "
        "KV cache for a repeated image). `same`: lite's first 8 tokens equal PyTorch's.",
        "",
        "| threads | TTFT s lite | PyTorch | ORT | OV | lite / best peer | decode tok/s lite | PyTorch | ORT | OV "
        "| lite / best peer | same |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        best_ttft = min(r["torch_ttft"], r["ort_ttft"], r["ov_ttft"])
        best_tps = max(r["torch_tps"], r["ort_tps"], r["ov_tps"])
        lines.append(f"| {r['threads']} | {r['lite_ttft']:.3f} | {r['torch_ttft']:.3f} | {r['ort_ttft']:.3f} | "
                     f"{r['ov_ttft']:.3f} | {r['lite_ttft'] / best_ttft:.2f} | {r['lite_tps']:.2f} | "
                     f"{r['torch_tps']:.2f} | {r['ort_tps']:.2f} | {r['ov_tps']:.2f} | "
                     f"{r['lite_tps'] / best_tps:.2f} | {'yes' if r['same'] else 'no'} |")
    return publish(lines, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
