"""The performance grid on the device: every cell x every backend, in one process.

Per cell: random inputs (never zeros), then per backend one checked first call, warm-up and
a time-bounded run of CUDA-event timings (timing.time_cuda). Ours' output is checked for
NaN (poisoned first) and compared with cuDNN's where both ran: a fast wrong kernel must not
pass as fast. A backend that fails records None and the reason.
"""

from __future__ import annotations

import math

from .anchors import ANCHORS, BACKENDS, Unavailable, first_line, output_of
from .correctness import _is_sticky
from .flops import gbps, tflops
from .timing import interleaved_timer, median, rounds_of, time_cuda

# Timing rounds per cell: the backends' order rotates a step a round, so drift within a cell is shared.
ROUNDS = 3

CROSS_CHECK_TOL = 1e-2  # ours vs cuDNN, both rounded to bf16: a few 1e-3 is normal


def empty_record(cell, backends=BACKENDS) -> dict:
    rec = cell.as_record()
    for b in backends:
        rec[b] = None
    rec.update(ratio=None, best_anchor=None, ms={}, iters={}, pct_matmul={}, gbps={},
               reasons={}, variant=None, ours_vs_cudnn=None, ours_host_us=None, layouts={}, flags=[])
    return rec


def finish_record(rec: dict, matmul_tflops: float | None) -> dict:
    """Fill tflops-derived fields: % of the matmul ceiling, best anchor, ratio."""
    for b, ms in rec["ms"].items():
        if matmul_tflops and rec.get(b) is not None:
            rec["pct_matmul"][b] = 100.0 * rec[b] / matmul_tflops
    best = best_anchor(rec)
    if best is not None:
        rec["best_anchor"] = best
        if rec.get("ours") is not None:
            rec["ratio"] = rec["ours"] / rec[best]
    return rec


def best_anchor(rec: dict) -> str | None:
    vals = [(rec[a], a) for a in ANCHORS if rec.get(a) is not None]
    return max(vals)[1] if vals else None


def run_grid(cells, backends: dict, unavailable: dict, matmul_tflops, *, budget_s=0.3,
             seed: int = 0, log=print, stop=None, on_record=None, interleaved: bool = False) -> list[dict]:
    """One record per cell; `stop()` true leaves the remaining cells unrun (with the reason);
    `on_record(records)` is called after each cell (the CLI checkpoints the files there).
    `interleaved`: each round times the backends' calls interleaved (time_interleaved) instead
    of in turns (the CLI's default; check24/d1 on an H100: rounds within ~1%, where turns had
    ranged 0.86-1.12 on the long cells in check23/c2)."""
    import torch

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    records = []
    for ci, cell in enumerate(cells):
        rec = empty_record(cell)
        for b, why in unavailable.items():
            rec["reasons"][b] = why
        if stop is not None and stop():
            rec["reasons"]["all"] = "not run: the run's --deadline passed"
            records.append(rec)
            continue
        if cell.dtype not in tdt:
            rec["reasons"]["all"] = f"dtype {cell.dtype} not timed by this harness"
            records.append(rec)
            continue
        g = torch.Generator(device="cuda").manual_seed(seed * 7919 + ci)
        dt = tdt[cell.dtype]
        q = torch.randn(cell.batch, cell.seqlen_q, cell.heads, cell.head_dim, device="cuda",
                        dtype=dt, generator=g)
        k = torch.randn(cell.batch, cell.seqlen_k, cell.heads_kv, cell.head_dim, device="cuda",
                        dtype=dt, generator=g)
        v = torch.randn_like(k)
        outs, timed = {}, {}
        for name, be in backends.items():
            try:
                fn, out = be.prepare(cell, q, k, v)
                with be.context():
                    if name == "ours":
                        out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    if name == "ours":
                        rec["variant"] = be.last_variant()
                        nans = int(torch.isnan(out).sum().item())
                        if nans:
                            rec["flags"].append(f"ours left {nans} NaN in O")
                    outs[name] = output_of(name, out)
                    if isinstance(out, dict) and out.get("layout"):
                        rec["layouts"][name] = out["layout"]
            except Unavailable as e:
                rec["reasons"][name] = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - a failure is a result, unless it is sticky
                if _is_sticky(e):
                    raise
                rec["reasons"][name] = first_line(e)
                continue
            timed[name] = (be, fn)
            if name == "ours":
                try:
                    rec["ours_host_us"] = be.host_us(cell, q, k, v, outs["ours"])
                except Exception as e:  # noqa: BLE001 - informational
                    if _is_sticky(e):
                        raise
                    rec["reasons"]["ours_host_us"] = first_line(e)
        samples = (time_rounds_interleaved if interleaved else time_rounds)(timed, rec, budget_s)
        for name, ts in samples.items():
            if not ts or name in rec["reasons"]:
                continue
            ms = median([t.median_ms for t in ts])
            rec["ms"][name] = ms
            rec["iters"][name] = sum(t.iters for t in ts)
            rec[name] = tflops(cell.flops, ms)
            rec["gbps"][name] = gbps(cell.bytes, ms)
        if outs.get("ours") is not None and outs.get("cudnn") is not None:
            a, b = outs["ours"].float(), outs["cudnn"].float()
            ref = float(torch.linalg.vector_norm(b).item())
            err = float(torch.linalg.vector_norm(a - b).item()) / ref if ref else math.nan
            rec["ours_vs_cudnn"] = err
            if not (err <= CROSS_CHECK_TOL):
                rec["flags"].append(f"ours differs from cuDNN: rel {err:.3g}")
        finish_record(rec, matmul_tflops)
        log(one_line(rec))
        del q, k, v, outs
        records.append(rec)
        if on_record is not None:
            on_record(records)
    return records


def time_rounds(timed: dict, rec: dict, budget_s: float) -> dict:
    """Backends take turns (each one's calls in a row, then the next's), the order rotating a
    step a round so drift within a cell falls on all of them alike. name -> its rounds'
    Timings; a backend that fails is named in rec["reasons"] and has none."""
    def timer(group):
        out = {}
        for n, fn in group.items():
            with timed[n][0].context():
                out[n] = time_cuda(fn, budget_s=budget_s / ROUNDS)
        return out

    return _rounds(timer, timed, rec)


def time_rounds_interleaved(timed: dict, rec: dict, budget_s: float) -> dict:
    """time_rounds with each round's calls interleaved (A B C A B C ..., time_interleaved): a
    clock shift within a round hits every backend alike."""
    # budget_s is per backend (--time-budget), as in turns.
    return _rounds(interleaved_timer({n: be.context for n, (be, _) in timed.items()}, budget_s=budget_s / ROUNDS),
                   timed, rec)


def _rounds(timer, timed: dict, rec: dict) -> dict:
    """timing.rounds_of over the cell's backends, each failure's first line in rec["reasons"]."""
    samples, errors = rounds_of(timer, {n: fn for n, (_, fn) in timed.items()}, ROUNDS)
    for name, e in errors.items():
        rec["reasons"][name] = first_line(e)
    return samples


def one_line(rec: dict) -> str:
    def f(x):
        return f"{x:6.1f}" if x is not None else "     -"
    r = f"{rec['ratio']:.2f}" if rec.get("ratio") is not None else "-"
    flags = ("  !! " + "; ".join(rec["flags"])) if rec.get("flags") else ""
    return (f"  {rec['id']:<34} ours {f(rec.get('ours'))}  cudnn {f(rec.get('cudnn'))}  "
            f"flash2 {f(rec.get('flash2'))}  fa4 {f(rec.get('fa4'))}  ratio {r}{flags}")
