"""The registry (model_zoo/registry.py, model_zoo/families/): the 100 models of the supported-model list, each with
its fields; every supported entry names a test that exists; the CLI lists and shows; docs/model_zoo.md is current."""
from __future__ import annotations

import os
import re

import pytest

import model_zoo
from model_zoo import cli
from model_zoo.registry import CATEGORIES, entries, get, graph_builders

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIST = {
    "generation": "Kandinsky-5.0-I2V-Lite-5s, Kandinsky-5.0-T2V-Lite-sft-10s, Kandinsky-5.0-T2I-Lite, "
                  "Kandinsky-5.0-I2I-Lite, Wan2.1-T2V-1.3B, Wan2.1-T2V-14B, Wan2.1-I2V-14B-480P, Wan2.2-TI2V-5B, "
                  "Wan2.2-T2V-A14B, Wan2.2-I2V-A14B, Wan2.2-Animate-14B, Qwen-Image-Edit, Qwen-Image, FLUX.1-dev, "
                  "stable-diffusion-v1-5, stable-diffusion-2-1, stable-diffusion-xl-base-1.0",
    "vlm": "Qwen3-VL-8B-Instruct, Qwen3-VL-8B-Thinking, Qwen3-VL-4B-Thinking, Qwen3-VL-4B-Instruct, "
           "Qwen3-VL-2B-Thinking, Qwen3-VL-2B-Instruct, Qwen2.5-VL-3B-Instruct, Qwen2-VL-2B-Instruct, Qwen2-VL-2B, "
           "InternVL3_5-4B-Flash, InternVL3_5-2B-Flash, InternVL3_5-1B-Flash, InternVL3-2B, InternVL3-1B, llava-v1.6, "
           "LLaVA, BLIP, BLIP-2, CLIP ViT-B/32",
    "llm": "Qwen3.6-27B, Qwen3.5-27B, Qwen3.5-9B, Qwen3.5-4B, Qwen3.5-2B, Qwen3.5-0.8B, Qwen3-8B, Qwen3-4B, Qwen3-1.7B, "
           "Qwen3-0.6B, Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B, Qwen2.5-7B-Instruct, Qwen2.5-3B-Instruct, Qwen2.5-0.5B, "
           "Qwen2-7B-Instruct, Qwen2-1.5B, Qwen2-0.5B",
    "audio": "FireRedASR-AED-L, CosyVoice2-0.5B, CosyVoice3-0.5B, Qwen3-ASR-1.7B, Qwen3-ASR-0.6B, "
             "Qwen3-TTS-12Hz-1.7B-CustomVoice, Qwen3-TTS-12Hz-1.7B-Base, Qwen3-TTS-12Hz-1.7B-VoiceDesign, "
             "Qwen3-TTS-12Hz-0.6B-Base, Qwen3-TTS-12Hz-0.6B-CustomVoice, WeNet",
    "driving_embodied": "BEVDet-R50, openpi π0.5, VGGT, VGGT-Omega, Mask2Former, DINOv3, CenterPoint (2D), "
                        "CenterPoint (3D), FlashOCC, TinyVLA, GR00T N1.7, SpatialVLA, SmolVLA, MiniVLA, OpenVLA",
    "retrieval_vision": "Qwen3-Reranker-4B, Qwen3-Reranker-0.6B, Qwen3-VL-Reranker-8B, Qwen3-VL-Reranker-2B, "
                        "Qwen3-VL-Embedding-2B, Qwen3-VL-Embedding-8B, Qwen3-Embedding-0.6B, Qwen3-Embedding-4B, "
                        "jina-reranker-v3, YOLOv10-X, YOLOv8, ViT-B/16-224, ConvNeXt, bert-base-chinese, "
                        "Qwen2.5-Math-1.5B, Qwen2.5-Math-1.5B-Instruct, Qwen3Guard-Gen-0.6B, GLiNER-Large-v2.5, "
                        "GLM-OCR, Grounding-DINO-Base",
}


def test_the_list_of_100_models_by_category():
    got = {c: sorted(e.name for e in entries(c)) for c in CATEGORIES}
    want = {c: sorted(n.strip() for n in names.split(", ")) for c, names in LIST.items()}
    assert got == want
    assert len(model_zoo.entries()) == 100
    assert [len(want[c]) for c in CATEGORIES] == [17, 19, 18, 11, 15, 20]


def test_every_entry_has_its_fields():
    for e in entries():
        assert e.name and e.family and e.architecture and e.config_source and e.graphs and e.pipeline, e.name
        assert e.config, e.name
        assert e.status in ("supported", "planned")
        assert (e.status == "supported") == bool(e.test) and (e.status == "planned") == bool(e.missing), e.name
        assert os.path.isfile(os.path.join(ROOT, "model_zoo", "families", f"{e.family}.py")), e.name


def test_supported_entries_name_a_test_that_exists():
    supported = entries(status="supported")
    assert supported
    for e in supported:
        path, _, test = e.test.partition("::")
        name, _, param = test.partition("[")
        source = open(os.path.join(ROOT, path)).read()
        assert re.search(rf"^def {re.escape(name)}\(", source, re.M), e.test
        if param:
            assert f'"{param.rstrip("]")}"' in source, e.test
        if e.model_type:
            assert e.model_type in graph_builders(), e.name


def test_every_checkpoint_builder_builds_from_the_registry():
    assert {"qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "llama", "mistral", "gemma2"} <= set(graph_builders())


def test_cli_list_and_show(capsys):
    assert cli.main(["list", "--category", "llm"]) == 0
    out = capsys.readouterr().out
    assert "Qwen3-30B-A3B" in out and "18 models" in out and "FLUX.1-dev" not in out
    assert cli.main(["list", "--status", "supported"]) == 0
    assert "planned" not in capsys.readouterr().out
    assert cli.main(["show", "qwen2.5-0.5b"]) == 0   # case-insensitive
    out = capsys.readouterr().out
    assert "hidden_size: 896" in out and "num_key_value_heads: 2" in out and "supported" in out
    assert cli.main(["show", "Qwen9"]) == 2
    assert "no model named" in capsys.readouterr().err
    with pytest.raises(KeyError):
        get("no-such-model")


def test_generated_doc_is_current():
    from model_zoo.docs import DOC_PATH, render
    assert open(DOC_PATH).read() == render(), "docs/model_zoo.md is stale: run python -m model_zoo docs"


def test_convert_and_run_a_supported_model(tmp_path, capsys):
    """`python -m model_zoo convert` then `run` on a tiny Qwen2 checkpoint with a tokenizer: the converted directory
    runs its chat pipeline."""
    from llm.tiny_bpe import chat_tokenizer   # tests/llm (tests/ is on the path)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    template = ("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    tok = chat_tokenizer(["hello world, how are you today?"] * 20, 300, template)
    config = Qwen2Config(vocab_size=tok.backend_tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128)
    import torch
    torch.manual_seed(0)   # unseeded random weights sometimes generated only whitespace: an empty printed reply
    Qwen2ForCausalLM(config).save_pretrained(str(tmp_path / "ckpt"))
    tok.save_pretrained(str(tmp_path / "ckpt"))
    assert cli.main(["convert", "Qwen2.5-0.5B", "--checkpoint", str(tmp_path / "ckpt"), "--output",
                     str(tmp_path / "out"), "--precision", "int8"]) == 0
    assert {"config.json", "decoder_b16_int8.ms", "tokenizer.json", "model_zoo.json"} <= set(os.listdir(tmp_path / "out"))
    capsys.readouterr()
    assert cli.main(["run", "Qwen2.5-0.5B", "--model", str(tmp_path / "out"), "--prompt", "hi",
                     "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out.strip() != ""
    # the converted directory serves as it is (lite serve DIR): its manifest says int8, nothing is converted again
    from lite.llm.text_engine import TextEngine
    before = set(os.listdir(tmp_path / "out"))
    engine = TextEngine.from_pretrained(str(tmp_path / "out"), num_blocks=16)
    assert engine.engine.model.get_metadata()["weight_format"] == "int8"
    assert set(os.listdir(tmp_path / "out")) == before
    with pytest.raises(SystemExit, match="planned"):
        planned = next(e.name for e in entries() if e.status == "planned")
        cli.main(["convert", planned, "--checkpoint", str(tmp_path / "ckpt"), "--output", str(tmp_path / "x")])


def test_generation_rows_name_their_lite_boost_classes():
    """Every generation row runs two ways (issue 37): the PyTorch classes it names for lite_boost are in
    SUPPORTED_MODELS, and all 17 rows are supported with both (issue 37 done)."""
    from lite_boost.models import SUPPORTED_MODELS
    from model_zoo.registry import entries
    rows = entries("generation")
    assert len(rows) == 17
    for e in rows:
        assert all(c in SUPPORTED_MODELS for c in e.boost_classes), (e.name, e.boost_classes)
        if not e.boost_classes:
            assert e.status == "planned" and "lite_boost" in e.missing, e.name
        if e.status == "supported":
            assert e.boost_classes and e.pipeline in ("render", "edit"), e.name
    assert all(e.status == "supported" for e in rows), [e.name for e in rows if e.status != "supported"]
