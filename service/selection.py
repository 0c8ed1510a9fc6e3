"""POST /v1/select's answer, from the one dispatcher (runtime/dispatch.py).

The request becomes a dispatch `Problem` (the exact axes asked, and the sizes); `rank` over
the published, unyanked records of the family chooses, with the PREFERENCES rules, exactly as
the runtime's `registry_source.select` does over a local registry. What the answer adds is
the launch parameters of the choice (the variant's free and form axes, and any parameter a
rule sets, such as num_splits) and, for a miss, which asked values no variant has.
"""

from __future__ import annotations

from typing import Any

from cubinforge.runtime.axes import AXES, axis_value, derived_axes
from cubinforge.runtime.dispatch import SIZES, Choice, Problem, fmt_axes, matches, rank, same_value

from .errors import APIError


def problem_of(request: dict) -> Problem:
    """A validated SelectRequest as the dispatcher's Problem; axes left out (None) are the
    plain kernel's (the dispatcher fills them), seqlen_k and heads_kv default to the query's."""
    sizes = {k: request.get(k) for k in SIZES}
    sizes["seqlen_k"] = sizes["seqlen_k"] or sizes["seqlen_q"]
    sizes["heads_kv"] = sizes["heads_kv"] or sizes["heads_q"]
    if sizes["heads_q"] % sizes["heads_kv"]:
        raise APIError(422, "invalid_request", f"heads_q ({sizes['heads_q']}) must be a multiple of heads_kv "
                       f"({sizes['heads_kv']}) for grouped-query attention")
    axes = {k: v for k, v in request.items() if k in AXES and v is not None}
    return Problem(request["family"], axes, **sizes)


def choose(problem: Problem, records: list[dict]) -> Choice | None:
    return rank(problem, [r for r in records if r["family"] == problem.family],
                axes_of=lambda r: r["axes"], name_of=lambda r: r["name"])


def launch_of(choice: Choice) -> tuple[dict, list[str]]:
    """The launch parameters of the chosen variant, and a reason for each one the rules did not
    set: the axes the caller did not fix are the variant's (compiled into its cubin)."""
    axes = choice.best["axes"]
    launch = {k: axis_value(axes, k) for k, a in AXES.items() if not a.exact or k in ("pack_gqa", "split_kv")}
    launch = {k: v for k, v in launch.items() if v is not None}
    params = dict(getattr(choice, "params", None) or {})  # rule-set parameters (num_splits), where rules set them
    launch.update(params)
    fixed = {k: v for k, v in launch.items() if k not in params}
    reasons = [f"launch parameters {fmt_axes(fixed)}: compiled into {choice.best['name']} (its axes)"] if fixed else []
    return launch, reasons


def answer(problem: Problem, choice: Choice) -> dict:
    launch, why = launch_of(choice)
    return {"variant": choice.best["name"], "reasons": list(choice.reasons) + why, "candidates": len(choice.ranked),
            "launch": launch}


def explain_missing(problem: Problem, records: list[dict], limit: int = 5) -> dict:
    """For a 404: which asked axis values no variant has, what exists, and the nearest variants.
    A derived axis the caller did not ask for (head_dim_v) is left out, as the runtime does."""
    derived = derived_axes()
    want = {k: v for k, v in problem.exact().items() if k not in derived or k in problem.axes}
    pool = [r for r in records if r["family"] == problem.family]
    missing: dict[str, Any] = {}
    available: dict[str, list] = {}
    if not pool:
        families = sorted({r["family"] for r in records})
        if families:
            missing["family"], available["family"] = problem.family, families
    for k, v in want.items():
        values = {axis_value(r["axes"], k) for r in pool}
        if pool and not any(same_value(x, v) for x in values):
            missing[k] = v
            available[k] = sorted(values, key=lambda x: (str(type(x)), str(x)))

    def differs(r: dict) -> dict:
        return {k: axis_value(r["axes"], k) for k in matches(problem, r["axes"]) if k in want}

    ranked = sorted(pool, key=lambda r: (len(differs(r)), r["name"]))
    nearest = [{"variant": r["name"], "differs": differs(r)} for r in ranked[:limit]]
    asked = fmt_axes({"family": problem.family, **want})
    if not records:
        msg = "no variants are published on this server yet"
    elif missing:
        msg = (f"no variant for {asked}: no published variant has "
               + ", ".join(f"{k}={v!r} (available: {available[k]})" for k, v in missing.items()))
    else:
        msg = (f"no variant for {asked}: each value exists, but not in this combination; "
               f"nearest: {[n['variant'] for n in nearest[:3]]}")
    return {"error": "no_variant", "message": msg, "missing": missing, "available": available, "nearest": nearest}
