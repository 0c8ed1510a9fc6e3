"""The dispatcher: a problem goes in, a ranked choice of variant with its reasons comes out.

Two kinds of axis decide it. The exact axes (arch, dtype, head_dim, causal, and the plain
kernel's varlen/paged_kv/pack_gqa/split_kv = False unless asked) must equal what was asked:
a cubin built for one head dim cannot run another, and nothing is ever substituted. Among the
variants that match, the free axes (scheduler, tiles) are a matter of speed, and PREFERENCES
says, as data, which values win for which problems; each rule names the measurement behind
it. A rule may also choose a form axis (axes.Axis.form: split_kv, pack_gqa, which change how
a kernel computes and not what) that the problem left out, and a launch parameter (num_splits)
from a value derived from the sizes (DERIVED): that is how decode-shaped problems reach the
split-KV forms. The same function serves the runtime, `POST /v1/select` and `cubinforge explain`, and
the C++ bundle carries PREFERENCES as a generated table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .axes import axis_value, form_axes, with_defaults
from .decode_plan import decode_splits, gqa_group

# The problem's sizes a preference may test, besides its exact axes.
SIZES = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "sm_count")
# Values computed from the sizes that a preference may test or hand out as a launch parameter
# (None when a size they need is not given, so no range on them holds).
DERIVED = {
    # The auto split count of the decode forms (runtime/decode_plan.py): > 1 when one split's
    # tiles leave the SMs under-filled and the key range is long enough to share.
    "decode_splits": lambda p: decode_splits(p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.seqlen_k, p.sm_count),
    # Query heads per KV head (1: MHA), None unless both head counts are given and divide.
    "gqa_group": lambda p: gqa_group(p.heads_q, p.heads_kv),
}


@dataclass(frozen=True)
class Preference:
    """When every `when` condition holds for the problem, variants with the `prefer` axis
    values rank first. A condition is an exact value, or (low, high) inclusive bounds with
    None for open, on an exact axis or a size."""

    name: str
    when: Mapping[str, Any]
    prefer: Mapping[str, Any]
    why: str
    # Launch parameters the chosen variant takes when it meets this rule: {parameter: the
    # DERIVED value it is set to}.
    params: Mapping[str, str] = field(default_factory=dict)

    def applies(self, problem: "Problem") -> bool:
        return all(_holds(problem.value(k), cond) for k, cond in self.when.items())


def _holds(value: Any, cond: Any) -> bool:
    if isinstance(cond, tuple):
        lo, hi = cond
        return value is not None and (lo is None or value >= lo) and (hi is None or value <= hi)
    return same_value(value, cond)


def same_value(a: Any, b: Any) -> bool:
    # JSON true == 1 in Python; an axis value must match in kind as well as value.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


_AB = "H200 A/B 2026-12-01 (../shared/measurements/2026-12-01-h200/ab-summary.txt)"
# Earlier rules weigh more: a variant is ranked by the rules it satisfies, first rule first.
PREFERENCES: tuple[Preference, ...] = (
    Preference(
        "decode-split-kv", {"family": "fa3_fwd", "seqlen_q": (1, 64), "decode_splits": (2, None)},
        {"split_kv": True, "pack_gqa": True},
        "H200 2026-12-01 (bench/results/2026-12-01-h200/final/inference.log): dense decode b8 x 32k keys, "
        "32/8 heads, 4.43 TB/s through the split-KV forms (2 splits; 4.04 unsplit), 1.42x FA4, where "
        "flash_attn_func's plain kernel gave 0.42-0.74 of the best anchor at 32k keys (final/results.md, "
        "--decode cells: one split's tiles fill under 80% of the SMs)",
        params={"num_splits": "decode_splits"}),
    Preference(
        # hd64's dense tile is 192 rows: for 1-64 query tokens it does 3x the tensor work per
        # key byte of the 64-row pack-GQA form, and the plain kernel stayed at 0.64-0.79 of the
        # best anchor on the --decode cells even where one split fills the SMs (8k keys).
        "decode-pack-hd64", {"family": "fa3_fwd", "head_dim": 64, "seqlen_q": (1, 64), "decode_splits": (1, 1)},
        {"pack_gqa": True, "split_kv": False},
        "H200 2026-12-01 (bench/results/2026-12-01-h200/final/results.md): bf16/fp16 hd64 --decode cells "
        "0.64-0.79 of the best anchor through the 192-row plain kernel"),
    Preference(
        # GQA decode where one split fills the SMs: the plain kernel's CTA serves one query
        # head, so it streams each KV head once per query head of its group; the pack-GQA
        # form streams it once.
        "decode-pack-gqa", {"family": "fa3_fwd", "seqlen_q": (1, 64), "gqa_group": (2, None), "decode_splits": (1, 1)},
        {"pack_gqa": True, "split_kv": False},
        "H200 2026-12-01 (bench/results/2026-12-01-h200/check7/j2/decode-ab.log): b32 x 8192 keys, 32/8 heads "
        "x 4 query tokens and 64/8 x 1, the plain kernel 0.340 / 0.169 of FA4, the unsplit pack-GQA form "
        "0.975 / 0.985"),
    Preference(
        # MHA too: at hd128 the 64-row form with two CTAs an SM (the next rule) streams the
        # cache faster than the plain kernel's 128-row persistent walk where one split fills
        # the SMs. 64 query tokens is where the plain kernel leads again.
        "decode-pack-hd128", {"family": "fa3_fwd", "head_dim": 128, "seqlen_q": (1, 16), "decode_splits": (1, 1)},
        {"pack_gqa": True, "split_kv": False},
        "H200 2026-12-01 (bench/results/2026-12-01-h200/check7/j2/decode-ab.log): bf16 16/16 heads x 8192 keys, "
        "1 / 16 query tokens, 4.51 / 4.46 TB/s non-causal and 4.51 / 4.47 causal through the 64 x 64 two-CTA "
        "form against the plain kernel's 4.44 / 4.42 and 4.42 / 4.39 (at 64 tokens 4.36 against 4.38)"),
    Preference(
        # The hd128 dense-cache forms at 64 x 64 run two CTAs an SM (generator
        # config.TUNED_DECODE) and beat the 64 x 128 ones at every query count measured; a
        # registry built before 2026-12-03 may hold both. tile_n 64 is the mark: no other hd128
        # variant has it (tests/test_decode_two_ctas.py). It ranks the kvcache calls' forms
        # (pack_gqa asked for); flash_attn_func's decode route, where an earlier rule chooses
        # pack_gqa, takes the first name among both tiles.
        "decode-two-ctas", {"family": "fa3_fwd", "head_dim": 128, "paged_kv": False, "pack_gqa": True},
        {"tile_n": 64},
        "H200 2026-12-03 (bench/results/2026-12-03-h200/NOTES.md, c1; bf16 and fp16, flash_attn_with_kvcache on a "
        "dense cache): 64 x 64 with two CTAs an SM 4.32-4.38 TB/s on the decode cells against 64 x 128's "
        "4.24-4.32 (1.01-1.05x), and 1.13-1.24x on 64-2048-token chunks (550-580 against 460-470 TFLOPS)"),
    Preference(
        # The persistent form walks causal tiles in L2 sections (config.TUNED causal_order).
        "hd128-causal-short", {"family": "fa3_fwd", "causal": True, "head_dim": 128, "seqlen_q": (None, 3072)},
        {"scheduler": "persistent"},
        "H200 2026-12-03 (bench/results/2026-12-03-h200/check13/c1): the persistent form's sectioned walk "
        "342 / 486 / 577 TFLOPS at 512 / 1k / 2k keys against lpt's 260 / 405 / 539, and 558 against 515 at "
        "4 x 3000 x 16 heads; lpt leads at 4k (633 against 603)"),
    Preference(
        "hd128-causal", {"family": "fa3_fwd", "causal": True, "head_dim": 128, "seqlen_q": (3073, None)},
        {"scheduler": "lpt"},
        "H200 2026-12-03 (check13/c1): lpt + bit-mask 633 / 685 TFLOPS at 4k / 8k keys against the persistent "
        "form's 603 / 663"),
    Preference(
        # The persistent form is 128 x 64 with the sectioned walk (generator config.TUNED).
        "hd192-causal-short", {"family": "fa3_fwd", "causal": True, "head_dim": 192, "seqlen_q": (None, 3072)},
        {"scheduler": "persistent"},
        "H200 2026-12-03 (bench/results/2026-12-03-h200/check14/c1, bf16): the persistent 128 x 64 form "
        "348 / 501 / 611 TFLOPS at 512 / 1k / 2k keys against lpt 128 x 96's 293 / 439 / 595, and 625 against "
        "562 at 4 x 3000 x 8 heads; lpt leads at 4k (695 against 671)"),
    Preference(
        "hd192-causal", {"family": "fa3_fwd", "causal": True, "head_dim": 192, "seqlen_q": (3073, None)},
        {"scheduler": "lpt"},
        "H200 2026-12-03 (check14/c1): lpt 128 x 96 695 / 753 / 772 TFLOPS at 4k / 8k / 16k keys against the "
        "persistent 128 x 64 form's 671 / 731 / 763"),
    Preference(
        # A registry built before 2026-12-03 may also hold the 128 x 80 form (then the first
        # by name): the 128 x 64 one wins at every length measured.
        "hd256-causal", {"family": "fa3_fwd", "causal": True, "head_dim": 256},
        {"tile_n": 64},
        "H200 2026-12-03 (check14/c1, bf16): lpt 128 x 64 with the conditional rescale 328 / 496 / 636 / 790 / "
        "820 TFLOPS at 512 / 1k / 2k / 8k / 16k keys against 128 x 80's 306 / 467 / 605 / 760 / 790"),
    Preference(
        "hd64-causal-short", {"family": "fa3_fwd", "causal": True, "head_dim": 64, "seqlen_q": (None, 1536)},
        {"tile_m": 128},
        f"{_AB} and its short-causal A/B (bench/results/2026-12-01-h200/short-causal/): 128x128 tiles 233 / 315 "
        "TFLOPS at 512 / 1k keys, 192x128 212 / 285; 192 rows lead from 2k"),
    Preference(
        "hd64-causal", {"family": "fa3_fwd", "causal": True, "head_dim": 64, "seqlen_q": (1537, None)},
        {"tile_m": 192},
        "short-causal A/B (bench/results/2026-12-01-h200/short-causal/): 192x128 tiles 403 / 528 TFLOPS at "
        "2k / 8k keys, 128x128 384 / 473"),
    Preference(
        "hd96-short", {"family": "fa3_fwd", "head_dim": 96, "seqlen_q": (None, 1536)},
        {"tile_m": 128},
        "H200 2026-12-02 (bench/results/2026-12-02-h200/check10/r2, s1): at 1k keys the 128-row hd96 forms "
        "536 / 378 TFLOPS (non-causal / causal, bf16) against the 192-row P-in-shared-memory forms' 446 / 343"),
    Preference(
        "hd96", {"family": "fa3_fwd", "head_dim": 96, "seqlen_q": (1537, None)},
        {"tile_m": 192},
        "H200 2026-12-02 (check10/r2, s1): the 192-row hd96 forms (P through shared memory) 599 / 685 / 676 "
        "TFLOPS at 2k / 8k / 16k non-causal (bf16; the 128 x 176 form 594 / 597 / 615, FA4 592 / 678 / 630) "
        "and 482 / 628 / 660 causal (128 x 128: 455 / 582 / 609; FA4 470 / 631 / 647); fp16 the same way"),
)


@dataclass(frozen=True)
class Problem:
    """What the dispatcher chooses for: the exact axes asked for, and the problem's sizes."""

    family: str
    axes: Mapping[str, Any]
    batch: int | None = None
    seqlen_q: int | None = None
    seqlen_k: int | None = None
    heads_q: int | None = None
    heads_kv: int | None = None
    sm_count: int | None = None

    def exact(self) -> dict:
        return with_defaults(self.axes)

    def value(self, key: str) -> Any:
        if key == "family":
            return self.family
        if key in SIZES:
            return getattr(self, key)
        if key in DERIVED:
            return DERIVED[key](self)
        return self.exact().get(key)


@dataclass(frozen=True)
class Ranked:
    item: Any  # what was ranked: a Manifest, a service record, anything with .axes and a name
    name: str
    satisfied: tuple[str, ...]  # the preferences it meets, by name


@dataclass(frozen=True)
class Choice:
    best: Any
    ranked: tuple[Ranked, ...]
    reasons: tuple[str, ...] = field(default=())
    params: Mapping[str, Any] = field(default_factory=dict)  # launch parameters (num_splits), from the rules met


def matches(problem: Problem, axes: Mapping[str, Any]) -> list[str]:
    """The exact axes on which a variant's axes differ from the problem's (empty: it fits)."""
    return [k for k, v in problem.exact().items() if not same_value(axis_value(axes, k), v)]


def rank(problem: Problem, candidates: Iterable[Any], *, axes_of=lambda c: c.axes,
         name_of=lambda c: c.variant, preferences: tuple[Preference, ...] = PREFERENCES) -> Choice | None:
    """The fitting candidates, best first, and why; None when none fits."""
    active = [p for p in preferences if p.applies(problem)]
    # Form axes the problem left out that an active rule prefers: either value fits.
    forms = form_axes()
    freed: dict[str, list] = {}
    for p in active:
        for k, v in p.prefer.items():
            if k in forms and k not in problem.axes:
                freed.setdefault(k, []).append(v)
    ranked = []
    for c in candidates:
        axes = axes_of(c)
        if any(k not in freed or not any(same_value(axis_value(axes, k), v) for v in freed[k])
               for k in matches(problem, axes)):
            continue
        met = tuple(p.name for p in active if all(same_value(axes.get(k), v) for k, v in p.prefer.items()))
        ranked.append(Ranked(c, name_of(c), met))
    if not ranked:
        return None
    # Lexicographic on the active rules in order (a met earlier rule outweighs any later
    # ones), then the name, so the choice is stable.
    ranked.sort(key=lambda r: (tuple(p.name not in r.satisfied for p in active), r.name))
    best = ranked[0]
    reasons = ["matches " + fmt_axes({k: v for k, v in problem.exact().items() if k not in freed})]
    if len(ranked) > 1:
        reasons.append(f"{len(ranked)} variants fit: " + ", ".join(r.name for r in ranked))
    for p in active:
        met = p.name in best.satisfied
        if met:
            note = ""
        elif any(p.name in r.satisfied for r in ranked):
            note = " - outweighed by an earlier rule"
        else:
            note = " - no fitting variant has it"
        reasons.append(f"{p.name}: prefer {fmt_axes(p.prefer)} ({p.why})" + note)
    for p in preferences:
        # A rule on a derived value that the sizes given cannot compute: say what it needs
        # (e.g. `cubinforge explain` without --sm-count), when its other conditions hold.
        undecided = [k for k in p.when if k in DERIVED and problem.value(k) is None]
        if undecided and all(_holds(problem.value(k), c) for k, c in p.when.items() if k not in DERIVED):
            missing = [k for k in SIZES if getattr(problem, k) is None]
            reasons.append(f"{p.name}: not decided: {', '.join(undecided)} needs {', '.join(missing)}")
    if not active and len(ranked) > 1:
        reasons.append("no preference applies to this problem; the first by name is taken")
    if freed:
        reasons.append(f"{', '.join(sorted(freed))} not asked for: form axes (the same answer either way), "
                       f"so the rules above choose them")
    params = {}
    for p in active:
        if p.name in best.satisfied:
            for param, derived in p.params.items():
                params[param] = problem.value(derived)
                reasons.append(f"{p.name}: launch with {param}={params[param]} ({derived} for "
                               f"{fmt_axes({k: problem.value(k) for k in SIZES})})")
    return Choice(best.item, tuple(ranked), tuple(reasons), params)


def fmt_axes(axes: Mapping[str, Any]) -> str:
    """`k=v, ...` of an axes mapping, as every dispatcher message writes it."""
    return ", ".join(f"{k}={v!r}" for k, v in axes.items())


def preference_table(preferences: tuple[Preference, ...] = PREFERENCES) -> list[dict]:
    """PREFERENCES as plain JSON-able rows, for the C++ bundle and `GET` answers."""
    rows = []
    for p in preferences:
        conds = []
        for k, c in p.when.items():
            if isinstance(c, tuple):
                conds.append({"key": k, "low": c[0], "high": c[1]})
            else:
                conds.append({"key": k, "equals": c})
        rows.append({"name": p.name, "when": conds, "prefer": dict(p.prefer), "why": p.why, "params": dict(p.params)})
    return rows
