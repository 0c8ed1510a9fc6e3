"""Compile-time configuration of a demo_scale variant."""

from dataclasses import dataclass

BLOCK = 128  # threads per block; one element per thread


@dataclass(frozen=True)
class DemoConfig:
    arch: str = "sm_90a"
    dtype: str = "bf16"
