"""Where one sequence of the batch lives: its query and key rows (issue 9 item 5, issue 11).

The inference kernel asks one object for batch b's (offset_q, seqlen_q, offset_k, seqlen_k)
instead of reading shapes itself, so the three layouts differ in one place:
- dense: every sequence has the tensor's seqlen_q / seqlen_k rows at offset 0 of its own
  batch row (today's dense form);
- seqused_k: as dense, with seqlen_k = seqused_k[b] (today's inference form);
- varlen: packed (total, heads, d) tensors, sequence b at rows cu_seqlens[b] ..
  cu_seqlens[b + 1]; seqused_q / seqused_k, where given, shorten it (flags 0 or 1, so the
  arithmetic is the same with and without them and no branch is traced). Paged K has no
  packed rows (the page table is per sequence): offset_k is 0.
Plain arithmetic over indexable inputs: the kernel traces it with DSL tensors and Int32s,
the CPU tests run it with lists. Offsets of the dense forms are the Python int 0, so the
cubins of the forms that existed before it are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SeqLens:
    offset_q: Any
    seqlen_q: Any
    offset_k: Any
    seqlen_k: Any

    @staticmethod
    def dense(seqlen_q, seqlen_k) -> "SeqLens":
        return SeqLens(0, seqlen_q, 0, seqlen_k)

    @staticmethod
    def from_seqused_k(batch, seqlen_q, seqused_k) -> "SeqLens":
        return SeqLens(0, seqlen_q, 0, seqused_k[batch])

    @staticmethod
    def q_len(batch, cu_seqlens_q, seqused_q, has_seqused_q):
        """Query rows of sequence `batch` alone (the varlen tile scheduler reads only these)."""
        n = cu_seqlens_q[batch + 1] - cu_seqlens_q[batch]
        return has_seqused_q * seqused_q[batch] + (1 - has_seqused_q) * n

    @staticmethod
    def varlen(batch, cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k, has_seqused_q, has_seqused_k,
               paged_k: bool = False) -> "SeqLens":
        """has_seqused_*: 1 where seqused_* holds the lengths, 0 where the cu_seqlens differences
        do (seqused_* must still be readable: the runtime passes a view of cu_seqlens)."""
        q0 = cu_seqlens_q[batch]
        q_len = cu_seqlens_q[batch + 1] - q0
        k0 = cu_seqlens_k[batch]
        k_len = cu_seqlens_k[batch + 1] - k0
        q_len = has_seqused_q * seqused_q[batch] + (1 - has_seqused_q) * q_len
        k_len = has_seqused_k * seqused_k[batch] + (1 - has_seqused_k) * k_len
        return SeqLens(q0, q_len, 0 if paged_k else k0, k_len)
