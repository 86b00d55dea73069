"""Prompt / decode disaggregation: a prompt engine and a decoder in two local processes joined by torch.distributed
(gloo), the KV blocks handed over between them; the tokens equal one engine's, greedy and seeded sampling."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from lite.llm import SamplingParams
from lite.llm.engine import LLMEngine
from model_zoo.language.decoder_graph import write_decoder

CONFIG = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
              tie_word_embeddings=False)
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("params", [dict(max_new_tokens=12, temperature=0),
                                    dict(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=3),
                                    dict(max_new_tokens=1, temperature=0)], ids=["greedy", "seeded", "one_token"])
def test_two_processes_generate_what_one_engine_does(tmp_path, params):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**CONFIG)).eval()
    weights = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_decoder(model.config.to_dict(), weights, str(tmp_path / "d"), block_size=8)
    rng = np.random.default_rng(4)
    prompts = [rng.integers(0, 160, n).tolist() for n in (5, 30, 17)]
    prompts.append(prompts[1][:24] + [7, 8])   # shares 3 blocks with the second prompt
    eos = [11]
    alone = LLMEngine(path, CONFIG, num_blocks=64, block_size=8, eos_token_ids=eos)
    want = {f"r{i}": out for i, out in enumerate(alone.generate(prompts, SamplingParams(**params)))}
    json.dump(CONFIG, open(tmp_path / "config.json", "w"))
    json.dump({"prompts": prompts, "params": params, "eos": eos}, open(tmp_path / "job.json", "w"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(HERE)),
                                                         os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "disagg_worker.py"), str(rank), str(port), path,
                               str(tmp_path / "config.json"), str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out[-3000:]
    got = json.load(open(tmp_path / "out.json"))
    assert got == want
