"""Compile-time configuration of one attn_combine variant."""

from __future__ import annotations

from dataclasses import dataclass

# One warp per (token, head) row; a CTA takes ROWS tokens of one head.
ROWS = 4
SUPPORTED_DTYPES = ("bf16", "fp16")
SUPPORTED_HEAD_DIMS = (64, 96, 128, 192, 256)


@dataclass(frozen=True)
class CombineConfig:
    arch: str = "sm_90a"
    dtype: str = "bf16"
    head_dim: int = 128

    def __post_init__(self):
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"attn_combine writes {SUPPORTED_DTYPES}, not {self.dtype!r}")
        if self.head_dim not in SUPPORTED_HEAD_DIMS or self.head_dim % 32:
            raise ValueError(f"head_dim {self.head_dim} not supported; use one of {SUPPORTED_HEAD_DIMS}")

    @property
    def threads(self) -> int:
        return 32 * ROWS
