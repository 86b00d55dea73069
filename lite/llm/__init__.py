"""Generation on lite: the parts of the LLM engine that sit above the graph runtime (docs/architecture.md):
sampling (`sampling`), incremental detokenisation and stop strings (`detokenizer`), and the paged KV cache's block
bookkeeping with prefix caching (`block_manager`). The engine that drives a decoder graph with them, and the
server on top, are not written yet (issue 33)."""
from .block_manager import Allocation, BlockManager, LLMEngineStatus, OutOfBlocks
from .detokenizer import IncrementalDetokenizer, StopStrings
from .sampling import SamplingParams, SequenceSampler, apply_penalties, filter_logits

__all__ = ["Allocation", "BlockManager", "IncrementalDetokenizer", "LLMEngineStatus", "OutOfBlocks", "SamplingParams",
           "SequenceSampler", "StopStrings", "apply_penalties", "filter_logits"]
