"""One rank of the disaggregation test (test_disaggregation.py): rank 0 the prompt engine, rank 1 the decoder."""
import json
import sys

import torch.distributed as dist

from lite.llm import SamplingParams
from lite.llm.disaggregation import DecodeEngine, PromptEngine
from lite.llm.engine import LLMEngine


def main(rank: int, port: int, model: str, config_file: str, job_file: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    config = json.load(open(config_file))
    job = json.load(open(job_file))
    # different cache sizes: the decoder's blocks are numbered differently from the prompt side's
    engine = LLMEngine(model, config, num_blocks=40 if rank == 0 else 64, block_size=8, max_num_batched_tokens=24,
                       eos_token_ids=job["eos"])
    if rank == 0:
        PromptEngine(engine).run((f"r{i}", p, SamplingParams(**job["params"])) for i, p in enumerate(job["prompts"]))
    else:
        json.dump(DecodeEngine(engine).run(), open(out_file, "w"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:])
