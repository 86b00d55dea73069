"""Generation on lite (docs/llm.md): sampling (`sampling`), incremental detokenisation and stop strings
(`detokenizer`), the paged KV cache's block bookkeeping with prefix caching (`block_manager`), continuous batching with
chunked prefill (`scheduler`), a model directory's tokenizer and chat template (`tokenizer`), the engine that runs a
decoder step graph on the runtime-owned cache (`engine`: LLMEngine), text in / text out (`text_engine`: TextEngine), embeddings and reranking on the same graphs (`retrieval`)
and prompt / decode disaggregation over torch.distributed (`disaggregation`). The OpenAI-compatible server is
lite.serve."""
from .block_manager import Allocation, BlockManager, LLMEngineStatus, OutOfBlocks
from .detokenizer import IncrementalDetokenizer, StopStrings
from .sampling import SamplingParams, SequenceSampler, apply_penalties, filter_logits
from .scheduler import Request, RequestStatus, ScheduledChunk, Scheduler, SchedulerOutput
from .tokenizer import ChatTokenizer, TokenizerError

# LLMReq: MindSpore Lite's name for a request
LLMReq = Request

__all__ = ["Allocation", "BlockManager", "ChatTokenizer", "DecodeEngine", "GenerationOutput", "IncrementalDetokenizer",
           "LLMEngine", "LLMEngineStatus", "LLMReq", "LLMRole", "OutOfBlocks", "PromptEngine", "Request",
           "RequestStatus", "Reranker", "SamplingParams", "ScheduledChunk", "Scheduler", "SchedulerOutput", "SequenceSampler",
           "StopStrings", "TextEmbedder", "TextEngine", "TokenizerError", "apply_penalties", "filter_logits"]

_LAZY = {"LLMEngine": ".engine", "TextEngine": ".text_engine", "GenerationOutput": ".text_engine",
         "TextEmbedder": ".retrieval", "Reranker": ".retrieval",
         "LLMRole": ".disaggregation", "PromptEngine": ".disaggregation", "DecodeEngine": ".disaggregation"}


def __getattr__(name: str):
    # The engine modules import the runtime (lite), which may still be importing this package: load them on use.
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
