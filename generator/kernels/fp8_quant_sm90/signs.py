"""The random sign of head-dim column `col` for a seed: the one rule, shared by the kernel
(traced with cutlass integers) and by numpy references (plain ints).

A 32-bit integer mix (murmur3's finaliser) of seed and column; bit 0 picks the sign.
"""

MASK = 0xFFFFFFFF
GOLDEN = 0x9E3779B1
M1, M2 = 0x85EBCA6B, 0xC2B2AE35


def mix32(h: int) -> int:
    h &= MASK
    h ^= h >> 16
    h = (h * M1) & MASK
    h ^= h >> 13
    h = (h * M2) & MASK
    h ^= h >> 16
    return h


def hadamard_sign(seed: int, col: int) -> int:
    """+1 or -1."""
    return -1 if mix32((seed & MASK) ^ ((col * GOLDEN) & MASK)) & 1 else 1
