"""The model variants on the GPU: ours against FA4 (flash-attn-4, where importable) on issue
12's cases, timed the way shared/measurements/2026-12-01-h200/anchor_features.py timed FA4 (each
call after its own GPU sleep: bench.timing.time_isolated_each), with ours' and FA4's calls interleaved.

    PYTHONPATH=. python3 bench/model_variants.py [--out results.json] [--iters 15]
    PYTHONPATH=. python3 bench/model_variants.py --ab-home .cubinforge-ab [--out ab.json]

`--ab-home` times the model-variant candidates of `bench.ab build --experiments model-variants`
instead: each pinned to itself, on its own case (window, (192, 128), sink), after a check
against a float32 reference on poisoned outputs, beside the default-set variant and FA4 in
rounds of interleaved calls (bench.timing.timed_rounds).

(FA4 needs PYTHONPATH to hold its site folder, device-notes.md.) Each case runs in its own
try/except, so one that fails (a variant not built, FA4 missing) leaves the others; a table
comes at the end. TFLOPS count the visible (query, key) pairs only: 4 * d_avg * pairs per
head, with d_avg = (d + dv) / 2. Ours runs through flash_attn_func with out= and lse= given
(no allocation), on torch's current stream.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def visible_pairs(sq: int, sk: int, causal: bool, window=(-1, -1)) -> int:
    """(query, key) pairs one head sees: bottom-right aligned, -1 unbounded."""
    left, right = window
    if causal:
        right = 0
    total = 0
    for i in range(sq):
        hi = sk - 1 if right < 0 else min(sk - 1, i + sk - sq + right)
        lo = 0 if left < 0 else max(0, i + sk - sq - left)
        total += max(0, hi - lo + 1)
    return total


# The A/B's case per model axis: (shape (b, sq, sk, hq, hkv, d, dv) with d/dv from the
# manifest, flash_attn_func keywords), the same cells as the main table's rows.
AB_CASES = {
    "local": ((1, 16384, 16384, 16, 16), dict(causal=True, window_size=(4096, 0))),
    "head_dim_v": ((2, 8192, 8192, 16, 16), dict(causal=True)),
    "learnable_sink": ((2, 8192, 8192, 16, 16), dict(causal=True, learnable_sink=True)),
}
# The targets' own yardsticks, timed once in the same process: a window against our causal
# cell at 16k, a sink against the same cell without it.
AB_REFS = {"local": (AB_CASES["local"][0], 128, dict(causal=True)),
           "learnable_sink": (AB_CASES["learnable_sink"][0], 128, dict(causal=True))}
# The correctness check's shapes, with a window that cuts: not tile multiples, sq < sk, GQA 4;
# then more tiles (544) than SMs, so a persistent CTA walks several tiles.
AB_CHECK = ([(1, 1000, 1300, 8, 2), (1, 2100, 2300, 32, 4)], dict(window_size=(300, 0)))


def reference(q, k, v, causal, window=(-1, -1), sink=None, softcap=0.0):
    """float32 O and natural-log LSE on the GPU, bottom-right masks, FA4's sink, the softcap
    c * tanh(s / c) on the scaled scores."""
    import torch
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    qf = q.float().permute(0, 2, 1, 3)
    kf = k.float().repeat_interleave(g, dim=2).permute(0, 2, 3, 1)
    vf = v.float().repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
    s = torch.matmul(qf, kf) / d ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    left, right = window
    if causal:
        right = 0
    i = torch.arange(sq, device=q.device)[:, None] + sk - sq
    j = torch.arange(sk, device=q.device)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = s.masked_fill(~keep, float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.float()[None, :, None, None].expand(b, hq, sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    if sink is not None:
        p = p[..., :-1]
    o = torch.matmul(p, vf).permute(0, 2, 1, 3)
    return o, lse


def ab_main(home: Path, iters: int, out: str | None) -> int:
    """Time each model-variant candidate in `home` (bench.ab's registry) on its case."""
    import torch
    from cubinforge.runtime import LocalSource, flash_attn_func, last_launch
    from bench.anchors import _PinnedSource
    from bench.timing import time_isolated, time_isolated_each, timed_rounds

    try:
        from flash_attn.cute import flash_attn_func as fa4
    except Exception as e:              # not installed, or its DSL missing
        fa4 = None
        print(f"FA4 not timed: {type(e).__name__}: {e}", flush=True)
    dev, dt = "cuda", torch.bfloat16
    stream = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    base = LocalSource(home)
    manifests = {n: json.loads((home / "manifests" / f"{n}.json").read_text()) for n in base.list()}
    rows, failed, pins = [], 0, []

    def kind_of(ax):
        if ax.get("local"):
            return "local"
        if ax.get("learnable_sink"):
            return "learnable_sink"
        if ax.get("head_dim_v", ax["head_dim"]) != ax["head_dim"]:
            return "head_dim_v"
        return None

    def make_inputs(shape, d, dv, kw):
        b, sq, sk, hq, hkv = shape
        q = torch.randn(b, sq, hq, d, device=dev, dtype=dt)
        k = torch.randn(b, sk, hkv, d, device=dev, dtype=dt)
        v = torch.randn(b, sk, hkv, dv, device=dev, dtype=dt)
        kw = dict(kw)
        if kw.pop("learnable_sink", False):
            kw["learnable_sink"] = torch.randn(hq, device=dev, dtype=torch.float32) * 2
        return q, k, v, kw

    def call(q, k, v, kw, source=None):
        o = torch.full((*q.shape[:3], v.shape[3]), float("nan"), device=dev, dtype=dt)
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=dev)
        extra = {"source": source} if source is not None else {}
        return (lambda: flash_attn_func(q, k, v, out=o, lse=lse, stream=stream(), **kw, **extra)), o, lse

    refs = {}
    for kind, (shape, d, kw) in AB_REFS.items():
        q, k, v, kw = make_inputs(shape, d, d, kw)
        pairs = visible_pairs(shape[1], shape[2], True)
        s = time_isolated(call(q, k, v, kw)[0], iters=iters).median_ms / 1e3
        refs[kind] = {"tflops": round(2 * shape[0] * shape[3] * pairs * 2 * d / s / 1e12, 1),
                      "variant": last_launch().variant}
        print(json.dumps({f"reference for {kind}": refs[kind]}), flush=True)
        del q, k, v

    for name, m in manifests.items():
        kind = kind_of(m["axes"])
        if kind is None:
            continue
        d, dv = m["axes"]["head_dim"], m["axes"].get("head_dim_v", m["axes"]["head_dim"])
        pin = _PinnedSource(base, name)
        pins.append(pin)  # kept alive: the runtime caches by id()
        rec = {"variant": name, "kind": kind}
        # Correctness first: poisoned outputs against the float32 reference.
        try:
            shapes, ckw = AB_CHECK
            ok, rel, lse_err = True, 0.0, 0.0
            for shape in shapes:
                kw = {"causal": m["axes"]["causal"], **AB_CASES[kind][1]}
                if kind == "local":
                    kw = {"causal": False, **ckw}
                q, k, v, kw = make_inputs(shape, d, dv, kw)
                fn, o, lse = call(q, k, v, kw, pin)
                fn()
                torch.cuda.synchronize()
                ref_o, ref_lse = reference(q, k, v, kw.get("causal", False), kw.get("window_size", (-1, -1)),
                                           kw.get("learnable_sink"))
                r_ = float((o.float() - ref_o).norm() / ref_o.norm())
                fin = torch.isfinite(ref_lse)
                l_ = float((lse[fin] - ref_lse[fin]).abs().max())
                ok = (ok and r_ <= 2.5e-3 and l_ <= 1e-3 and not bool(o.isnan().any())
                      and not bool(lse.isnan().any()) and bool((lse[~fin] == ref_lse[~fin]).all())
                      and last_launch().variant == name)
                rel, lse_err = max(rel, r_), max(lse_err, l_)
                del q, k, v, o, lse, ref_o, ref_lse
            rec.update(rel_err=rel, lse_err=lse_err, ok=ok)
        except Exception as e:
            rec.update(ok=False, error=f"check: {type(e).__name__}: {str(e)[:300]}")
        failed += not rec["ok"]
        if rec["ok"]:
            shape, kw = AB_CASES[kind]
            q, k, v, kw = make_inputs(shape, d, dv, kw)
            pairs = visible_pairs(shape[1], shape[2], kw.get("causal", False), kw.get("window_size", (-1, -1)))
            flops = 2 * shape[0] * shape[3] * pairs * (d + dv)
            fns = {"ab": call(q, k, v, kw, pin)[0], "shipped": call(q, k, v, kw)[0]}
            if fa4 is not None:
                fkw = dict(kw)
                fns["fa4"] = lambda: fa4(q, k, v, **fkw)
            ts, errors = timed_rounds(lambda group: time_isolated_each(group, iters=iters), fns)
            for b, e in errors.items():
                rec[f"{b}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            for b, ms in ts.items():
                rec[b] = round(flops / (ms * 1e-3) / 1e12, 1)
            fns["shipped"]()
            rec["shipped_variant"] = last_launch().variant
            if kind in refs and rec.get("ab"):
                rec["vs_reference"] = round(rec["ab"] / refs[kind]["tflops"], 3)
        rows.append(rec)
        print(json.dumps(rec), flush=True)

    print()
    print("| variant | case | correct | rel err | TFLOPS | shipped TFLOPS | FA4 TFLOPS | / FA4 | / shipped "
          "| / reference |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        a, sh, f = r.get("ab"), r.get("shipped"), r.get("fa4")
        print(f"| {r['variant']} | {r['kind']} | {'yes' if r['ok'] else 'NO ' + r.get('error', '')} | "
              f"{r.get('rel_err', float('nan')):.2e} | {a or '-'} | {sh or '-'} ({r.get('shipped_variant', '-')}) | "
              f"{f or '-'} | {round(a / f, 3) if a and f else '-'} | {round(a / sh, 3) if a and sh else '-'} | "
              f"{r.get('vs_reference', '-')} |")
    print(f"references: {json.dumps(refs)} (window target >= 0.95x, sink >= 0.98x)")
    if out:
        Path(out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows, "references": refs,
                                         "date": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=1))
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--ab-home", type=Path, help="time bench.ab's model-variant candidates in this registry")
    args = ap.parse_args(argv)
    if args.ab_home:
        return ab_main(args.ab_home, args.iters, args.out)

    import torch
    from cubinforge.runtime import flash_attn_func, last_launch
    from bench.timing import side_by_side, time_isolated_each

    try:
        from flash_attn.cute import flash_attn_func as fa4
    except Exception as e:              # not installed, or its DSL missing
        fa4, fa4_why = None, f"{type(e).__name__}: {e}"
    else:
        fa4_why = None
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    stream = lambda: int(torch.cuda.current_stream().cuda_stream)  # noqa: E731

    def ours(q, k, v, **kw):
        b, sq, hq, _ = q.shape
        o = torch.empty(*q.shape[:3], v.shape[3], device=dev, dtype=q.dtype)
        lse = torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
        call = lambda: flash_attn_func(q, k, v, out=o, lse=lse, stream=stream(), **kw)  # noqa: E731
        return call

    def theirs(q, k, v, **kw):
        if fa4 is None:
            raise RuntimeError(f"FA4 not importable ({fa4_why})")
        return lambda: fa4(q, k, v, **kw)

    rows, results = [], {}

    def case(name, shape, kw, target, ours_kw=None, fa4_kw=None):
        """Time one case for ours and FA4; shape = (b, sq, sk, hq, hkv, d, dv)."""
        b, sq, sk, hq, hkv, d, dv = shape
        rec = {"shape": dict(zip("b sq sk hq hkv d dv".split(), shape)), "args": {k: str(v) for k, v in kw.items()},
               "target": target}
        try:
            q = torch.randn(b, sq, hq, d, device=dev, dtype=dt)
            k = torch.randn(b, sk, hkv, d, device=dev, dtype=dt)
            v = torch.randn(b, sk, hkv, dv, device=dev, dtype=dt)
            sink = kw.pop("learnable_sink", None)
            if sink is not None:
                sink = torch.randn(hq, device=dev, dtype=torch.float32)
                kw["learnable_sink"] = sink
            pairs = visible_pairs(sq, sk, kw.get("causal", False), kw.get("window_size", (-1, -1)))
            flops = 2 * b * hq * pairs * (d + dv)
            rec["flops"] = flops
        except Exception as e:
            rec["error"] = f"inputs: {type(e).__name__}: {e}"
            results[name] = rec
            rows.append((name, rec))
            return rec
        fns = {}
        for who, make, extra in (("ours", ours, ours_kw), ("fa4", theirs, fa4_kw)):
            try:
                fns[who] = make(q, k, v, **{**kw, **(extra or {})})
            except Exception as e:
                rec[who] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        # Side by side, calls interleaved, each after its own GPU sleep (the anchors' method).
        ts, errors = side_by_side(lambda group: time_isolated_each(group, iters=args.iters), fns)
        for who, e in errors.items():
            rec[who] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        for who, t in ts.items():
            rec[who] = {"ms": round(t.median_ms, 4), "tflops": round(flops / (t.median_ms * 1e-3) / 1e12, 1)}
        if "ours" in ts:
            try:
                fns["ours"]()
                rec["ours"]["variant"] = last_launch().variant
            except Exception as e:
                rec["ours"]["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        results[name] = rec
        rows.append((name, rec))
        print(json.dumps({name: rec}), flush=True)
        return rec

    S, H, D, W = 16384, 16, 128, 4096
    big = (1, S, S, H, H, D, D)
    case("causal_hd128_s16k", big, dict(causal=True), "reference for the window and softcap cells")
    case("window4096_0_hd128_s16k", big, dict(causal=True, window_size=(W, 0)),
         ">= 1.0x FA4 (681) and >= 0.95x ours causal_hd128_s16k")
    case("softcap30_causal_hd128_s16k", big, dict(causal=True, softcap=30.0), ">= 1.5x FA4 (311)")
    case("d192_dv128_causal_b2_s8k", (2, 8192, 8192, 16, 16, 192, 128), dict(causal=True), ">= 1.0x FA4 (770)")
    case("causal_hd128_s8k", (2, 8192, 8192, 16, 16, 128, 128), dict(causal=True), "reference for the sink cell")
    case("sink_causal_hd128_s8k", (2, 8192, 8192, 16, 16, 128, 128), dict(causal=True, learnable_sink=True),
         ">= 0.98x ours causal_hd128_s8k")

    # Ratios the targets name.
    def tf(name, who="ours"):
        return results.get(name, {}).get(who, {}).get("tflops")
    ratios = {
        "window / FA4": (tf("window4096_0_hd128_s16k"), tf("window4096_0_hd128_s16k", "fa4")),
        "window / ours causal": (tf("window4096_0_hd128_s16k"), tf("causal_hd128_s16k")),
        "softcap / FA4": (tf("softcap30_causal_hd128_s16k"), tf("softcap30_causal_hd128_s16k", "fa4")),
        "d192dv128 / FA4": (tf("d192_dv128_causal_b2_s8k"), tf("d192_dv128_causal_b2_s8k", "fa4")),
        "sink / ours no sink": (tf("sink_causal_hd128_s8k"), tf("causal_hd128_s8k")),
    }
    results["ratios"] = {k: (round(a / b, 3) if a and b else None) for k, (a, b) in ratios.items()}

    print()
    print(f"| case | ours TFLOPS | ours ms | FA4 TFLOPS | FA4 ms | ours / FA4 | variant | target |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rec in rows:
        o, f = rec.get("ours", {}), rec.get("fa4", {})
        ratio = round(o["tflops"] / f["tflops"], 3) if o.get("tflops") and f.get("tflops") else "-"
        print(f"| {name} | {o.get('tflops', o.get('error', rec.get('error', '-')))} | {o.get('ms', '-')} | "
              f"{f.get('tflops', (f.get('error') or '-')[:60])} | {f.get('ms', '-')} | {ratio} | "
              f"{o.get('variant', '-')} | {rec['target']} |")
    print()
    for k, r in results["ratios"].items():
        print(f"{k}: {r}")
    results["date"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    results["gpu"] = torch.cuda.get_device_name()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
