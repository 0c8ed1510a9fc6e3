"""Kernel families: for each, its template, kernel package, config class and what it supports.

A family is data, like the axes: which axis values it builds today, its default tile per
head dim, the compile options the pipeline expects, and the constraints between axes. The
kernel package itself is imported only inside a compile worker (it imports cutlass).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

Axes = Mapping[str, Any]
# A constraint: (predicate over a variant's axes that must hold, message when it does not).
Constraint = tuple[Callable[[Axes], bool], str]


@dataclass(frozen=True)
class Family:
    name: str  # e.g. "fa3_fwd"; variant names start with name.replace("_", "-")
    template: str  # file under templates/ (or an absolute path)
    package: str  # importable module path of the kernel package
    config_class: str  # the config dataclass the package exports next to compile_variant
    supported: Mapping[str, tuple]  # axis -> the values this family builds now (its axes)
    config_axes: tuple[str, ...]  # axes always written into the rendered CONFIG
    default_tiles: Mapping[int, tuple[int, int]] | None = None  # head_dim -> (tile_m, tile_n), fallback
    tile_function: str | None = None  # "module:function(head_dim, causal)" in the kernel package (cutlass-free)
    compile_options: str = "--gpu-arch {arch} --keep-cubin"
    constraints: tuple[Constraint, ...] = ()
    not_yet: Mapping[tuple[str, Any], str] = field(default_factory=dict)  # why a value is missing
    in_all: bool = True  # whether `--set all` includes it (test families say False)

    @property
    def prefix(self) -> str:
        return self.name.replace("_", "-")

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(self.supported)

    def default_tile(self, axes: Axes) -> tuple[int, int] | None:
        """The family's own default tile for the head dim; the table here until its package exists."""
        fn = _tile_function(self.tile_function) if self.tile_function else None
        if fn is not None:
            extra = (axes["head_dim_v"],) if "head_dim_v" in axes else ()
            return tuple(fn(axes["head_dim"], bool(axes.get("causal", False)), *extra))
        if self.default_tiles is None:
            return None
        return self.default_tiles[axes["head_dim"]]

    def options_for(self, arch: str) -> str:
        return self.compile_options.format(arch=arch)


@lru_cache(maxsize=None)
def _tile_function(ref: str) -> Callable | None:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return None


def _dv_pairs() -> tuple:
    """(head_dim, head_dim_v) pairs with their own value head dim: the kernel package's table
    (config.py imports no cutlass)."""
    from .kernels.fa3_fwd_sm90.config import HEAD_DIM_V_TILES
    return tuple(HEAD_DIM_V_TILES)


FA3_FWD = Family(
    name="fa3_fwd",
    template="fa3_fwd_variant.py.j2",
    package="cubinforge.generator.kernels.fa3_fwd_sm90",
    config_class="FwdConfig",
    supported={
        "arch": ("sm_90a",),
        "dtype": ("bf16", "fp16", "e4m3"),
        "head_dim": (64, 96, 128, 192, 256),
        "head_dim_v": (64, 96, 128, 192, 256),  # = head_dim, or a pair of HEAD_DIM_V_TILES
        "causal": (False, True),
        # Packed q/k/v with cu_seqlens (inference.py, varlen): one tile per CTA on a 1-D grid.
        "varlen": (False, True),
        # Inference axes (kernels/fa3_fwd_sm90/inference.py): one tile per CTA.
        "paged_kv": (False, True),
        "pack_gqa": (False, True),
        "split_kv": (False, True),
        # V (batch, heads_kv, head_dim, seqlen_k) for FP8: the 8-bit PV GEMM wants V K-major.
        "v_layout": ("rowmajor", "colmajor"),
        # e4m3 dense: q/k descales per block of tokens (config.DESCALE_BLOCKS) instead of per head.
        "descale_block": ("head", "blockq128k128", "blockq128k192"),
        "softcap": (False, True),
        "local": (False, True),
        "learnable_sink": (False, True),
        # lpt: causal tiles longest first on a 1-D grid (not in the default set until timed)
        "scheduler": ("single", "persistent", "lpt"),
        "tile_m": (64, 128, 192),
        "tile_n": tuple(range(16, 257, 16)),
    },
    config_axes=("arch", "dtype", "head_dim", "causal", "tile_m", "tile_n"),
    constraints=(
        (lambda ax: ax["scheduler"] != "lpt" or ax["causal"],
         "scheduler=lpt orders causal tiles by cost; non-causal tiles all cost the same (use single or persistent)"),
        (lambda ax: ax["scheduler"] == "single" or not (ax["split_kv"] or ax["pack_gqa"]
                                                        or (ax["paged_kv"] and not ax["varlen"])),
         "split_kv, pack_gqa and paged decode (paged_kv without varlen) run one tile per CTA: use "
         "scheduler=single"),
        (lambda ax: ax["head_dim_v"] == ax["head_dim"] or (ax["head_dim"], ax["head_dim_v"]) in _dv_pairs(),
         "head_dim_v must equal head_dim or make a pair the kernel builds: (192, 128), (128, 64), (96, 64)"),
        (lambda ax: not (ax["local"] and ax["causal"]),
         "local=1 is a sliding window with its own right edge; causal (the window (-1, 0)) is causal=1, local=0"),
        (lambda ax: not (ax["split_kv"] or ax["pack_gqa"] or ax["paged_kv"]) or ax["head_dim_v"] == ax["head_dim"],
         "the decode forms (split_kv, pack_gqa, paged_kv) read V as wide as K: head_dim_v != head_dim is the "
         "dense forward's and packed varlen's (varlen=1 paged_kv=0 split_kv=0 pack_gqa=0)"),
        (lambda ax: not (ax["varlen"] and ax["dtype"] == "e4m3") or ax["head_dim_v"] == ax["head_dim"],
         "e4m3 varlen reads V as wide as K (head_dim_v = head_dim); bf16/fp16 varlen takes the pairs"),
        (lambda ax: not ax["varlen"] or (
            (ax["scheduler"] == "single" or (ax["scheduler"] == "persistent" and ax["dtype"] != "e4m3"))
            and not (ax["split_kv"] or ax["pack_gqa"])),
         "varlen runs one tile per CTA (scheduler=single) or, bf16/fp16, the persistent walk "
         "(scheduler=persistent, with paged_kv and the model variants too); not with split_kv or "
         "pack_gqa yet (it takes e4m3 and the model variants, not both: the dtype=e4m3 rule below)"),
        (lambda ax: ax["dtype"] != "e4m3" or ax["head_dim"] in (64, 128, 256),
         "dtype=e4m3 is built for head_dim 64, 128 and 256 so far"),
        (lambda ax: ax["dtype"] != "e4m3" or ax["tile_n"] % 32 == 0,
         "dtype=e4m3 needs tile_n a multiple of 32 (the 8-bit PV GEMM's K step; hd256: tile_n=128)"),
        (lambda ax: ax["dtype"] == "e4m3" or ax["v_layout"] != "colmajor",
         "v_layout=colmajor is built for dtype=e4m3 only (bf16/fp16 read V row-major)"),
        (lambda ax: ax["dtype"] != "e4m3"
         or not (ax["softcap"] or ax["local"] or ax["learnable_sink"] or ax["head_dim_v"] != ax["head_dim"]),
         "dtype=e4m3 does not take the model variants (softcap, local, learnable_sink, head_dim_v != head_dim) yet"),
        (lambda ax: ax["descale_block"] == "head" or (
            ax["dtype"] == "e4m3" and not (ax["split_kv"] or ax["pack_gqa"] or ax["paged_kv"] or ax["varlen"])
            and int(ax["descale_block"].rpartition("k")[2]) % ax["tile_n"] == 0),
         "descale_block=blockq<BQ>k<BK> is built for the dense e4m3 forward (no split_kv, pack_gqa, paged_kv or "
         "varlen), with the k block BK a multiple of tile_n"),
        # A KV cache holds V as it holds K: the e4m3 inference forms transpose it in smem.
        (lambda ax: ax["dtype"] != "e4m3" or ax["v_layout"] == "rowmajor"
         or not (ax["split_kv"] or ax["pack_gqa"] or ax["paged_kv"] or ax["varlen"]),
         "dtype=e4m3 with split_kv, pack_gqa, paged_kv or varlen reads V row-major as a cache holds it: "
         "v_layout=rowmajor"),
    ),
    tile_function="cubinforge.generator.kernels.fa3_fwd_sm90.config:default_tile",
    not_yet={
        ("arch", "sm_100a"): "the fa3_fwd kernel is SM90 (wgmma) only; sm_100a is built by fa4_fwd",
    },
)

# SM100 (Blackwell): tcgen05 UMMA with S, P and O in TMEM. Cross-compiled only: no cubin of
# it has run (the registry marks each `unverified`; docs/kernels.md says what was checked).
FA4_FWD = Family(
    name="fa4_fwd",
    template="fa4_fwd_variant.py.j2",
    package="cubinforge.generator.kernels.fa4_fwd_sm100",
    config_class="FwdConfig",
    supported={
        "arch": ("sm_100a",),
        "dtype": ("bf16", "fp16"),
        "head_dim": (64, 128),
        "causal": (False, True),
        "varlen": (False,),
        "paged_kv": (False,),
        "pack_gqa": (False,),
        "split_kv": (False,),
        "scheduler": ("single",),
        "tile_m": (128,),
        "tile_n": (64, 128),
    },
    config_axes=("arch", "dtype", "head_dim", "causal", "tile_m", "tile_n"),
    tile_function="cubinforge.generator.kernels.fa4_fwd_sm100.config:default_tile",
    not_yet={
        ("arch", "sm_90a"): "fa4_fwd is SM100 only (tcgen05, TMEM); sm_90a is built by fa3_fwd",
        ("head_dim", 96): "head_dim 96 is not built for sm_100a yet",
        ("head_dim", 192): "head_dim 192 is not built for sm_100a yet",
        ("head_dim", 256): "head_dim 256 is not built for sm_100a yet",
        ("dtype", "e4m3"): "e4m3 (FP8) is not built yet",
        ("varlen", True): "varlen is not built yet",
        ("paged_kv", True): "paged KV is not built yet",
        ("pack_gqa", True): "pack_gqa is not built yet",
        ("split_kv", True): "split KV is not built yet",
        ("scheduler", "persistent"): "one tile per CTA only so far (no persistent or CLC scheduler)",
        ("scheduler", "lpt"): "one tile per CTA only so far (no persistent or CLC scheduler)",
    },
)

# A tiny real kernel (scale a vector in place) that exercises the whole pipeline in seconds.
DEMO_SCALE = Family(
    name="demo_scale",
    template="demo_scale_variant.py.j2",
    package="cubinforge.generator.kernels.demo_scale",
    config_class="DemoConfig",
    supported={"arch": ("sm_90a", "sm_100a"), "dtype": ("bf16", "fp16")},
    config_axes=("arch", "dtype"),
    in_all=False,
)

def _companion(name: str, config_class: str, **own_axes: tuple) -> Family:
    """An SM90 kernel that runs beside the forward: one per dtype and head dim (and its own
    axes), its package kernels/<name>, its template <name>_variant.py.j2."""
    return Family(
        name=name,
        template=f"{name}_variant.py.j2",
        package=f"cubinforge.generator.kernels.{name}",
        config_class=config_class,
        supported={"arch": ("sm_90a",), "dtype": ("bf16", "fp16"), "head_dim": (64, 96, 128, 192, 256), **own_axes},
        config_axes=("arch", "dtype", "head_dim", *own_axes),
        not_yet={("arch", "sm_100a"): f"{name} is built for sm_90a only so far"},
    )


# Split-KV's second kernel: partial O and LSE (fp32, per split) -> O and LSE.
ATTN_COMBINE = _companion("attn_combine", "CombineConfig")
# New k/v tokens into a dense or paged cache at cache_seqlens, before attention.
KV_APPEND = _companion("kv_append", "AppendConfig", paged_kv=(False, True))
# Paged -> dense copy of the used keys: the path for page sizes the paged kernels do not take.
KV_GATHER = _companion("kv_gather", "GatherConfig")

# Make FP8 inputs without torch: bf16/fp16 -> e4m3 with per-head or per-block descales and
# an optional random-sign Hadamard rotation (block size, rotation and seed are launch scalars).
FP8_QUANT = Family(
    name="fp8_quant",
    template="fp8_quant_variant.py.j2",
    package="cubinforge.generator.kernels.fp8_quant_sm90",
    config_class="QuantConfig",
    supported={"arch": ("sm_90a",), "dtype": ("bf16", "fp16"), "head_dim": (64, 128, 256)},
    config_axes=("arch", "dtype", "head_dim"),
    not_yet={
        ("arch", "sm_100a"): "fp8_quant is built and tested for sm_90a only",
        ("dtype", "e4m3"): "fp8_quant reads bf16/fp16 and writes e4m3",
        ("head_dim", 96): "the Hadamard rotation needs a power-of-two head_dim",
        ("head_dim", 192): "the Hadamard rotation needs a power-of-two head_dim",
    },
)

FAMILIES: dict[str, Family] = {f.name: f for f in (FA3_FWD, FA4_FWD, DEMO_SCALE, ATTN_COMBINE, KV_APPEND, KV_GATHER,
                                                   FP8_QUANT)}


def register_family(family: Family) -> None:
    """Add (or replace) a family, e.g. a test family living outside the package."""
    FAMILIES[family.name] = family


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown kernel family {name!r} (known: {', '.join(FAMILIES)})") from None
