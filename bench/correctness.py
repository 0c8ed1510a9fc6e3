"""The correctness sweep: every variant x a fixed set of shapes, against the fp32 reference.

For each case: fresh random inputs, O and LSE poisoned with NaN, one launch of ours, then
  rel_err   = ||O - O_ref|| / ||O_ref||   (float32, whole tensor)
  lse_err   = max |LSE - LSE_ref| (natural log; -inf must match -inf exactly)
  unwritten = NaNs left in O and LSE (poison not overwritten, or NaN produced).
A case fails when rel_err > REL_TOL, lse_err > LSE_TOL or unwritten > 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REL_TOL = 2.5e-3
LSE_TOL = 1e-3


@dataclass(frozen=True)
class Shape:
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    heads_kv: int
    note: str = ""

    @property
    def id(self) -> str:
        g = f"-gqa{self.heads // self.heads_kv}" if self.heads != self.heads_kv else ""
        return f"b{self.batch}-q{self.seqlen_q}-k{self.seqlen_k}-h{self.heads}{g}"


# Edge lengths (1, 17, 1000: not multiples of any tile), seqlen_q != seqlen_k both ways
# (causal with sq > sk leaves fully masked rows), GQA 2/4/8, and one tile-filling size.
SHAPES = (
    Shape(1, 1, 1, 4, 4, "single token"),
    Shape(2, 17, 17, 4, 4, "odd length"),
    Shape(1, 1000, 1000, 4, 4, "not a tile multiple"),
    Shape(2, 128, 128, 8, 8, "one tile"),
    Shape(1, 2048, 2048, 8, 8, "many tiles"),
    Shape(1, 1, 1000, 8, 8, "decode"),
    Shape(2, 17, 300, 4, 4, "sq < sk"),
    Shape(1, 64, 1000, 4, 4, "sq < sk"),
    Shape(1, 1000, 64, 4, 4, "sq > sk (masked rows if causal)"),
    Shape(2, 300, 17, 4, 4, "sq > sk"),
    Shape(1, 512, 512, 8, 4, "GQA 2"),
    Shape(2, 300, 700, 8, 2, "GQA 4"),
    Shape(1, 1000, 1000, 16, 2, "GQA 8"),
    Shape(1, 1, 4096, 16, 2, "decode, GQA 8"),
)
QUICK_SHAPES = tuple(SHAPES[i] for i in (0, 1, 2, 6, 8, 12))


def judge(rel_err, lse_err, unwritten: int, rel_tol: float = REL_TOL,
          lse_tol: float = LSE_TOL) -> list[str]:
    """The reasons a case fails; empty when it passes. NaN never passes."""
    why = []
    if rel_err is None or not (rel_err <= rel_tol):
        why.append(f"rel_err {rel_err} > {rel_tol}")
    if lse_err is None or not (lse_err <= lse_tol):
        why.append(f"lse_err {lse_err} > {lse_tol}")
    if unwritten:
        why.append(f"{unwritten} unwritten/NaN elements")
    return why


def errors_numpy(o, o_ref, lse, lse_ref) -> dict:
    """rel_err, lse_err, unwritten for host arrays (float32 views of the outputs)."""
    import numpy as np

    o = np.asarray(o, dtype=np.float32)
    o_ref = np.asarray(o_ref, dtype=np.float32)
    lse = np.asarray(lse, dtype=np.float32)
    lse_ref = np.asarray(lse_ref, dtype=np.float32)
    unwritten = int(np.isnan(o).sum() + np.isnan(lse).sum())
    ref_norm = float(np.linalg.norm(o_ref.ravel()))
    diff = float(np.linalg.norm((o - o_ref).ravel()))
    rel = diff / ref_norm if ref_norm > 0 else diff
    return {"rel_err": rel, "lse_err": _lse_err(lse, lse_ref, np), "unwritten": unwritten}


def _lse_err(lse, lse_ref, xp) -> float:
    fin = xp.isfinite(lse_ref)
    if bool((~fin & ~(lse == lse_ref)).any()):  # -inf rows must stay exactly -inf
        return math.inf
    if bool((fin & ~xp.isfinite(lse)).any()):
        return math.inf if not bool(xp.isnan(lse).any()) else math.nan
    if not bool(fin.any()):
        return 0.0
    return float(abs(lse[fin] - lse_ref[fin]).max())


def errors_torch(o, o_ref, lse, lse_ref) -> dict:
    """The same numbers for torch tensors on the GPU (reduced there, scalars back)."""
    import torch

    of = o.float()
    unwritten = int(torch.isnan(of).sum().item() + torch.isnan(lse).sum().item())
    ref_norm = float(torch.linalg.vector_norm(o_ref).item())
    diff = float(torch.linalg.vector_norm(of - o_ref).item())
    rel = diff / ref_norm if ref_norm > 0 else diff
    return {"rel_err": rel, "lse_err": _lse_err(lse.float(), lse_ref, torch),
            "unwritten": unwritten}


def case_record(variant: str, ran: str | None, shape: Shape, dtype: str, head_dim: int,
                causal: bool, errs: dict | None, error: str | None = None) -> dict:
    """One JSON record; `passed` is False with `failures` when the case fails or errored."""
    rec = {"variant": variant, "ran_variant": ran, "shape": shape.id, "note": shape.note,
           "dtype": dtype, "head_dim": head_dim, "causal": causal, "batch": shape.batch,
           "seqlen_q": shape.seqlen_q, "seqlen_k": shape.seqlen_k, "heads": shape.heads,
           "heads_kv": shape.heads_kv, "rel_err": None, "lse_err": None, "unwritten": None}
    if error is not None:
        rec.update(passed=False, failures=[error])
        return rec
    rec.update(errs)
    failures = judge(errs["rel_err"], errs["lse_err"], errs["unwritten"])
    rec.update(passed=not failures, failures=failures)
    return rec


def run_sweep(variants, ours, shapes=SHAPES, seed: int = 0, log=print) -> dict:
    """Run every variant over `shapes`; returns {"records", "unexercised", "skipped"}.

    `ours` is an anchors.Ours (it launches a chosen or selected variant and says which ran).
    """
    import torch

    from .reference import attention_torch

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    records, skipped = [], []
    ran_names, tried = set(), set()
    arch = ours.device_arch
    for vi, var in enumerate(variants):
        if var.arch != arch:
            skipped.append({"variant": var.name, "reason": f"built for {var.arch}, device is {arch}"})
            continue
        if var.dtype not in tdt:
            skipped.append({"variant": var.name, "reason": f"dtype {var.dtype} not checked here"})
            continue
        why = ours.unreachable(var)
        if why:
            skipped.append({"variant": var.name, "reason": why})
            continue
        if not ours.can_pin and var.key in {v.key for v in variants[:vi] if v.arch == arch}:
            continue  # the runtime picks one variant per key: already swept
        tried.add(var.name)
        for si, sh in enumerate(shapes):
            g = torch.Generator(device="cuda").manual_seed(seed * 1_000_003 + vi * 1009 + si)
            d, dt = var.head_dim, tdt[var.dtype]
            q = torch.randn(sh.batch, sh.seqlen_q, sh.heads, d, device="cuda", dtype=dt, generator=g)
            k = torch.randn(sh.batch, sh.seqlen_k, sh.heads_kv, d, device="cuda", dtype=dt, generator=g)
            v = torch.randn(sh.batch, sh.seqlen_k, sh.heads_kv, d, device="cuda", dtype=dt, generator=g)
            o = torch.full_like(q, float("nan"))
            lse = torch.full((sh.batch, sh.heads, sh.seqlen_q), float("nan"), device="cuda",
                             dtype=torch.float32)
            try:
                ran = ours.launch(q, k, v, var.causal, o, lse, variant=var.name)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - every failure becomes a record
                if _is_sticky(e):
                    raise
                records.append(case_record(var.name, None, sh, var.dtype, d, var.causal, None,
                                           error=f"{type(e).__name__}: {e}"))
                continue
            ran_names.add(ran or var.name)
            o_ref, lse_ref = attention_torch(q, k, v, var.causal)
            rec = case_record(var.name, ran, sh, var.dtype, d, var.causal,
                              errors_torch(o, o_ref, lse, lse_ref))
            if ran and ran != var.name:
                rec["note"] = (rec["note"] + "; " if rec["note"] else "") + f"runtime ran {ran}"
            records.append(rec)
            if not rec["passed"]:
                log(f"  FAIL {var.name} {sh.id}: {'; '.join(rec['failures'])}")
    skipped_names = {s["variant"] for s in skipped}
    unexercised = [v.name for v in variants if v.name not in ran_names | tried | skipped_names]
    return {"records": records, "unexercised": unexercised, "skipped": skipped}


def _is_sticky(e: Exception) -> bool:
    """An error after which the CUDA context is unusable (illegal address and the like)."""
    text = str(e).lower()
    # torch words an illegal address "an illegal memory access was encountered".
    return any(s in text for s in ("illegal address", "illegal_address", "illegal memory access",
                                   "illegal instruction", "misaligned address", "unspecified launch failure",
                                   "launch_failed", "hardware stack error"))


def summarize(sweep: dict) -> dict:
    recs = sweep.get("records", [])
    failed = [r for r in recs if not r.get("passed")]
    finite = lambda xs: [x for x in xs if x is not None and math.isfinite(x)]  # noqa: E731
    rel = finite(r.get("rel_err") for r in recs)
    lse = finite(r.get("lse_err") for r in recs)
    return {"cases": len(recs), "passed": len(recs) - len(failed), "failed": len(failed),
            "max_rel_err": max(rel) if rel else None, "max_lse_err": max(lse) if lse else None,
            "unexercised": list(sweep.get("unexercised", [])),
            "skipped": list(sweep.get("skipped", []))}
