"""Decode at the HBM rate: split counts and decode-form candidates beside the anchors.

    PYTHONPATH=. python3 -m cubinforge.bench.decode_ab                 # shipped forms, forced splits
    PYTHONPATH=. python3 -m cubinforge.bench.decode_ab --ab-home .cubinforge-ab-decode-hd128
    PYTHONPATH=. python3 -m cubinforge.bench.decode_ab --head-dim 64 --ab-home .cubinforge-ab-decode-hd64
    python -m cubinforge.bench.decode_ab --plan                        # the geometry table, no GPU

Cells: the bf16 `bench --decode` cells of one head dim (--head-dim, 128 by default;
grid.build_grid: q1/q16/q64 x k8192/k32768, causal and not, hidden 2048 in heads, batch *
seqlen_k = 128k), and at hd128 inference.py's speculative and GQA decode (b32 x 8192 keys,
4 x 32/8 and 1 x 64/8 heads, causal). Per cell, in one process:
- `route`: flash_attn_func as the grid times it (bench.anchors.Ours, the dispatcher's choice:
  the dense persistent kernel where one split fills the SMs, else the split-KV forms);
- `s=N`: the shipped decode forms (flash_attn_with_kvcache's prepared call on the dense k/v)
  with num_splits forced to N (0 = the decode_plan heuristic);
- `<label> s=N`: each candidate of an A/B home (bench.ab build --experiments decode-hd128),
  alone with the default registry's combine, at the --ab-splits counts;
- cuDNN, FA2 (torch SDPA) and FA4 (flash_attn.cute), as bench.anchors prepares them.
Every ours entry first runs once on NaN-poisoned O and LSE and is checked against the float32
reference (bench.reference.attention_torch; bench.correctness.judge: rel err <= 2.5e-3, LSE
<= 1e-3, nothing left unwritten); one that fails is reported and not timed. Then all entries
are timed in rounds of interleaved calls (bench.timing.interleaved_rounds), median of the rounds.
Figures: ms, TB/s of K+V read (inference.py's measure) and ours / best anchor (time ratio).
Each forward kernel's resident CTAs per SM comes from the driver's occupancy query.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback

from .grid import Cell, build_grid

SPLITS = (0, 1, 2, 3, 4)
AB_SPLITS = (0, 1, 2)
# inference.py's spec / GQA decode cells, as grid cells (bf16, hd128, causal).
EXTRA_CELLS = (
    Cell(dtype="bf16", head_dim=128, causal=True, batch=32, heads=32, heads_kv=8, seqlen_q=4, seqlen_k=8192),
    Cell(dtype="bf16", head_dim=128, causal=True, batch=32, heads=64, heads_kv=8, seqlen_q=1, seqlen_k=8192),
)
H200_SMS = 132


def decode_cells(patterns=None, head_dim: int = 128) -> list[Cell]:
    """The bf16 --decode cells of one head dim (no prefill cells), and at hd128 the spec / GQA cells."""
    from .grid import filter_cells

    extra = [c for c in EXTRA_CELLS if c.head_dim == head_dim]
    cells = build_grid(dtypes=("bf16",), head_dims=(head_dim,), seqlens=(), decode=True) + extra
    return filter_cells(cells, patterns)


def kv_bytes(cell: Cell) -> int:
    """K and V bytes one call reads (2-byte elements), inference.py's TB/s measure."""
    return 2 * cell.batch * cell.seqlen_k * cell.heads_kv * cell.head_dim * 2


def geometry(cell: Cell, splits: int, sm_count: int = H200_SMS, tile_m: int = 64, tile_n: int = 128,
             ctas_per_sm: int = 1) -> dict:
    """A decode form's launch for this cell: tiles (pack-GQA rows), CTAs, waves over the SMs'
    CTA slots, the last wave's fill, key blocks per CTA, and the combine's fp32 partial bytes
    (written and read back) as a fraction of the K/V bytes. ``splits`` 0: the heuristic."""
    from cubinforge.runtime.decode_plan import plan_decode

    # kvcache._pick plans splits over the SMs whatever a form's CTAs an SM (check7: a two-CTA
    # form split over its 264 slots took 4 splits at 32k keys and lost to 2); waves count slots.
    slots = sm_count * ctas_per_sm
    plan = plan_decode(cell.batch, cell.seqlen_q, cell.heads, cell.heads_kv, cell.seqlen_k, sm_count, tile_m, tile_n,
                       num_splits=splits)
    s = plan.num_splits
    ctas = plan.tiles * s
    waves = ctas / slots
    full = math.ceil(waves)
    partial = 0 if s == 1 else 2 * s * cell.batch * cell.seqlen_q * cell.heads * cell.head_dim * 4
    return {"splits": s, "pack_gqa": plan.pack_gqa, "tiles": plan.tiles, "ctas": ctas, "slots": slots,
            "waves": round(waves, 3), "wave_efficiency": round(waves / full, 3),
            "last_wave_ctas": ctas - (full - 1) * slots, "blocks_per_cta": -(-plan.n_blocks // s),
            "kv_mib_per_cta": round(kv_bytes(cell) / ctas / 2**20, 2),
            "combine_fraction": round(partial / kv_bytes(cell), 5)}


def plan_table(cells, splits=SPLITS, sm_count: int = H200_SMS, forms=((64, 128, 1), (64, 64, 1), (64, 64, 2))) -> str:
    """The geometry of each cell at each split count, for each (tile_m, tile_n, CTAs an SM)."""
    lines = [f"{'cell':36s} {'form':12s} {'s':>2s} {'tiles':>5s} {'CTAs':>5s} {'waves':>6s} {'eff':>5s} "
             f"{'last':>5s} {'blk/CTA':>7s} {'MiB/CTA':>7s} {'combine':>7s}"]
    for cell in cells:
        for tm, tn, per in forms:
            for s in splits:
                g = geometry(cell, s, sm_count, tm, tn, per)
                lines.append(f"{cell.id:36s} {f'{tm}x{tn}x{per}':12s} {('a' + str(g['splits'])) if s == 0 else s:>2} "
                             f"{g['tiles']:5d} {g['ctas']:5d} {g['waves']:6.2f} {g['wave_efficiency']:5.2f} "
                             f"{g['last_wave_ctas']:5d} {g['blocks_per_cta']:7d} {g['kv_mib_per_cta']:7.2f} "
                             f"{100 * g['combine_fraction']:6.2f}%")
    return "\n".join(lines)


def candidates(home) -> dict[str, list[str]]:
    """{label: its variant names} of an A/B home's decode forms (bf16/fp16, not varlen)."""
    from pathlib import Path

    home = Path(home)
    out: dict[str, list[str]] = {}
    for f in sorted((home / "manifests").glob("*.json")):
        m = json.loads(f.read_text())
        ax = m["axes"]
        if ax.get("dtype") == "e4m3" or ax.get("varlen") or not (ax.get("split_kv") or ax.get("pack_gqa")):
            continue
        name = m["variant"]
        out.setdefault(name.split("+", 1)[-1], []).append(name)
    return out


def occupancy(prepared) -> list[int]:
    """Resident CTAs per SM of each launch in a prepared call (the driver's occupancy query on
    the function as loaded: its registers, block and dynamic shared memory)."""
    from cuda.bindings import driver as d

    per = []
    for kernel, _ in prepared.launches:
        fns = list(getattr(kernel, "_functions", {}).values())
        if not fns:
            per.append(-1)
            continue
        c = kernel.contract
        try:  # informational: a binding that refuses the handle's type must not fail the entry
            err, n = d.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                fns[0].handle, int(c.block[0] * c.block[1] * c.block[2]), int(c.dynamic_smem_bytes))
            per.append(int(n) if int(err) == 0 else -1)
        except Exception:  # noqa: BLE001
            per.append(-1)
    return per


def run(cells, splits, home, ab_splits, iters: int, log=print, on_cell=None) -> list[dict]:
    """One record per cell (see the module's docstring); ``on_cell(records)`` after each."""
    import torch

    from cubinforge.runtime import LocalSource, flash_attn_func, prepare_kvcache

    from . import timing
    from .anchors import ANCHORS, make_backends
    from .correctness import _is_sticky, errors_torch, judge
    from .inference import _WithCombine
    from .reference import attention_torch

    backends, missing = make_backends(("ours", *ANCHORS), log=log)
    labels = candidates(home) if home else {}
    shipped = LocalSource()
    base = LocalSource(home) if home else None
    keep = []  # pinned sources stay alive: the runtime caches by id()
    stream = torch.cuda.current_stream().cuda_stream
    records = []
    for ci, cell in enumerate(cells):
        g = torch.Generator(device="cuda").manual_seed(1000 + ci)
        bf = dict(device="cuda", dtype=torch.bfloat16)
        q = torch.randn(cell.batch, cell.seqlen_q, cell.heads, cell.head_dim, generator=g, **bf)
        k = torch.randn(cell.batch, cell.seqlen_k, cell.heads_kv, cell.head_dim, generator=g, **bf)
        v = torch.randn(cell.batch, cell.seqlen_k, cell.heads_kv, cell.head_dim, generator=g, **bf)
        ref_o, ref_lse = attention_torch(q, k, v, cell.causal)
        rec = {"cell": cell.id, **cell.as_record(), "kv_bytes": kv_bytes(cell), "entries": {}, "missing": missing}
        fns = {}  # entry -> (context, fn)

        def gate(key, o, lse, extra):
            errs = errors_torch(o, ref_o, lse, ref_lse)
            why = judge(errs["rel_err"], errs["lse_err"], errs["unwritten"])
            rec["entries"][key] = {**extra, **errs, "ok": not why, **({"failures": why} if why else {})}
            return not why

        def poisoned():
            return (torch.full_like(q, float("nan")),
                    torch.full((cell.batch, cell.heads, cell.seqlen_q), float("nan"), dtype=torch.float32, device="cuda"))

        # flash_attn_func as the grid runs it: checked on poisoned O and LSE, timed as prepared.
        if "ours" in backends:
            try:
                o, lse = poisoned()
                flash_attn_func(q, k, v, causal=cell.causal, out=o, lse=lse, stream=stream)
                torch.cuda.synchronize()
                be = backends["ours"]
                if gate("route", o, lse, {"variant": be.last_variant()}):
                    fns["route"] = (be.context, be.prepare(cell, q, k, v)[0])
            except Exception as e:  # noqa: BLE001 - a failure is a result
                rec["entries"]["route"] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
                if _is_sticky(e):
                    raise

        def check_anchors():
            for name in ANCHORS:
                if name not in backends:
                    continue
                be = backends[name]
                try:
                    with be.context():
                        fn = be.prepare(cell, q, k, v)[0]
                        fn()
                        torch.cuda.synchronize()
                    fns[name] = (be.context, fn)
                    rec["entries"][name] = {"ok": True}
                except Exception as e:  # noqa: BLE001
                    rec["entries"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        # The shipped forms at each split count, then the anchors, then the candidates (last:
        # a candidate that breaks the context leaves the shipped and anchor checks done).
        ours_sets = [(f"s={s}", None, s) for s in splits]
        for label, names in labels.items():
            src = _WithCombine(base, names, shipped)
            keep.append(src)
            ours_sets += [(f"{label} s={s}", src, s) for s in ab_splits]
        for i, (key, src, s) in enumerate(ours_sets):
            if i == len(splits):
                check_anchors()
            try:
                o, lse = poisoned()
                p = prepare_kvcache(q, k, v, causal=cell.causal, num_splits=s, out=o, lse=lse, stream=stream,
                                    source=src)
                p.run(stream)
                torch.cuda.synchronize()
                extra = {"splits": p.plan.num_splits, "pack_gqa": p.plan.pack_gqa, "kernels": p.kernels,
                         "ctas_per_sm": occupancy(p)}
                if gate(key, o, lse, extra):
                    fns[key] = (None, (lambda p=p: p.run(stream)))
            except Exception as e:  # noqa: BLE001
                rec["entries"][key] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
                traceback.print_exc(limit=2, file=sys.stderr)
                if _is_sticky(e):  # the context is gone: nothing after this can run
                    log(f"{cell.id} {key}: {rec['entries'][key]['error']} (sticky: stopping)")
                    records.append(rec)
                    return records
        if len(ours_sets) <= len(splits):
            check_anchors()
        samples, errors = timing.interleaved_rounds(
            {key: fn for key, (_, fn) in fns.items()}, 3, {key: ctx for key, (ctx, _) in fns.items() if ctx is not None},
            min_iters=iters, max_iters=iters, budget_s=0.05)
        for key, e in errors.items():
            rec["entries"][key].update(ok=False, error=f"{type(e).__name__}: {e}"[:300])
        for key, ms in samples.items():
            rec["entries"][key].update(ms=ms, kv_TBps=kv_bytes(cell) / (ms * 1e-3) / 1e12,
                                       tflops=cell.flops / (ms * 1e-3) / 1e12)
        anchors = {a: rec["entries"][a]["ms"] for a in ANCHORS if "ms" in rec["entries"].get(a, {})}
        if anchors:
            best = min(anchors, key=anchors.get)
            rec["best_anchor"], rec["best_anchor_ms"] = best, anchors[best]
            for key, e in rec["entries"].items():
                if "ms" in e:
                    e["vs_best_anchor"] = anchors[best] / e["ms"]
        log(cell_table(rec))
        records.append(rec)
        if on_cell is not None:
            on_cell(records)
        del q, k, v, ref_o, ref_lse
        torch.cuda.empty_cache()
    return records


def cell_table(rec: dict) -> str:
    lines = [f"{rec['cell']}  (best anchor {rec.get('best_anchor', '-')})",
             f"  {'entry':34s} {'ms':>8s} {'TB/s':>6s} {'/best':>6s} {'splits':>6s} {'CTA/SM':>7s}  ok / kernels"]
    order = sorted(rec["entries"].items(), key=lambda kv: -kv[1].get("vs_best_anchor", 0))
    for key, e in order:
        ms = f"{e['ms']:.4f}" if "ms" in e else "-"
        tb = f"{e['kv_TBps']:.3f}" if "kv_TBps" in e else "-"
        vs = f"{e['vs_best_anchor']:.3f}" if "vs_best_anchor" in e else "-"
        ok = "ok" if e.get("ok") else "FAIL " + "; ".join(e.get("failures", [])) + e.get("error", "")
        what = e.get("variant") or ",".join(e.get("kernels", []))
        print_ctas = ",".join(str(c) for c in e.get("ctas_per_sm", [])) or "-"
        lines.append(f"  {key:34s} {ms:>8s} {tb:>6s} {vs:>6s} {str(e.get('splits', '-')):>6s} {print_ctas:>7s}  "
                     f"{ok} {what}")
    return "\n".join(lines)


def summary(records) -> str:
    """Per cell: the shipped route's time ratio to the best anchor, the best forced split of
    the shipped forms and the best candidate (each with its ratio): the promotion figures."""
    def best(entries, pick):
        got = [(e["vs_best_anchor"], k) for k, e in entries.items() if pick(k) and "vs_best_anchor" in e]
        return max(got) if got else (None, "-")

    fmt = lambda r: f"{r:.3f}" if r is not None else "-"  # noqa: E731
    lines = [f"{'cell':36s} {'anchor':>6s} {'TB/s':>6s} {'route':>6s} {'best split':>16s} {'ratio':>6s} "
             f"{'best candidate':>34s} {'ratio':>6s}"]
    for r in records:
        en = r["entries"]
        a = r.get("best_anchor")
        tb = en.get(a, {}).get("kv_TBps")
        route = en.get("route", {}).get("vs_best_anchor")
        sr, sk = best(en, lambda k: k.startswith("s="))
        cr, ck = best(en, lambda k: " s=" in k)
        lines.append(f"{r['cell']:36s} {a or '-':>6s} {f'{tb:.3f}' if tb else '-':>6s} {fmt(route):>6s} {sk:>16s} "
                     f"{fmt(sr):>6s} {ck:>34s} {fmt(cr):>6s}")
    return "\n".join(lines)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", help="comma list of globs / substrings on cell ids (default: all)")
    ap.add_argument("--head-dim", type=int, default=128, help="the --decode cells of this head dim (64, 128, 256)")
    ap.add_argument("--splits", default=",".join(map(str, SPLITS)), help="forced split counts of the shipped "
                    "forms (0 = auto)")
    ap.add_argument("--ab-home", help="an A/B home of decode forms (bench.ab build --experiments decode-hd128 / "
                    "decode-hd64)")
    ap.add_argument("--ab-splits", default=",".join(map(str, AB_SPLITS)), help="split counts of each candidate")
    ap.add_argument("--iters", type=int, default=20, help="timed launches per round")
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--plan", action="store_true", help="print the geometry table (no GPU) and exit")
    args = ap.parse_args(argv)
    cells = decode_cells(args.cells.split(",") if args.cells else None, args.head_dim)
    if args.plan:
        print(plan_table(cells, _ints(args.splits)))
        return 0
    def save(records):
        if args.json:
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)

    records = run(cells, _ints(args.splits), args.ab_home, _ints(args.ab_splits), args.iters, on_cell=save)
    save(records)
    print()
    print(summary(records))
    failed = [(r["cell"], k) for r in records for k, e in r["entries"].items() if not e.get("ok")]
    for cell, key in failed:
        print(f"not ok: {cell} {key}")
    return 1 if any(k not in ("cudnn", "flash2", "fa4") for _, k in failed) else 0


if __name__ == "__main__":
    sys.exit(main())
