"""The other checkpoint containers feed the same graph builder: a PyTorch state dict, a MindSpore .ckpt (MindSpore
Transformers' parameter names, written here with protobuf from checkpoint.proto's schema, a large tensor split into
slices as MindSpore writes it) and a GGUF file (written with the gguf package under llama.cpp's names, float and
Q8_0 tensors). Each converts to the model the safetensors directory gives. Bad checkpoints are clear errors that
name the tensor and file, and leave no output file."""
from __future__ import annotations

import copy
import json
import os
import shutil
import struct

import numpy as np
import pytest
import torch

from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
from converter.ir import ConverterError
from lite.llm import SamplingParams
from lite.llm.engine import LLMEngine

from test_checkpoint_llm import BASE, tiny_checkpoint

PROMPT = list(range(3, 30))


def convert(checkpoint, output, **kwargs) -> str:
    return Converter().convert(FmkType.HF, str(checkpoint), str(output), verify_build=False,
                               checkpoint_options=CheckpointOptions(block_size=4), **kwargs).output_file


def logits(path, config) -> np.ndarray:
    engine = LLMEngine(path, config, num_blocks=32, block_size=4)
    engine.add_request("a", PROMPT, SamplingParams(max_new_tokens=1, temperature=0))
    engine.step()
    return engine.last_logits["a"]


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen2")
    model = tiny_checkpoint("qwen2", d / "hf")
    reference = logits(convert(d / "hf", d / "from_safetensors"), model.config.to_dict())
    with torch.no_grad():
        want = model(torch.tensor([PROMPT])).logits[0, -1].numpy()
    np.testing.assert_allclose(reference, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    return model, d, reference


def test_state_dict(qwen2, tmp_path):
    model, d, reference = qwen2
    shutil.copy(d / "hf" / "config.json", tmp_path)
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, tmp_path / "pytorch_model.bin")
    np.testing.assert_array_equal(logits(convert(tmp_path, tmp_path / "m"), model.config.to_dict()), reference)


def test_state_dict_refuses_pickled_code(qwen2, tmp_path):
    model, d, _ = qwen2
    shutil.copy(d / "hf" / "config.json", tmp_path)

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo unpickled",))
    torch.save({"model.embed_tokens.weight": torch.zeros(2), "x": Payload()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ConverterError, match="weights_only"):
        convert(tmp_path, tmp_path / "m")
    assert not (tmp_path / "m.ms").exists()


MS_NAMES = {"model.embed_tokens.weight": "model.tok_embeddings.embedding_weight", "model.norm.weight":
            "model.norm_out.weight", "input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm",
            "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
            "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.up_proj": "feed_forward.w3",
            "mlp.down_proj": "feed_forward.w2"}


def mindspore_name(name: str) -> str:
    for hf, ms in MS_NAMES.items():
        name = name.replace(hf, ms)
    return name


def checkpoint_message_class():
    """checkpoint.proto's Checkpoint message, built from its schema (MindSpore is not installed here)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    f = descriptor_pb2.FileDescriptorProto(name="ms_checkpoint_test.proto", package="mstest", syntax="proto2")
    t = f.message_type.add(name="TensorProto")
    t.field.add(name="dims", number=1, type=3, label=3)          # repeated int64
    t.field.add(name="tensor_type", number=2, type=9, label=2)   # required string
    t.field.add(name="tensor_content", number=3, type=12, label=2)   # required bytes
    c = f.message_type.add(name="Checkpoint")
    v = c.nested_type.add(name="Value")
    v.field.add(name="tag", number=1, type=9, label=2)
    v.field.add(name="tensor", number=2, type=11, label=2, type_name=".mstest.TensorProto")
    c.field.add(name="value", number=1, type=11, label=3, type_name=".mstest.Checkpoint.Value")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("mstest.Checkpoint"))


def test_mindspore_ckpt(qwen2, tmp_path):
    model, d, reference = qwen2
    shutil.copy(d / "hf" / "config.json", tmp_path)
    msg = checkpoint_message_class()()
    for name, tensor in model.state_dict().items():
        data = tensor.numpy().astype(np.float32)
        raw = data.tobytes()
        # the embedding in two slices of one tag, as MindSpore writes a large tensor
        parts = [raw[:len(raw) // 2], raw[len(raw) // 2:]] if name == "model.embed_tokens.weight" else [raw]
        for part in parts:
            value = msg.value.add(tag=mindspore_name(name))
            value.tensor.dims.extend(data.shape)
            value.tensor.tensor_type = "Float32"
            value.tensor.tensor_content = part
    (tmp_path / "model.ckpt").write_bytes(msg.SerializeToString())
    np.testing.assert_array_equal(logits(convert(tmp_path, tmp_path / "m"), model.config.to_dict()), reference)
    # truncated: a clear error, no file
    blob = (tmp_path / "model.ckpt").read_bytes()
    (tmp_path / "model.ckpt").write_bytes(blob[:len(blob) - 100])
    with pytest.raises(ConverterError, match="model.ckpt"):
        convert(tmp_path, tmp_path / "t")
    assert not (tmp_path / "t.ms").exists()


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def write_gguf(model, path, quantize: set[str], qtype=None) -> dict[str, np.ndarray]:
    """The model under llama.cpp's qwen2 names; `quantize`: names stored as `qtype` blocks (Q8_0 by default).
    Returns the values the file holds by transformers' names (quantised ones dequantised)."""
    import gguf
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_rope_freq_base(BASE["rope_theta"])   # (transformers 5 keeps it under rope_parameters)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    held = {}
    for name, tensor in model.state_dict().items():
        data = tensor.numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            layer, rest = name.split(".")[2], ".".join(name.split(".")[3:])
            for hf, short in GGUF_NAMES.items():
                rest = rest.replace(hf, short)
            g = f"blk.{layer}.{rest}"
        if name in quantize:
            qtype = qtype or gguf.GGMLQuantizationType.Q8_0
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(g, q, raw_dtype=qtype)
            held[name] = gguf.quants.dequantize(q, qtype).reshape(data.shape)
        else:
            w.add_tensor(g, data)
            held[name] = data
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held


def test_gguf(qwen2, tmp_path):
    model, d, reference = qwen2
    write_gguf(model, tmp_path / "model.gguf", set())
    path = convert(tmp_path / "model.gguf", tmp_path / "m")   # the config comes from the file's metadata
    np.testing.assert_allclose(logits(path, model.config.to_dict()), reference, rtol=1e-5, atol=1e-5)


def test_gguf_quantised_blocks_are_dequantised(qwen2, tmp_path):
    model, d, _ = qwen2
    quantised = {"model.layers.0.mlp.up_proj.weight", "model.layers.1.self_attn.q_proj.weight"}
    held = write_gguf(model, tmp_path / "model.gguf", quantised)
    path = convert(tmp_path / "model.gguf", tmp_path / "m")
    model = copy.deepcopy(model)   # the fixture's model stays the reference of the other tests
    model.load_state_dict({k: torch.from_numpy(v) for k, v in held.items()})   # what the file holds
    with torch.no_grad():
        want = model(torch.tensor([PROMPT])).logits[0, -1].numpy()
    np.testing.assert_allclose(logits(path, model.config.to_dict()), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# -- errors ---------------------------------------------------------------------------------------------------------

def rewrite_safetensors(src, dst, edit):
    """Copies a safetensors directory, `edit(tensors)` applied to its tensors."""
    from safetensors.numpy import load_file, save_file
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), dst)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    edit(tensors)
    save_file(tensors, os.path.join(dst, "model.safetensors"))


def expect_error(checkpoint, output_dir, pattern):
    before = set(os.listdir(output_dir))
    with pytest.raises(ConverterError, match=pattern):
        convert(checkpoint, os.path.join(output_dir, "out"))
    assert set(os.listdir(output_dir)) == before   # nothing written, no temporary left


def test_missing_tensor_is_named(qwen2, tmp_path):
    _, d, _ = qwen2
    rewrite_safetensors(d / "hf", tmp_path / "c", lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    expect_error(tmp_path / "c", tmp_path, "no tensor 'model.layers.1.mlp.down_proj.weight'")


def test_mismatched_shape_is_named(qwen2, tmp_path):
    _, d, _ = qwen2

    def edit(t):
        t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((8, 64), np.float32)
    rewrite_safetensors(d / "hf", tmp_path / "c", edit)
    expect_error(tmp_path / "c", tmp_path, r"'model.layers.0.self_attn.k_proj.weight' .* shape \[8, 64\]")


def test_integer_weight_is_refused(qwen2, tmp_path):
    _, d, _ = qwen2

    def edit(t):
        t["model.layers.0.mlp.up_proj.weight"] = np.zeros((128, 64), np.int32)
    rewrite_safetensors(d / "hf", tmp_path / "c", edit)
    expect_error(tmp_path / "c", tmp_path, "'model.layers.0.mlp.up_proj.weight' .* int32")


def test_truncated_shard_names_file_and_tensor(qwen2, tmp_path):
    _, d, _ = qwen2
    os.makedirs(tmp_path / "c")
    shutil.copy(d / "hf" / "config.json", tmp_path / "c")
    blob = (d / "hf" / "model.safetensors").read_bytes()
    (tmp_path / "c" / "model.safetensors").write_bytes(blob[:-4])   # only the last tensor no longer fits
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
    expect_error(tmp_path / "c", tmp_path, rf"model.safetensors is truncated: tensor '{last}'")


def test_unknown_model_type(qwen2, tmp_path):
    _, d, _ = qwen2
    shutil.copytree(d / "hf", tmp_path / "c")
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    config["model_type"] = "mamba9"
    (tmp_path / "c" / "config.json").write_text(json.dumps(config))
    expect_error(tmp_path / "c", tmp_path, "model_type 'mamba9' has no graph builder")


def test_no_weights(tmp_path):
    os.makedirs(tmp_path / "c")
    (tmp_path / "c" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    expect_error(tmp_path / "c", tmp_path, "no weights found")


def test_gguf_q4_0_is_stored_as_int4_without_requantising(qwen2, tmp_path):
    """Q4_0 blocks are our int4 encoding (blocks of 32, code * scale): an int4 conversion keeps the file's codes and
    scales, so the engine computes with exactly the values the GGUF holds (quantising the dequantised values again
    would move the logits by the int4 rounding, ~1e-2 here)."""
    import gguf
    model, d, _ = qwen2
    matrices = {k for k, v in model.state_dict().items() if v.ndim == 2}
    held = write_gguf(model, tmp_path / "model.gguf", matrices, gguf.GGMLQuantizationType.Q4_0)
    path = Converter().convert(FmkType.HF, str(tmp_path / "model.gguf"), str(tmp_path / "m"), verify_build=False,
                               checkpoint_options=CheckpointOptions(block_size=4, weight_format="int4")).output_file
    model = copy.deepcopy(model)   # the fixture's model stays the reference of the other tests
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in held.items()})
    with torch.no_grad():
        want = model(torch.tensor([PROMPT])).logits[0, -1].numpy()
    np.testing.assert_allclose(logits(path, model.config.to_dict()), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_sharded_safetensors_and_a_missing_shard(qwen2, tmp_path):
    """A checkpoint in several safetensors shards with model.safetensors.index.json (as the Hub holds large models)
    converts to the same model; a shard the index lists but the directory lacks is named."""
    model, d, reference = qwen2
    model.save_pretrained(str(tmp_path / "c"), max_shard_size="100KB")
    shards = sorted(p.name for p in (tmp_path / "c").glob("*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "c" / "model.safetensors.index.json").exists()
    np.testing.assert_array_equal(logits(convert(tmp_path / "c", tmp_path / "m"), model.config.to_dict()), reference)
    (tmp_path / "c" / shards[-1]).unlink()
    expect_error(tmp_path / "c", tmp_path, f"shards that are missing: {shards[-1]}")


def test_sharded_state_dict(qwen2, tmp_path):
    model, d, reference = qwen2
    state = {k: v.clone() for k, v in model.state_dict().items()}
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[:len(names) // 2],
              "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
    for file, keys in halves.items():
        torch.save({k: state[k] for k in keys}, tmp_path / file)
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"weight_map": {k: f for f, keys in halves.items() for k in keys}}))
    shutil.copy(d / "hf" / "config.json", tmp_path)
    np.testing.assert_array_equal(logits(convert(tmp_path, tmp_path / "m"), model.config.to_dict()), reference)


def test_command_line(qwen2, tmp_path):
    """converter_lite --fmk=HF end to end: the file, its summary line; a quantisation INI is refused with the flag
    to use instead."""
    from converter.cli import main
    _, d, reference = qwen2
    assert main(["--fmk=HF", f"--modelFile={d / 'hf'}", f"--outputFile={tmp_path / 'cli'}", "--blockSize=4",
                 "--verifyBuild=off"]) == 0
    np.testing.assert_array_equal(logits(str(tmp_path / "cli.ms"), json.loads((d / "hf" / "config.json").read_text())),
                                  reference)
    (tmp_path / "q.cfg").write_text("[common_quant_param]\nquant_type=WEIGHT_QUANT\nbit_num=8\n")
    assert main(["--fmk=HF", f"--modelFile={d / 'hf'}", f"--outputFile={tmp_path / 'x'}",
                 f"--configFile={tmp_path / 'q.cfg'}"]) == 1
    assert not (tmp_path / "x.ms").exists()
