"""Compile-time configuration of one SM90 FlashAttention-3 forward variant.

Everything here is fixed when the cubin is built; problem sizes (batch, sequence lengths,
head counts) stay symbolic so one cubin serves them all.
"""

from __future__ import annotations

from dataclasses import dataclass

# Tile shapes (tile_m, tile_n) per head dim. FA3's table was the starting point; measured on
# the H200 (bench/results/): hd64 non-causal runs 15% faster at 192x128 (three consumer
# warpgroups), while causal hd64 stays at 128x128; 128x176 for hd128 was 20% slower.
DEFAULT_TILES = {64: (128, 128), 96: (128, 128), 128: (128, 128), 192: (128, 96), 256: (128, 80)}
NONCAUSAL_TILES = {64: (192, 128)}

SUPPORTED_DTYPES = ("bf16", "fp16")
SUPPORTED_HEAD_DIMS = tuple(DEFAULT_TILES)
SUPPORTED_ARCHS = ("sm_90a",)


def default_tile(head_dim: int, causal: bool = False) -> tuple[int, int]:
    """The (tile_m, tile_n) this family uses for a head dim unless told otherwise."""
    if not causal and head_dim in NONCAUSAL_TILES:
        return NONCAUSAL_TILES[head_dim]
    return DEFAULT_TILES[head_dim]


@dataclass(frozen=True)
class FwdConfig:
    arch: str
    dtype: str
    head_dim: int
    causal: bool
    tile_m: int = 0  # 0: the family's default for this head dim
    tile_n: int = 0
    stages: int = 2
    # FA3's two overlaps; switches so each can be measured by leaving it out.
    intra_wg_overlap: bool = True
    pingpong: bool = True

    def __post_init__(self):
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"fa3_fwd_sm90 builds for {SUPPORTED_ARCHS}, not {self.arch!r}")
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} not supported; use one of {SUPPORTED_DTYPES}")
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"head_dim {self.head_dim} not supported; use one of {SUPPORTED_HEAD_DIMS}")
        tm, tn = default_tile(self.head_dim, self.causal)
        if not self.tile_m:
            object.__setattr__(self, "tile_m", tm)
        if not self.tile_n:
            object.__setattr__(self, "tile_n", tn)
        if self.tile_m % 64 or self.tile_m // 64 not in (1, 2, 3):
            raise ValueError(f"tile_m must be 64, 128 or 192 (one warpgroup per 64 rows), got {self.tile_m}")
        if self.tile_n % 16:
            raise ValueError(f"tile_n must be a multiple of 16, got {self.tile_n}")

    @property
    def consumer_warpgroups(self) -> int:
        return self.tile_m // 64

    @property
    def threads(self) -> int:
        # One producer warpgroup plus one consumer warpgroup per 64 query rows.
        return 128 * (self.consumer_warpgroups + 1)

    @property
    def register_split(self) -> tuple[int, int]:
        """(consumer, producer) registers per thread after setmaxnreg; sums within 64K/SM."""
        return {1: (256, 56), 2: (240, 24), 3: (160, 32)}[self.consumer_warpgroups]

    @property
    def elem_bytes(self) -> int:
        return 2
