"""Generation on lite: the parts of the LLM engine that sit above the graph runtime (docs/architecture.md):
sampling (`sampling`), incremental detokenisation and stop strings (`detokenizer`), the paged KV cache's block
bookkeeping with prefix caching (`block_manager`), continuous batching with chunked prefill (`scheduler`) and a model
directory's tokenizer and chat template (`tokenizer`: tokenizer.json, jinja2 templates as transformers renders them). The
worker that runs a decoder graph on the runtime-owned cache, the engine API and the server are not written yet
(issue 33)."""
from .block_manager import Allocation, BlockManager, LLMEngineStatus, OutOfBlocks
from .detokenizer import IncrementalDetokenizer, StopStrings
from .sampling import SamplingParams, SequenceSampler, apply_penalties, filter_logits
from .scheduler import Request, RequestStatus, ScheduledChunk, Scheduler, SchedulerOutput
from .tokenizer import ChatTokenizer, TokenizerError

__all__ = ["Allocation", "BlockManager", "ChatTokenizer", "IncrementalDetokenizer", "TokenizerError", "LLMEngineStatus", "OutOfBlocks", "Request",
           "RequestStatus", "SamplingParams", "ScheduledChunk", "Scheduler", "SchedulerOutput", "SequenceSampler",
           "StopStrings", "apply_penalties", "filter_logits"]
