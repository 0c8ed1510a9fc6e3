"""Compile-time configuration of one fp8_quant_sm90 variant (input dtype and head dim).

Block size, the Hadamard switch and the sign seed are launch scalars, so one cubin per
(dtype, head_dim) serves per-head and per-block scales, with or without the rotation.
"""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_DTYPES = ("bf16", "fp16")
# Powers of two: the in-register Walsh-Hadamard transform needs one (and the FP8 forward
# builds these head dims).
SUPPORTED_HEAD_DIMS = (64, 128, 256)
WARPS = 4  # one token row per warp at a time; a CTA quantises one (block, head, batch)
THREADS = 32 * WARPS
# Largest finite e4m3 (e4m3fn: no infinity); a block's absolute maximum maps to it.
E4M3_MAX = 448.0


@dataclass(frozen=True)
class QuantConfig:
    arch: str = "sm_90a"
    dtype: str = "bf16"
    head_dim: int = 128

    def __post_init__(self):
        if self.arch != "sm_90a":
            raise ValueError(f"fp8_quant_sm90 builds for sm_90a, not {self.arch!r}")
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} not supported; use one of {SUPPORTED_DTYPES}")
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"head_dim {self.head_dim} not supported; use one of {SUPPORTED_HEAD_DIMS}")

    @property
    def per_lane(self) -> int:
        """Elements of one token row each lane holds (contiguous)."""
        return self.head_dim // 32
