"""SM100 (Blackwell) forward: tcgen05 UMMA with S, P and O in tensor memory (TMEM).

`compile_variant(FwdConfig(...))` cross-compiles one variant for sm_100a and returns a
KernelBuild. No cubin of this family has ever run: there is no Blackwell GPU here, and the
registry marks every one `unverified` (docs/kernels.md).
"""

from __future__ import annotations

from .config import DEFAULT_TILES, FwdConfig, default_tile

__all__ = ["FwdConfig", "compile_variant", "default_tile", "DEFAULT_TILES"]

# 128-byte swizzle: one swizzle atom is 64 16-bit elements wide, the TMA box's inner extent.
SWIZZLE_BYTES = 128


def tma_boxes(cfg: FwdConfig) -> dict[str, tuple[int, int]]:
    """(inner, outer) box of each tensor map: 64 head-dim elements by the tile's rows."""
    inner = SWIZZLE_BYTES // cfg.elem_bytes
    return {"q": (inner, cfg.tile_m), "k": (inner, cfg.tile_n), "v": (inner, cfg.tile_n), "o": (inner, cfg.tile_m)}


def compile_variant(cfg: FwdConfig):
    from cubinforge.generator.kernel_build import KernelBuild

    from .compile import compile_cubin
    from .contract import family_contract

    compiled, kernel, seconds = compile_cubin(cfg)
    entries = list(compiled.kernel_info)
    if len(entries) != 1:
        raise RuntimeError(f"expected one kernel in the compiled module, found {entries}")
    # The boxes above assume 128-byte swizzled shared-memory tiles: check the traced layouts.
    odd = {k: s for k, s in kernel.swizzles.items() if s != "S<3,4,3>"}
    if odd:
        raise RuntimeError(f"expected 128-byte swizzle (S<3,4,3>) on every TMA tile, got {odd}")
    from .checks import problems

    cubin = bytes(compiled.__cubin__)
    found = problems(cubin, cfg, int(kernel.dynamic_smem_bytes), (cfg.threads, 1, 1))
    if found:
        raise RuntimeError("static checks of the sm_100a cubin failed:\n  - " + "\n  - ".join(found))
    return KernelBuild(
        cubin=cubin,
        entry=entries[0],
        block=(cfg.threads, 1, 1),
        cluster=(1, 1, 1),
        dynamic_smem_bytes=int(kernel.dynamic_smem_bytes),
        contract=family_contract(cfg, tma_boxes(cfg), SWIZZLE_BYTES),
        compile_options=f"--gpu-arch {cfg.arch} --keep-cubin",
        extra={
            "tile_m": cfg.tile_m, "tile_n": cfg.tile_n, "kv_stages": cfg.kv_stages,
            "tmem_columns": cfg.tmem_columns,
            "tmem_map": {"s": cfg.tmem_s, "p": cfg.tmem_p, "o": cfg.tmem_o},
            "warps": {"softmax": 4, "correction": 4, "mma": 1, "load": 1},
            "tma_copies_per_block": {"q": cfg.head_dim // tma_boxes(cfg)["q"][0],
                                     "k": cfg.head_dim // tma_boxes(cfg)["k"][0],
                                     "v": cfg.head_dim // tma_boxes(cfg)["v"][0]},
            "dsl_compile_seconds": round(seconds, 3),
        },
    )
