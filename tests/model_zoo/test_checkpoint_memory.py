"""Converting a checkpoint never holds the model in memory: the converter's peak resident memory grows by less than
half the checkpoint's size (a ~230 MB float32 checkpoint, each tensor under 17 MB; measured in a fresh process as
VmHWM after conversion minus VmHWM after imports, which counts the checkpoint's mapped pages too)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r"""
import sys
from converter.api import Converter, FmkType
from converter.frontends.hf_frontend import CheckpointOptions
import model_zoo.registry as registry
registry.graph_builders()
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
before = hwm()
Converter().convert(FmkType.HF, sys.argv[1], sys.argv[2], verify_build=False,
                    checkpoint_options=CheckpointOptions(weight_format=sys.argv[3]))
print(hwm() - before)
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from safetensors.numpy import save_file
    d = tmp_path_factory.mktemp("ckpt")
    V, H, L, I, heads, kv = 8192, 512, 16, 1536, 8, 2
    D = H // heads
    shapes = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                       p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (kv * D, H),
                       p + "self_attn.v_proj.weight": (kv * D, H), p + "self_attn.o_proj.weight": (H, H),
                       p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                       p + "mlp.down_proj.weight": (H, I)})
    rng = np.random.default_rng(0)
    save_file({k: rng.standard_normal(s, dtype=np.float32) * 0.05 for k, s in shapes.items()},
              str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(dict(
        model_type="qwen2", vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L,
        num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=256, tie_word_embeddings=False)))
    return d


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc")
@pytest.mark.parametrize("precision", ["float32", "int4"])
def test_peak_memory_is_under_half_the_checkpoint(checkpoint, precision, tmp_path):
    size = os.path.getsize(checkpoint / "model.safetensors")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(checkpoint), str(tmp_path / "m"), precision],
                         capture_output=True, text=True, check=True)
    grown = int(out.stdout.strip().splitlines()[-1])
    assert os.path.getsize(tmp_path / "m.ms") > size / (8 if precision == "int4" else 1.01)
    assert grown < size / 2, f"peak memory grew by {grown / 1e6:.0f} MB converting a {size / 1e6:.0f} MB checkpoint"
