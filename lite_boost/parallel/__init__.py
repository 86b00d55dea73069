"""Multi-device execution for lite_boost: Ulysses sequence parallelism over torch.distributed."""
from .manager import ParallelManager, init_from_env, restore
from .vae_exact import decode_exact
from .vae import decode_time_slice, overlap_deviation, time_slice_plan
from .ulysses import gather_sequence, heads_to_seq, seq_to_heads, shard_sequence, ulysses_attention

__all__ = ["decode_exact", "decode_time_slice", "overlap_deviation", "time_slice_plan", "ParallelManager", "init_from_env", "restore", "gather_sequence", "heads_to_seq", "seq_to_heads", "shard_sequence", "ulysses_attention"]
