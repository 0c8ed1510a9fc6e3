"""Compile-time configuration of one SM100 (Blackwell) forward variant, and SM100's limits.

cutlass-free: the spec, the CLI and the static checks import it without the DSL.
"""

from __future__ import annotations

from dataclasses import dataclass

# One tile per CTA: a 128-row Q tile (the M of one cta_group::1 UMMA, one TMEM lane per row)
# against 128-key blocks. Nothing here has been timed: there is no Blackwell GPU to time it on.
DEFAULT_TILES = {64: (128, 128), 128: (128, 128)}

SUPPORTED_DTYPES = ("bf16", "fp16")
SUPPORTED_HEAD_DIMS = tuple(DEFAULT_TILES)
SUPPORTED_ARCHS = ("sm_100a",)

# SM100 limits the static checks hold every cubin to (CUDA C Programming Guide, compute
# capability 10.0): 227 KiB of shared memory per block, 255 registers per thread, 64K
# registers per SM, 512 TMEM columns per SM (128 lanes x 32 bit each).
SMEM_LIMIT = 227 * 1024
REGISTER_LIMIT = 255
REGISTERS_PER_SM = 64 * 1024
TMEM_COLUMNS = 512

# Warp roles, one CTA of three warpgroups: softmax, correction, then the MMA warp, the load
# warp and two idle warps (setmaxnreg acts on whole warpgroups).
SOFTMAX_WARPS = (0, 1, 2, 3)
CORRECTION_WARPS = (4, 5, 6, 7)
MMA_WARP = 8
LOAD_WARP = 9
THREADS = 32 * 12
# Registers per thread after setmaxnreg: (softmax, correction, MMA/load warpgroup). 384
# threads start at 168 (65536 / 384, rounded down to 8); a sub-partition holds one warp of
# each warpgroup, so the three must sum to <= 512. The correction warpgroup keeps its 168.
REGISTER_SPLIT = (240, 168, 104)


def default_tile(head_dim: int, causal: bool = False) -> tuple[int, int]:
    """The (tile_m, tile_n) this family uses; `causal` is part of the spec's interface. An
    unsupported head dim gets 128 x 128 here so the spec can say why it is unsupported."""
    return DEFAULT_TILES.get(head_dim, (128, 128))


@dataclass(frozen=True)
class FwdConfig:
    arch: str
    dtype: str
    head_dim: int
    causal: bool
    tile_m: int = 0  # 0: the family's default
    tile_n: int = 0
    kv_stages: int = 2  # K and V each get this many shared-memory slots

    def __post_init__(self):
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"fa4_fwd_sm100 builds for {SUPPORTED_ARCHS}, not {self.arch!r}")
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} not supported; use one of {SUPPORTED_DTYPES}")
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"head_dim {self.head_dim} not supported; use one of {SUPPORTED_HEAD_DIMS}")
        tm, tn = default_tile(self.head_dim, self.causal)
        if not self.tile_m:
            object.__setattr__(self, "tile_m", tm)
        if not self.tile_n:
            object.__setattr__(self, "tile_n", tn)
        if self.tile_m != 128:
            raise ValueError(f"tile_m must be 128 (one TMEM lane per query row, one softmax warpgroup), got {self.tile_m}")
        if self.tile_n not in (64, 128):
            raise ValueError(f"tile_n must be 64 or 128 (S and P must fit TMEM beside O), got {self.tile_n}")
        if self.kv_stages < 1:
            raise ValueError(f"kv_stages must be >= 1, got {self.kv_stages}")
        if self.smem_bytes > SMEM_LIMIT - 1024:
            raise ValueError(f"{self.smem_bytes} B of shared memory needed; sm_100 allows {SMEM_LIMIT}")
        if self.tmem_columns > TMEM_COLUMNS:
            raise ValueError(f"{self.tmem_columns} TMEM columns needed; sm_100 has {TMEM_COLUMNS}")

    @property
    def elem_bytes(self) -> int:
        return 2

    @property
    def threads(self) -> int:
        return THREADS

    @property
    def smem_bytes(self) -> int:
        """Q, K and V slots and the O staging tile, before alignment padding."""
        q = self.tile_m * self.head_dim * self.elem_bytes
        kv = 2 * self.kv_stages * self.tile_n * self.head_dim * self.elem_bytes
        return q + kv + q

    # TMEM column map (32-bit columns, one lane per query row): S, then P (16-bit, two per
    # column), then O. P has its own columns so S of the next block never overwrites the P
    # the PV MMA may still be reading.
    @property
    def tmem_s(self) -> int:
        return 0

    @property
    def tmem_p(self) -> int:
        return self.tile_n

    @property
    def tmem_o(self) -> int:
        return 256

    @property
    def tmem_columns_used(self) -> int:
        return self.tmem_o + self.head_dim

    @property
    def tmem_columns(self) -> int:
        """Columns allocated: a power of two >= 32 covering the map."""
        n = 32
        while n < self.tmem_columns_used:
            n *= 2
        return n
