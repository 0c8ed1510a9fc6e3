"""Compile-time configuration of one kv_gather variant."""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32  # one warp per (key, head): each lane copies head_dim / 32 elements of k and v


@dataclass(frozen=True)
class GatherConfig:
    arch: str = "sm_90a"
    dtype: str = "bf16"
    head_dim: int = 128

    def __post_init__(self):
        if self.dtype not in ("bf16", "fp16"):
            raise ValueError(f"kv_gather copies bf16 or fp16, not {self.dtype!r}")
        if self.head_dim % WARP:
            raise ValueError(f"head_dim {self.head_dim} must be a multiple of {WARP}")
