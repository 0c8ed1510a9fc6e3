"""Choosing the variant for a problem, and explaining the choice (or why there is none).

Exact axes must match (a cubin compiled for one head_dim cannot run another); the
performance axes (pack_gqa, split_kv, tiles) are preferences scored from the problem's
shape, with every decision written into `reasons`.
"""

from __future__ import annotations

Record = dict  # a registry record (registry.store.record)

EXACT_AXES = ("family", "arch", "dtype", "head_dim", "head_dim_v", "causal", "varlen", "paged_kv",
              "softcap", "local", "learnable_sink")
# Exact axes a record or a problem may leave out: they mean False (plain attention).
_FALSE_UNLESS_GIVEN = ("varlen", "paged_kv", "softcap", "local", "learnable_sink")
SM_COUNT = {"sm_90a": 132, "sm_100a": 148}  # H100/H200 SXM, B200: enough to judge "fills the GPU"


def _axis(rec: Record, axis: str):
    if axis == "family":
        return rec["family"]
    if axis == "head_dim_v":                    # None: V as wide as Q and K (left out or equal)
        dv = rec["axes"].get(axis, rec["axes"].get("head_dim"))
        return None if dv == rec["axes"].get("head_dim") else dv
    return rec["axes"].get(axis, False if axis in _FALSE_UNLESS_GIVEN else None)


def _given(problem: dict, axis: str):
    if axis == "head_dim_v":                    # as _axis: None unless V has a head dim of its own
        dv = problem.get(axis) or problem["head_dim"]
        return None if dv == problem["head_dim"] else dv
    return problem.get(axis, False) if axis in _FALSE_UNLESS_GIVEN else problem[axis]


def exact_values(problem: dict) -> dict:
    return {a: _given(problem, a) for a in EXACT_AXES}


def choose(problem: dict, records: list[Record]) -> tuple[Record | None, list[str], int]:
    want = exact_values(problem)
    fits = [r for r in records if all(_axis(r, a) == v for a, v in want.items())]
    if not fits:
        return None, [], 0
    reasons = ["matches " + ", ".join(f"{a}={v}" for a, v in want.items())]
    hq, hkv = problem["heads_q"], problem["heads_kv"]
    gqa = hq != hkv
    sms = SM_COUNT.get(problem["arch"], 132)

    def score(r: Record):
        tile_m = r["axes"].get("tile_m") or 128
        blocks = problem["batch"] * (hkv if r["axes"].get("pack_gqa") else hq) * -(-problem["seqlen_q"] // tile_m)
        want_split = blocks < sms and problem["seqlen_k"] >= 8 * (r["axes"].get("tile_n") or 128)
        return (
            bool(r["axes"].get("pack_gqa", False)) != gqa,          # pack GQA heads iff heads_q != heads_kv
            bool(r["axes"].get("split_kv", False)) != want_split,   # split K/V only when the grid underfills
            abs(tile_m - min(problem["seqlen_q"], 128)),          # no big tiles for tiny queries
            r["name"],                                              # deterministic tie-break
        ), want_split, blocks

    scored = sorted(((score(r), r) for r in fits), key=lambda t: t[0][0])
    (key, want_split, blocks), best = scored[0]
    if len(fits) > 1:
        reasons.append(f"{len(fits)} variants fit; ranked by pack_gqa, split_kv and tile size")
    reasons.append(f"pack_gqa={best['axes'].get('pack_gqa', False)}: heads_q={hq}, heads_kv={hkv} "
                   f"({'grouped-query' if gqa else 'one K/V head per query head'})")
    reasons.append(f"split_kv={best['axes'].get('split_kv', False)}: {blocks} thread blocks for {sms} SMs, "
                   f"seqlen_k={problem['seqlen_k']} ({'split wanted' if want_split else 'no split wanted'})")
    return best, reasons, len(fits)


def explain_missing(problem: dict, records: list[Record], limit: int = 5) -> dict:
    """For a 404: which requested axis values no variant has, and the nearest variants."""
    want = exact_values(problem)
    pool = [r for r in records if r["family"] == problem["family"]] or records
    missing, available = {}, {}
    for a, v in want.items():
        values = {_axis(r, a) for r in (records if a == "family" else pool)}
        if v not in values:
            missing[a] = v
            available[a] = sorted(values, key=lambda x: (str(type(x)), x))
    ranked = sorted(pool, key=lambda r: (sum(_axis(r, a) != v for a, v in want.items()), r["name"]))
    nearest = [{"variant": r["name"], "differs": {a: _axis(r, a) for a, v in want.items() if _axis(r, a) != v}}
               for r in ranked[:limit]]
    asked = ", ".join(f"{a}={v}" for a, v in want.items() if not (a == "head_dim_v" and v is None))
    if not records:
        msg = "no variants are published on this server yet"
    elif missing:
        msg = (f"no variant for {asked}: no published variant has "
               + ", ".join(f"{a}={v} (available: {available[a]})" for a, v in missing.items()))
    else:
        msg = (f"no variant for {asked}: each value exists, but not in this combination; "
               f"nearest: {[n['variant'] for n in nearest[:3]]}")
    return {"error": "no_variant", "message": msg, "missing": missing, "available": available,
            "nearest": nearest}
