"""The variant space as data: axes, named sets, filters, and each variant's canonical name.

A variant is a family plus one value per axis the family has. Its name is stable and
readable: `fa3-fwd-sm_90a-bf16-hd128-causal`, with a token appended for every non-default
optional axis (`-varlen`, `-paged`, `-packgqa`, `-splitkv`, `-persistent`, `-m128n176`).
Axis names are the same everywhere: here, in metadata and manifests, the CLI and HTTP.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

# The axis table lives in the runtime (plain data it can import); the spec builds on it.
from cubinforge.runtime.axes import AXES, TILE_AXES, Axis  # noqa: F401  (Axis: re-exported)

from .families import FAMILIES, Family, get_family


class SpecError(ValueError):
    """A variant, filter or set that the spec does not allow, with the reason."""


def axis_default(axis: str, axes: Mapping[str, Any]) -> Any:
    """The value `axis` takes when not given, for a variant whose other axes are `axes`."""
    source = AXES[axis].default_from
    return axes.get(source) if source else AXES[axis].default


@dataclass(frozen=True)
class Variant:
    """One buildable kernel: a family and a value for each of its axes (in AXES order)."""

    family: str
    values: tuple[tuple[str, Any], ...]

    @property
    def axes(self) -> dict[str, Any]:
        return dict(self.values)

    def __getitem__(self, axis: str) -> Any:
        return self.axes[axis]

    @property
    def arch(self) -> str:
        return self.axes["arch"]

    @property
    def name(self) -> str:
        return variant_name(self)


# ---------------------------------------------------------------- values and validation


def normalize_arch(text: str) -> str:
    """`sm90`, `sm_90`, `sm_90a`, `90` -> `sm_90a`; likewise for 100."""
    m = re.fullmatch(r"(?:sm_?)?(\d+)a?", str(text).strip().lower())
    if not m or f"sm_{m.group(1)}a" not in AXES["arch"].values:
        raise SpecError(f"unknown arch {text!r} (allowed: {', '.join(AXES['arch'].values)}; sm90 means sm_90a)")
    return f"sm_{m.group(1)}a"


_TRUE, _FALSE = {"1", "true", "yes", "on", "causal"}, {"0", "false", "no", "off", "noncausal"}


def parse_value(axis: str, text: Any) -> Any:
    """One axis value from CLI/HTTP text (or an already typed value), checked against AXES."""
    if axis not in AXES:
        raise SpecError(f"unknown axis {axis!r} (axes: {', '.join(AXES)})")
    spec = AXES[axis]
    if axis == "arch":
        return normalize_arch(text)
    if isinstance(spec.values[0], bool):
        if isinstance(text, bool):
            value = text
        elif str(text).strip().lower() in _TRUE:
            value = True
        elif str(text).strip().lower() in _FALSE:
            value = False
        else:
            raise SpecError(f"{axis} must be 1/0 or true/false, not {text!r}")
    elif isinstance(spec.values[0], int):
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise SpecError(f"{axis} must be an integer, not {text!r}") from None
    else:
        value = str(text).strip()
    if value not in spec.values:
        raise SpecError(f"unknown {axis} {text} (allowed: {', '.join(map(_show, spec.values))})")
    return value


def parse_values(axis: str, text: str | Iterable) -> list:
    """A comma list (`bf16,fp16`) or an iterable of values -> typed values."""
    items = text.split(",") if isinstance(text, str) else list(text)
    return [parse_value(axis, t) for t in items if str(t).strip() != ""]


def _show(value: Any) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _unsupported(family: Family, axis: str, value: Any) -> str | None:
    """Why `family` cannot build `axis=value`, or None if it can."""
    if value in family.supported[axis]:
        return None
    reason = family.not_yet.get((axis, value), "not supported by this family")
    allowed = ", ".join(map(_show, family.supported[axis]))
    return f"{family.name} cannot build {axis}={_show(value)}: {reason} (supported: {allowed})"


def make_variant(family: str, **axes: Any) -> Variant:
    """Validate and complete a variant: defaults filled in, every constraint checked."""
    fam = get_family(family)
    unknown = [a for a in axes if a not in fam.axes]
    if unknown:
        raise SpecError(f"{fam.name} has no axis {', '.join(unknown)} (its axes: {', '.join(fam.axes)})")
    values: dict[str, Any] = {}
    for axis in fam.axes:
        if axis in TILE_AXES:
            continue
        if axis in axes:
            values[axis] = parse_value(axis, axes[axis])
        elif AXES[axis].default_from:
            values[axis] = values[AXES[axis].default_from]
        elif AXES[axis].default is not None:
            values[axis] = AXES[axis].default
        else:
            raise SpecError(f"{fam.name} needs a value for {axis}")
    if "tile_m" in fam.axes:
        tm, tn = fam.default_tile(values)
        values["tile_m"] = parse_value("tile_m", axes.get("tile_m", tm))
        values["tile_n"] = parse_value("tile_n", axes.get("tile_n", tn))
    for axis, value in values.items():
        why = _unsupported(fam, axis, value)
        if why:
            raise SpecError(why)
    for holds, message in fam.constraints:
        if not holds(values):
            raise SpecError(f"{fam.name}: {message}")
    ordered = tuple((a, values[a]) for a in AXES if a in values)
    return Variant(fam.name, ordered)


# ---------------------------------------------------------------- names


def variant_name(v: Variant) -> str:
    fam = get_family(v.family)
    ax = v.axes
    tokens = [fam.prefix]
    for axis, value in v.values:
        spec = AXES[axis]
        if axis == "head_dim":
            tokens.append(f"hd{value}")
        elif AXES[axis].default_from:
            if value != ax[AXES[axis].default_from]:
                tokens.append(f"dv{value}")
        elif axis == "causal":
            tokens.append("causal" if value else "noncausal")
        elif spec.flag:
            if value:
                tokens.append(spec.flag)
        elif axis in TILE_AXES:
            continue
        elif spec.default is not None:
            if value != spec.default:
                tokens.append(str(value))
        else:
            tokens.append(str(value))
    if "tile_m" in ax and (ax["tile_m"], ax["tile_n"]) != fam.default_tile(ax):
        tokens.append(f"m{ax['tile_m']}n{ax['tile_n']}")
    return "-".join(tokens)


def parse_name(name: str) -> Variant:
    """The inverse of variant_name: `fa3-fwd-sm_90a-bf16-hd128-causal` -> Variant."""
    fams = sorted(FAMILIES.values(), key=lambda f: -len(f.prefix))
    fam = next((f for f in fams if name.startswith(f.prefix + "-")), None)
    if fam is None:
        raise SpecError(f"{name!r} does not start with a known family prefix")
    tokens = name[len(fam.prefix) + 1 :].split("-")
    axes: dict[str, Any] = {}
    flags = {AXES[a].flag: a for a in fam.axes if AXES[a].flag}
    for tok in tokens:
        if tok in flags:
            axes[flags[tok]] = True
        elif (m := re.fullmatch(r"m(\d+)n(\d+)", tok)) and "tile_m" in fam.axes:
            axes["tile_m"], axes["tile_n"] = int(m.group(1)), int(m.group(2))
        elif (m := re.fullmatch(r"hd(\d+)", tok)) and "head_dim" in fam.axes:
            axes["head_dim"] = int(m.group(1))
        elif (m := re.fullmatch(r"dv(\d+)", tok)) and "head_dim_v" in fam.axes:
            axes["head_dim_v"] = int(m.group(1))
        elif tok in ("causal", "noncausal") and "causal" in fam.axes:
            axes["causal"] = tok == "causal"
        else:
            axis = next((a for a in fam.axes if tok in AXES[a].values and not AXES[a].flag), None)
            if axis is None or axis in axes:
                raise SpecError(f"cannot read token {tok!r} of variant name {name!r}")
            axes[axis] = tok
    v = make_variant(fam.name, **axes)
    if v.name != name:
        raise SpecError(f"{name!r} is not canonical (the canonical name is {v.name!r})")
    return v


# ---------------------------------------------------------------- sets and filters

ALL = "*"  # in a set: every value the family supports

# A set is a list of (family, {axis: values or ALL}); axes left out take their default.

_INFERENCE_FORMS = (  # (split_kv, pack_gqa, paged_kv): every form with at least one on
    (True, False, False), (False, True, False), (True, True, False), (False, False, True),
    (True, False, True), (False, True, True), (True, True, True),
)


def pack_gqa_tile(head_dim: int, split_kv: bool, paged_kv: bool) -> dict[str, list[int]]:
    """The tile axes of a bf16/fp16 pack-GQA form: 64 rows (decode rows are tokens x group:
    few); at hd128 64 x 64 with two CTAs an SM (config.TUNED_DECODE), except split on a paged
    cache, which stays 64 x 128 (H200 2026-12-03, bench/results/2026-12-03-h200/NOTES.md c4:
    the two-CTA form 0.99x / 0.91x split two ways at b8 x 32k keys); else the family's key tile."""
    if head_dim == 128 and not (split_kv and paged_kv):
        return {"tile_m": [64], "tile_n": [64]}
    return {"tile_m": [64]}


# Packed varlen beyond hd64 / hd128 (default and SET=inference): DeepSeek MLA prefill, (192, 128)
# over ragged batches, and Gemma's hd256, on the persistent walk as hd128; how O leaves is
# config.TUNED_VARLEN_DTYPE's (no O buffer of its own fits beside (192, 128)'s K and V stages).
VARLEN_WIDE = [
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [192], "head_dim_v": [128],
                 "causal": [False, True], "varlen": [True], "scheduler": ["persistent"]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["fp16"], "head_dim": [256], "causal": [False, True],
                 "varlen": [True], "scheduler": ["persistent"]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [256], "causal": [False],
                 "varlen": [True], "scheduler": ["persistent"]}),
    # bf16 hd256 causal at 128 x 64 (config.TUNED_VARLEN_DTYPE: 1.041x the 128 x 80 form, check16/l1).
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [256], "causal": [True],
                 "varlen": [True], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [64]}),
]
INFERENCE_SET = [
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [d], "causal": [False, True],
                 "split_kv": [s], "pack_gqa": [p], "paged_kv": [g], **(pack_gqa_tile(d, s, g) if p else {})})
    for s, p, g in _INFERENCE_FORMS for d in (64, 128)
] + [
      # Packed hd64 / hd128 and paged chunked prefill on the persistent walk with the tile counter
      # (bf16 hd128 paged as the default set; fp16 paged and hd64 paged since session 20,
      # config.TUNED_VARLEN_FORMS: 1.026-1.080x their one-tile forms, check20/b1).
      ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128], "causal": [False, True],
                   "varlen": [True], "scheduler": ["persistent"]}),
      ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128], "causal": [False, True],
                   "varlen": [True], "paged_kv": [True], "scheduler": ["persistent"]}),
      *VARLEN_WIDE,
      ("attn_combine", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128]}),
      ("kv_append", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128], "paged_kv": [False, True]}),
      ("kv_gather", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128]})]
DECODE_DEFAULT = [
    # bf16 hd128 paged, split and unsplit, at pack_gqa_tile's tiles: the two-CTA form 1.02-1.38x
    # on unsplit cells at pages 256 and 16 (H200 2026-12-03, NOTES.md c4); split, 64 KiB in
    # flight an SM against 192 KiB, it lost, so the split forms keep 64 x 128 with 3 stages.
    *[("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [False, True],
                   "split_kv": [s], "pack_gqa": [True], "paged_kv": [True], **pack_gqa_tile(128, s, True)})
      for s in (True, False)],
    ("attn_combine", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128]}),
    # flash_attn_func's decode-shaped calls at the other head dims and fp16 (the dispatcher's
    # decode rules route them here): the dense kernel's 128-192-row tiles spend 2-3x the
    # tensor work per key byte of these 64-row forms, and one split leaves the SMs idle at
    # long keys (bench --decode cells 0.42-0.79 of the best anchor, final/results.md).
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 256], "causal": [False, True],
                 "split_kv": [False, True], "pack_gqa": [True], "tile_m": [64]}),
    ("attn_combine", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 256]}),
    # hd128 on a dense cache at 64 x 64 with two CTAs an SM (config.TUNED_DECODE): 1.01-1.05x
    # the 64 x 128 forms on every decode cell and 1.13-1.24x on 64-2048-token chunks (H200
    # 2026-12-03, bench/results/2026-12-03-h200/NOTES.md, c1).
    *[("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128], "causal": [False, True],
                   "split_kv": [s], "pack_gqa": [True], **pack_gqa_tile(128, s, False)}) for s in (False, True)],
    ("kv_append", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "paged_kv": [False, True]}),
    ("kv_gather", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128]}),
    # e4m3 paged decode (an FP8 KV cache, V row-major, transposed in smem; O bf16 through
    # the bf16 combine): hd128 causal pack-GQA, split and unsplit. Not timed yet.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [True],
                 "split_kv": [False, True], "pack_gqa": [True], "paged_kv": [True], "tile_m": [64]}),
]
# e4m3 decode and varlen for SET=fp8: pack-GQA (it serves GQA 1 too), split and unsplit, a dense or a
# paged cache; hd256 at 64 x 64 (three stages of K, V and sVt in 160 KiB; bf16's 80-key tile
# has no 32-key step for the 8-bit PV GEMM).
FP8_DECODE = [
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [64, 128], "causal": [False, True],
                 "split_kv": [False, True], "pack_gqa": [True], "paged_kv": [False, True], "tile_m": [64]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [256], "causal": [True],
                 "split_kv": [False, True], "pack_gqa": [True], "paged_kv": [True], "tile_m": [64], "tile_n": [64]}),
    ("attn_combine", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64, 128, 256]}),
    # e4m3 varlen prefill: packed q/k/v (V row-major), and paged chunked prefill at hd128.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [64, 128], "causal": [False, True],
                 "varlen": [True]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [False, True],
                 "varlen": [True], "paged_kv": [True]}),
]
# Varlen prefill (flash_attn_varlen_func): packed q/k/v, and paged chunked prefill at hd128.
VARLEN_DEFAULT = [
    # hd64 and hd128 on the persistent walk with the tile counter (config.py, varlen_dynamic):
    # hd128 0.97x / 0.98x FA4 against 0.79x / 0.87x one tile per CTA (H200 session 5), hd64
    # 1.10-1.12x the one-tile form (H200 2026-12-04, bench/results/2026-12-04-h200/check17/s1).
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128], "causal": [False, True],
                 "varlen": [True], "scheduler": ["persistent"]}),
    # Paged chunked prefill on the walk too (config.TUNED_VARLEN_FORMS: 1.08x / 1.09x the one-tile
    # form non-causal / causal, check17/s1).
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [False, True],
                 "varlen": [True], "paged_kv": [True], "scheduler": ["persistent"]}),
    *VARLEN_WIDE,
]
# The model variants in the inference forms (issue 12): what serving hosts of Mistral/Gemma
# (sliding window), Gemma-2 (softcap, hd256) and gpt-oss (hd64, sinks, window 128 / full)
# decode and prefill with. Not timed yet: the inference forms' all-off switches.
_PAGED_SPLIT = {"split_kv": [True], "pack_gqa": [True], "paged_kv": [True], "tile_m": [64]}
MODEL_INFERENCE_DEFAULT = [
    # gpt-oss: hd64 with sinks, full (causal) and window-128 (local) layers, paged decode.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64], "causal": [True],
                 "learnable_sink": [True], **_PAGED_SPLIT}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64], "causal": [False], "local": [True],
                 "learnable_sink": [True], **_PAGED_SPLIT}),
    # A sliding window at hd128 (Mistral): paged decode and packed varlen prefill.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [False], "local": [True],
                 **_PAGED_SPLIT}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [False], "local": [True],
                 "varlen": [True], "scheduler": ["persistent"]}),
    # Gemma-2: softcap at hd256, paged decode.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [256], "causal": [True], "softcap": [True],
                 **_PAGED_SPLIT}),
    # Their split-KV combines (hd128's is in DECODE_DEFAULT).
    ("attn_combine", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64, 256]}),
]
MODEL_INFERENCE = MODEL_INFERENCE_DEFAULT + [
    # The unsplit decode forms (num_splits = 1 without the combine) and the dense caches.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64], "causal": [False, True], "local": [False, True],
                 "learnable_sink": [True], "split_kv": [False, True], "pack_gqa": [True], "paged_kv": [False, True],
                 "tile_m": [64]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128], "causal": [False],
                 "local": [True], "split_kv": [False, True], "pack_gqa": [True], "paged_kv": [False, True],
                 "tile_m": [64]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128, 256], "causal": [True], "softcap": [True],
                 "split_kv": [False, True], "pack_gqa": [True], "paged_kv": [False, True], "tile_m": [64]}),
    # Split-KV without pack-GQA (heads_q = heads_kv, or a caller's pack_gqa=False).
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64, 128], "causal": [False], "local": [True],
                 "learnable_sink": [False, True], "split_kv": [True], "paged_kv": [False, True]}),
    # Varlen prefill: windows (packed and paged chunked prefill), gpt-oss's sinks, softcap, every
    # one on the persistent walk with the tile counter (config.TUNED_VARLEN_FORMS; check17/s1 for
    # bf16 hd128's window and softcap and hd64's causal and windowed sinks, check20/b1 for the
    # rest: 1.04-1.40x their one-tile forms). hd64 windows at 128 x 128: at hd64's 192 x 128 the
    # walk's two-edge mask spills 224-232 B.
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128], "causal": [False],
                 "local": [True], "varlen": [True], "paged_kv": [False, True], "scheduler": ["persistent"]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64], "causal": [False],
                 "local": [True], "varlen": [True], "paged_kv": [False, True], "scheduler": ["persistent"],
                 "tile_m": [128], "tile_n": [128]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64], "causal": [False, True],
                 "learnable_sink": [True], "varlen": [True], "scheduler": ["persistent"]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64], "causal": [False], "local": [True],
                 "learnable_sink": [True], "varlen": [True], "scheduler": ["persistent"], "tile_m": [128],
                 "tile_n": [128]}),
    ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [True], "softcap": [True],
                 "varlen": [True], "paged_kv": [False, True], "scheduler": ["persistent"]}),
    ("attn_combine", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128, 256]}),
]
SETS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    # Each (head dim, mask) ships the scheduler that won the H200 A/B of 2026-12-01 (the
    # switches that go with it are the family's: fa3_fwd_sm90/config.py TUNED). Non-causal:
    # persistent everywhere. Causal: lpt for hd128-256 (+2-8% at 1k-8k), persistent for hd64
    # (+3-6% at 512-1k) and for hd96 (session 6: +5-23% over one tile per CTA at 512-16k);
    # for short causal prefill a second variant each for hd64, hd96, hd128 and hd192.
    "smoke": [("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [False],
                           "scheduler": ["persistent"]})],
    "default": [
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64, 128, 192, 256],
                     "causal": [False], "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["fp16"], "head_dim": ALL, "causal": [False],
                     "scheduler": ["persistent"]}),
        # bf16 hd96 non-causal at FA3's wider key tile, 128 x 176 with P converted in pairs
        # (config.TUNED; session 6 H200 A/B, check6/d2/ab-hd96: +5-8% at 2k-16k in check6/e2).
        # Its fp16 twin lost 1-4% at every length there against 128 x 128 (check6/e2 against
        # c2), so fp16 keeps 128 x 128.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [96], "causal": [False],
                     "scheduler": ["persistent"], "tile_m": [128], "tile_n": [176]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128, 192],
                     "causal": [True], "scheduler": ["lpt"]}),
        # hd256 causal at 128 x 64: 64-key blocks divide the 128-row diagonal, where 80-key
        # ones compute 12.5% more columns at 512 keys (config.TUNED; check14/c1: +3.5-7% at
        # 512-16k and off the grid).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [256], "causal": [True],
                     "scheduler": ["lpt"], "tile_m": [128], "tile_n": [64]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64], "causal": [True],
                     "scheduler": ["persistent"]}),
        # Short causal prefill: the dispatcher (runtime/dispatch.py PREFERENCES) takes these up
        # to 3,072 (hd128) and 1,536 (hd64) query rows, where they measured ahead.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128], "causal": [True],
                     "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64], "causal": [True],
                     "scheduler": ["persistent"], "tile_m": [128], "tile_n": [128]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [96], "causal": [True],
                     "scheduler": ["persistent"]}),
        # hd192 causal up to 3,072 rows: the sectioned persistent walk at 128 x 64 (config.TUNED;
        # check14/c1: 1.03-1.19x lpt at 512-2k and off the grid).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [192], "causal": [True],
                     "scheduler": ["persistent"], "tile_m": [128], "tile_n": [64]}),
        # hd96 from 1,537 query rows (runtime/dispatch.py): FA4's 192-row tiles with P through
        # shared memory (config.TUNED, p_smem), 1.07-1.10x the 128-row forms at 8k-16k (check10/r2, s1).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [96], "causal": [False],
                     "scheduler": ["persistent"], "tile_m": [192], "tile_n": [144]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [96], "causal": [True],
                     "scheduler": ["persistent"], "tile_m": [192], "tile_n": [128]}),
        # FP8 (e4m3) forward, V column-major, each form as the H200 A/Bs chose it (check5-check9):
        # persistent non-causal, persistent causal at hd64 / hd128, lpt causal at hd256.
        # hd64 non-causal at 128 x 192 (config.TUNED_FP8): 592.6 TFLOPS at 16k against 568.7
        # at 192 x 128 (check9/n2).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [64], "causal": [False],
                     "v_layout": ["colmajor"], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [192]}),
        # hd128 at 128 x 192 with the in-order row sum (config.TUNED_FP8): 890 TFLOPS at 16k
        # against 851 at 128 x 128 in the H200 A/B of 2026-12-01.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [False],
                     "v_layout": ["colmajor"], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [192]}),
        # hd128 causal: the persistent causal walk at 128 x 192 (config.TUNED_FP8), 977.4
        # TFLOPS at 16k against lpt 128 x 128's 835.2 (check9/n3).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [True],
                     "v_layout": ["colmajor"], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [192]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [64], "causal": [True],
                     "v_layout": ["colmajor"], "scheduler": ["persistent"]}),
        # hd256: bf16's 128x80 tile has no K step of 32 for the 8-bit PV GEMM; 128x128 fits
        # 225 KiB of shared memory (e4m3 Q, K, V; bf16 O) without spills.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [256], "causal": [False],
                     "v_layout": ["colmajor"], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [128]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [256], "causal": [True],
                     "v_layout": ["colmajor"], "scheduler": ["lpt"], "tile_m": [128], "tile_n": [128]}),
        # FP8 inputs for a torch-free caller (runtime/fp8.py quantize_fp8).
        ("fp8_quant", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": ALL}),
        # Decode: pack-GQA, with and without split-KV, dense or paged, and the combine.
        *DECODE_DEFAULT,
        *VARLEN_DEFAULT,
        # The commonest model variants (the rest are SET=variants): Gemma-2's softcap, a window.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [True],
                     "softcap": [True]}),
        # The window on the persistent walk in the causal order (schedule.TileScheduler.local):
        # (4096, 0) x 16k 713.8 TFLOPS, 1.034x FA4 and 0.967x our causal cell, against 685.6 one
        # tile per CTA (H200 2026-12-01, bench/results/2026-12-01-h200/check7/i5).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [False],
                     "local": [True], "scheduler": ["persistent"]}),
        # (192, 128) causal on lpt like every causal hd128-256 variant (FA4 runs LPT for causal
        # too); gpt-oss's sink on hd128 causal's own configuration, so the bench times it
        # against that cell (config.TUNED_VARIANTS).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [192], "head_dim_v": [128],
                     "causal": [True], "scheduler": ["lpt"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [True],
                     "learnable_sink": [True], "scheduler": ["lpt"]}),
        # The model variants' decode / varlen forms (issue 12; the rest are SET=inference).
        *MODEL_INFERENCE_DEFAULT,
    ],
    # What models ship with: softcap (Gemma-2), sliding windows (Mistral, Gemma), learnable
    # sinks (gpt-oss: hd64, window 128, sinks). Local variants are non-causal (a window's
    # right side does what causal does) and persistent: windowed tiles cost about the same.
    "variants": [
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128, 256], "causal": [True],
                     "softcap": [True]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128, 256], "causal": [False],
                     "softcap": [True], "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [128, 256], "causal": [False],
                     "local": [True], "scheduler": ["persistent"]}),
        # hd64 local at 128 x 128: at the default 192 x 128 (three consumer warpgroups, 160
        # registers) the window's two-edge mask spills (~100 LDL/STL); 128 x 128 spills none.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64], "causal": [False],
                     "local": [True], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [128]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128, 256], "causal": [False],
                     "local": [True], "softcap": [True], "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [64, 128], "causal": [True],
                     "learnable_sink": [True]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64, 128], "causal": [False],
                     "learnable_sink": [True], "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [64], "causal": [False],
                     "local": [True], "learnable_sink": [True], "scheduler": ["persistent"],
                     "tile_m": [128], "tile_n": [128]}),
        # Value head dim != head dim: DeepSeek MLA prefill (192, 128), and (128, 64), (96, 64).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [192], "head_dim_v": [128],
                     "causal": [True]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16", "fp16"], "head_dim": [192], "head_dim_v": [128],
                     "causal": [False], "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128, 96], "head_dim_v": [64],
                     "causal": [True]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128, 96], "head_dim_v": [64],
                     "causal": [False], "scheduler": ["persistent"]}),
    ],
    # Inference (issue 11): split-KV decode, pack-GQA, paged KV, and the combine kernel.
    "inference": INFERENCE_SET + MODEL_INFERENCE,
    # FP8 (e4m3) with V row-major, transposed in shared memory (fa3_fwd_sm90/v_transpose.py):
    # the default set's schedulers, not timed yet. hd256 at 128 x 64: sV and sVt of 128 keys
    # (Q 32 + K 64 + V 64 + Vt 64 + O 64 KiB) do not fit 227 KiB; at 64 keys 194 KiB.
    "fp8": [
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [64], "causal": [False],
                     "v_layout": ["rowmajor"], "scheduler": ["persistent"]}),
        # hd128 at wider key tiles, as the H200 A/B of 2026-12-01 measured at 16k: non-causal
        # 128 x 224 866 TFLOPS (793 at 128 x 128), causal 128 x 192 846 (800).
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [False],
                     "v_layout": ["rowmajor"], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [224]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [True],
                     "v_layout": ["rowmajor"], "scheduler": ["lpt"], "tile_m": [128], "tile_n": [192]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [64], "causal": [True],
                     "v_layout": ["rowmajor"], "scheduler": ["persistent"]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [256], "causal": [False],
                     "v_layout": ["rowmajor"], "scheduler": ["persistent"], "tile_m": [128], "tile_n": [64]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [256], "causal": [True],
                     "v_layout": ["rowmajor"], "scheduler": ["lpt"], "tile_m": [128], "tile_n": [64]}),
        *FP8_DECODE,
        # Block quantisation (issue 13): q/k descales per block of tokens (quantize_fp8(x, block=)),
        # on the shipped hd128 column-major forms' switches (config.TUNED_FP8), k blocks of one
        # key tile (192); and block 128 for both at 128 x 128 (FA3's block-128 error case). Not timed yet.
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [False, True],
                     "v_layout": ["colmajor"], "descale_block": ["blockq128k192"], "scheduler": ["persistent"],
                     "tile_m": [128], "tile_n": [192]}),
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["e4m3"], "head_dim": [128], "causal": [False],
                     "v_layout": ["colmajor"], "descale_block": ["blockq128k128"], "scheduler": ["persistent"],
                     "tile_m": [128], "tile_n": [128]}),
    ],
    "all": [
        (f.name, {a: ALL for a in f.axes if a not in TILE_AXES}) for f in FAMILIES.values() if f.in_all
    ],
    "demo": [("demo_scale", {"arch": ALL, "dtype": ALL})],
    # Blackwell: cross-compiled and statically checked only, never run (`make kernels ARCH=sm100`).
    "sm100": [("fa4_fwd", {"arch": ["sm_100a"], "dtype": ALL, "head_dim": ALL, "causal": ALL})],
}


def expand_set(set_name: str) -> list[Variant]:
    """Every variant of a named set (combinations that break a constraint are left out; an entry
    none of whose combinations holds is an error, so a set never drops a form it names)."""
    if set_name not in SETS:
        raise SpecError(f"unknown set {set_name!r} (sets: {', '.join(SETS)})")
    out: dict[str, Variant] = {}
    for family, choice in SETS[set_name]:
        fam = get_family(family)
        axes = [a for a in fam.axes if a in choice]
        pools = [fam.supported[a] if choice[a] == ALL else choice[a] for a in axes]
        made, why = 0, None
        for combo in itertools.product(*pools):
            try:
                v = make_variant(family, **dict(zip(axes, combo)))
            except SpecError as e:
                why = why or e
                continue
            out[v.name] = v
            made += 1
        if not made:
            raise SpecError(f"set {set_name!r}: the entry {family} {dict(choice)} makes no variant: {why}")
    return sorted(out.values(), key=sort_key)


def sort_key(v: Variant) -> tuple:
    """Natural order: by family, then by each axis in the order its values are declared."""
    return (v.family, tuple(AXES[a].values.index(x) for a, x in v.values))


def select(
    set_name: str = "default",
    filters: Mapping[str, Iterable] | None = None,
    families: Iterable[str] | None = None,
) -> list[Variant]:
    """A set narrowed by axis filters ({"dtype": ["bf16"], ...}); explains an empty result."""
    filters = {a: parse_values(a, vals) for a, vals in (filters or {}).items() if vals not in (None, "", [])}
    fams = set(families) if families else None
    variants = expand_set(set_name)
    chosen = [
        v
        for v in variants
        if (fams is None or v.family in fams)
        and all(a not in v.axes or v.axes[a] in vals for a, vals in filters.items())
    ]
    if not chosen:
        reasons = []
        for fam_name in {v.family for v in variants} or {f for f, _ in SETS[set_name]}:
            fam = get_family(fam_name)
            for a, vals in filters.items():
                if a in fam.axes:
                    reasons += [r for r in (_unsupported(fam, a, x) for x in vals) if r]
        shown = " ".join(f"{a}={','.join(map(_show, vals))}" for a, vals in filters.items())
        detail = ("; " + "; ".join(reasons)) if reasons else ""
        raise SpecError(f"no variant of set {set_name!r} matches {shown or 'the filters'}{detail}")
    return chosen
