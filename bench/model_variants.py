"""The model variants on the GPU: ours against FA4 (flash-attn-4, where importable) on issue
12's cases, timed the way shared/measurements/2026-12-01-h200/anchor_features.py timed FA4.

    PYTHONPATH=. python3 bench/model_variants.py [--out results.json] [--iters 15]

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


def t_gpu(fn, iters: int) -> float:
    """Median seconds of fn() between CUDA events, each call behind a 2 ms sleep kernel so the
    host's launch cost stays out of it (anchor_features.py's timer)."""
    import torch
    fn()
    torch.cuda.synchronize()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--iters", type=int, default=15)
    args = ap.parse_args(argv)

    import torch
    from cubinforge.runtime import flash_attn_func, last_launch

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
        for who, make, extra in (("ours", ours, ours_kw), ("fa4", theirs, fa4_kw)):
            try:
                s = t_gpu(make(q, k, v, **{**kw, **(extra or {})}), args.iters)
                rec[who] = {"ms": round(s * 1e3, 4), "tflops": round(flops / s / 1e12, 1)}
                if who == "ours":
                    rec[who]["variant"] = last_launch().variant
            except Exception as e:
                rec[who] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
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
