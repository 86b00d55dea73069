"""Step shapes in buckets. The runtime plans a graph per input shape (and keeps a few plans); a step's shape is its
token count, its sequence count and its block-table width. Left exact, every new mix of prompt chunks and decodes is
a new shape and a new plan (10-25 ms for a 24-layer decoder, a third of a decode step). Bucketed, a step is padded
up to the next bucket with padding sequences that write only to scratch blocks no request owns, and the few bucket
shapes are planned once each.

Buckets: sequence counts are powers of two; token counts are powers of two up to 8, then four per doubling (10, 12,
14, 16, 20, 24, 28, 32, 40, ...): at most a quarter of the tokens are padding, and a prefill of 64, 128 or 512 tokens
runs as it is. A step of single-token decodes only stays one: its padding sequences hold one token each (the
runtime's decode attention takes a step whose every sequence has one query), so its token count is its sequence
count. Other steps put all padding tokens in one padding sequence, the further padding sequences hold none."""
from __future__ import annotations

from dataclasses import dataclass


def sequence_bucket(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def token_bucket(n: int) -> int:
    if n <= 8:
        return sequence_bucket(n)
    step = 1 << ((n - 1).bit_length() - 3)   # four buckets per doubling
    return -(-n // step) * step


@dataclass(frozen=True)
class Padding:
    lengths: tuple[int, ...]   # tokens of each padding sequence, after the step's real ones
    block_tables: tuple[tuple[int, ...], ...]   # their scratch blocks

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)


NO_PADDING = Padding((), ())


def padding_for(query_lens: list[int], block_size: int, scratch_blocks: list[int]) -> Padding:
    """The padding sequences that bring a step with these per-sequence token counts to its bucket shape; no padding
    when the scratch blocks would not hold it."""
    seqs, tokens = len(query_lens), sum(query_lens)
    if not scratch_blocks:
        return NO_PADDING
    if all(q == 1 for q in query_lens):   # one scratch block for each padding decode
        lengths = [1] * (sequence_bucket(seqs) - seqs)
        if len(lengths) > len(scratch_blocks):
            return NO_PADDING
        return Padding(tuple(lengths), tuple((b,) for b in scratch_blocks[:len(lengths)]))
    extra = token_bucket(tokens) - tokens
    used = -(-extra // block_size)
    if used > len(scratch_blocks):
        return NO_PADDING
    lengths = [extra] if extra else []
    tables = [tuple(scratch_blocks[:used])] if extra else []
    empty = sequence_bucket(seqs + len(lengths)) - seqs - len(lengths)   # sequences of no tokens
    return Padding(tuple(lengths + [0] * empty), tuple(tables + [(scratch_blocks[0],)] * empty))


def scratch_blocks_needed(max_num_seqs: int, max_num_batched_tokens: int, block_size: int) -> int:
    """Scratch blocks enough for the padding of any step the scheduler can make."""
    decode = max(sequence_bucket(s) - s for s in range(1, max_num_seqs + 1))   # one block per padding decode
    extra = max((token_bucket(t) - t for t in range(1, max_num_batched_tokens + 1)), default=0)
    return max(1, decode, -(-extra // block_size))
