"""Generation on lite: the parts of the LLM engine that sit above the graph runtime (docs/architecture.md):
sampling (`sampling`), incremental detokenisation and stop strings (`detokenizer`), the paged KV cache's block
bookkeeping with prefix caching (`block_manager`) and continuous batching with chunked prefill (`scheduler`). The
worker that runs a decoder graph on the runtime-owned cache, the engine API and the server are not written yet
(issue 33)."""
from .block_manager import Allocation, BlockManager, LLMEngineStatus, OutOfBlocks
from .detokenizer import IncrementalDetokenizer, StopStrings
from .sampling import SamplingParams, SequenceSampler, apply_penalties, filter_logits
from .scheduler import Request, RequestStatus, ScheduledChunk, Scheduler, SchedulerOutput

__all__ = ["Allocation", "BlockManager", "IncrementalDetokenizer", "LLMEngineStatus", "OutOfBlocks", "Request",
           "RequestStatus", "SamplingParams", "ScheduledChunk", "Scheduler", "SchedulerOutput", "SequenceSampler",
           "StopStrings", "apply_penalties", "filter_logits"]
