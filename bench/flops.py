"""FLOP and byte counts of one attention forward, and the rates derived from them.

Convention (FA2/FA3 papers): 4 * batch * heads_q * seqlen_q * seqlen_k * head_dim, halved
for causal when seqlen_q == seqlen_k. When seqlen_q != seqlen_k, a causal problem is counted
exactly: bottom-right aligned, query i sees keys j <= i + seqlen_k - seqlen_q.
"""

from __future__ import annotations

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "e4m3": 1, "fp32": 4}


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool) -> int:
    """(query, key) pairs a bottom-right aligned causal mask lets through (all if not causal)."""
    if not causal:
        return seqlen_q * seqlen_k
    d = seqlen_k - seqlen_q
    if d >= 0:  # every row sees d + 1 + i keys
        return seqlen_q * (d + 1) + seqlen_q * (seqlen_q - 1) // 2
    return seqlen_k * (seqlen_k + 1) // 2  # the first -d rows see nothing


def attention_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, head_dim: int,
                    causal: bool) -> float:
    """Matmul FLOPs of the forward pass (QK^T and PV, 2 FLOPs per multiply-add each)."""
    if causal and seqlen_q == seqlen_k:
        return 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim / 2.0
    return 4.0 * batch * heads * head_dim * visible_pairs(seqlen_q, seqlen_k, causal)


def attention_bytes(batch: int, heads: int, heads_kv: int, seqlen_q: int, seqlen_k: int,
                    head_dim: int, dtype: str = "bf16") -> int:
    """Fewest bytes through device memory: q, k, v read once; o and the fp32 lse written once."""
    e = DTYPE_BYTES[dtype]
    q_o = 2 * batch * seqlen_q * heads * head_dim * e
    kv = 2 * batch * seqlen_k * heads_kv * head_dim * e
    lse = batch * heads * seqlen_q * 4
    return q_o + kv + lse


def tflops(flops: float, ms: float | None) -> float | None:
    """TFLOP/s for `flops` done in `ms` milliseconds; None when there is no time."""
    if ms is None or ms <= 0:
        return None
    return flops / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float | None) -> float | None:
    if ms is None or ms <= 0:
        return None
    return nbytes / (ms * 1e-3) / 1e9


def matmul_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k
