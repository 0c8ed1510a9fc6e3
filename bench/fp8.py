"""FP8 (issue 13) in one run: the error study, TFLOPS at 16k and the e4m3 matmul ceiling.

    python3 -m bench.fp8 [--seqlen 16384] [--err-seqlen 2048] [--json out.json]

Error study (FA3's): q and k N(0,1) with a fraction of entries drawn with std 10 (outliers),
v N(0,1); RMSE of O against float64 attention on the *unquantised* inputs for
  (a) per-tensor FP8: one scale per tensor (numpy), our e4m3 kernel;
  (b) per-(batch, head) scales + random-sign Hadamard on q and k (our fp8_quant kernel),
      our e4m3 kernel -- the forward takes per-(batch, head) descales, so this is what it
      can consume;
  (b') block quantisation (128 tokens) + Hadamard, emulated: fp8_quant's dequantised
      inputs through float64 attention (no P rounding);
  (b'') the same block quantisation (q and k blocks of 128) through our e4m3 kernel's block-
      descale variant (descale_block=(128, 128), SET=fp8), and (b''-k192) with k blocks of
      192 (one key tile of the shipped hd128 form); v per (batch, head) as in FA3;
  (c) the bf16 kernel on plain Gaussian inputs (the issue's yardstick).
Then TFLOPS of the e4m3 variants (batch 1, 16 heads, seqlen 16k, causal and not, V column-
major and row-major (transposed in shared memory, SET=fp8)) and torch._scaled_mm e4m3 8192^3 with unit scales, in the same process. Every
case runs in its own try/except; the table at the end says what failed and why.

    python3 -m bench.fp8 --block   # block descales only: error rows (b), (b'), (b''), and hd128
                                   # TFLOPS per-head vs block variants (SET=fp8), ~1 min
    python3 -m bench.fp8 --ab-home .cubinforge-ab-fp8p   # bench.ab's e4m3 candidates (ab_home)
    python3 -m bench.fp8 --ab-home .cubinforge-ab-fp8c   # fp8-causal (or fp8-hd64): causal / non-causal in one run
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import numpy as np

if __package__ in (None, "", "bench"):
    # `python3 -m bench.fp8` from a plain checkout: map the folders into `cubinforge`.
    from pathlib import Path

    _root = Path(__file__).resolve().parent.parent
    if str(_root) not in sys.path:
        sys.path.insert(0, str(_root))
    from bench._bootstrap import install

    install(_root)

from cubinforge.bench.flops import attention_flops, matmul_flops, tflops  # noqa: E402
from cubinforge.bench.fp8_reference import (attention, dequantize, e4m3_encode,  # noqa: E402
                                            outlier_inputs, quantize)

ROWS: list[dict] = []


def record(case: str, **values) -> None:
    ROWS.append({"case": case, **values})
    print(f"  {case}: " + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)


def attempt(case: str, fn) -> None:
    try:
        fn()
    except Exception as e:  # one case failing must not stop the others
        traceback.print_exc()
        record(case, error=f"{type(e).__name__}: {e}"[:200])


# --------------------------------------------------------------------------- device helpers

def _torch():
    import torch
    return torch


def to_dev_bytes(bits: np.ndarray):
    """A DeviceArray of e4m3 bytes (torch uint8 underneath, viewed through dtype=)."""
    from cubinforge.runtime import as_device_array
    t = _torch().from_numpy(np.ascontiguousarray(bits)).cuda()
    return as_device_array(t, dtype="e4m3"), t


def colmajor_v(bits: np.ndarray):
    """(b, sk, h, d) bytes -> device V (b, h, d, sk), seqlen_k storage padded to 16 B."""
    from cubinforge.runtime import DeviceArray
    b, sk, h, d = bits.shape
    pad = -(-sk // 16) * 16
    host = np.zeros((b, h, d, pad), np.uint8)
    host[..., :sk] = bits.transpose(0, 2, 3, 1)
    full, t = to_dev_bytes(host)
    return DeviceArray(full.ptr, (b, h, d, sk), full.strides, "e4m3", full.device, owner=full), t


def bf16_dev(x: np.ndarray):
    torch = _torch()
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).cuda()


def host_f64(t) -> np.ndarray:
    """A bf16/f32 torch tensor or one of our arrays -> float64 numpy."""
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        t = torch.from_dlpack(t)
    return t.float().cpu().numpy().astype(np.float64)


def download_bytes(a) -> np.ndarray:
    """An e4m3 array of ours -> its bytes, through the driver (no framework's float8 needed)."""
    from cubinforge.runtime import as_device_array, driver
    a = as_device_array(a)
    with driver.device_context(a.device or 0):
        driver.call("cuCtxSynchronize")
        raw = np.empty(a.span_bytes, np.uint8)
        driver.call("cuMemcpyDtoH", raw.ctypes.data, a.ptr, a.span_bytes)
    return np.ascontiguousarray(np.lib.stride_tricks.as_strided(raw, a.shape, a.strides))


def rmse(o, ref) -> float:
    return float(np.sqrt(np.mean((o - ref) ** 2)))


# --------------------------------------------------------------------------- error study

def run_fp8(q_bits, k_bits, v_bits, descales, causal=False, v_layout="colmajor", **pin):
    """Our e4m3 kernel -> float64 O. descales: (q, k, v) float32 (b, h) arrays (or (b, h,
    blocks) for q and k with pin's descale_block=); v_bits row-major (b, sk, h, d), sent as
    `v_layout` wants it; pin: flash_attn_func's source= or descale_block=."""
    from cubinforge.runtime import flash_attn_func
    torch = _torch()
    q8, _tq = to_dev_bytes(q_bits)
    k8, _tk = to_dev_bytes(k_bits)
    v8, _tv = colmajor_v(v_bits) if v_layout == "colmajor" else to_dev_bytes(v_bits)
    kw = {f"{n}_descale": torch.from_numpy(np.ascontiguousarray(d, np.float32)).cuda()
          for n, d in zip(("q", "k", "v"), descales)}
    out, _ = flash_attn_func(q8, k8, v8, causal=causal, v_layout=v_layout, **kw, **pin)
    torch.cuda.synchronize()
    return host_f64(out)


def per_tensor(x):
    """One scale for the whole tensor: (bytes, descale (b, h))."""
    s = np.abs(x).max() / 448.0
    b, _, h, _ = x.shape
    return e4m3_encode(x / s), np.full((b, h), s, np.float32)


def error_study(seqlen: int, d: int = 128, heads: int = 8, frac: float = 0.01, seed: int = 0,
                cases: tuple | None = None):
    from cubinforge.runtime import flash_attn_func, quantize_fp8
    torch = _torch()
    rng = np.random.default_rng(seed)
    b = 1
    q = outlier_inputs(rng, b, seqlen, heads, d, frac)
    k = outlier_inputs(rng, b, seqlen, heads, d, frac)
    v = rng.standard_normal((b, seqlen, heads, d))
    ref = attention(q, k, v)
    print(f"error study: b={b} s={seqlen} h={heads} d={d}, {frac:.1%} of q/k entries with std 10", flush=True)

    def case_a():
        (qb, qd), (kb, kd), (vb, vd) = per_tensor(q), per_tensor(k), per_tensor(v)
        o = run_fp8(qb, kb, vb, (qd, kd, vd))
        record("(a) per-tensor FP8, e4m3 kernel", rmse=rmse(o, ref))

    def quantised(x, block, had):
        y, desc = quantize_fp8(bf16_dev(x), block=block, hadamard=had, seed=1234)
        torch.cuda.synchronize()
        return download_bytes(y), host_f64(desc)

    def case_b():
        (qb, qd), (kb, kd), (vb, vd) = (quantised(q, None, True), quantised(k, None, True),
                                        quantised(v, None, False))
        o = run_fp8(qb, kb, vb, (qd, kd, vd))
        record("(b) per-head scales + Hadamard, e4m3 kernel", rmse=rmse(o, ref))

    def case_b_block():
        blk = 128
        parts = [quantised(x, blk, had) for x, had in ((q, True), (k, True), (v, False))]
        qq, kk, vv = (dequantize(bits, desc, blk) for bits, desc in parts)
        record("(b') block-128 + Hadamard, emulated (float64 attention on dequantised inputs)",
               rmse=rmse(attention(qq, kk, vv), ref))

    def case_b_kernel(bq, bk):
        (qb, qd), (kb, kd), (vb, vd) = (quantised(q, bq, True), quantised(k, bk, True),
                                        quantised(v, None, False))
        o = run_fp8(qb, kb, vb, (qd, kd, vd), descale_block=(bq, bk))
        from cubinforge.runtime import last_launch
        name = "(b'')" if bk == 128 else f"(b''-k{bk})"
        record(f"{name} block q{bq}/k{bk} + Hadamard, e4m3 kernel ({last_launch().variant})", rmse=rmse(o, ref))

    def case_c():
        g = np.random.default_rng(seed + 1)
        qg, kg, vg = (g.standard_normal((b, seqlen, heads, d)) for _ in range(3))
        out, _ = flash_attn_func(bf16_dev(qg), bf16_dev(kg), bf16_dev(vg))
        torch.cuda.synchronize()
        record("(c) bf16 kernel, plain Gaussian inputs", rmse=rmse(host_f64(out), attention(qg, kg, vg)))

    def case_gauss_fp8():
        g = np.random.default_rng(seed + 1)
        qg, kg, vg = (g.standard_normal((b, seqlen, heads, d)) for _ in range(3))
        (qb, qd), (kb, kd), (vb, vd) = per_tensor(qg), per_tensor(kg), per_tensor(vg)
        record("(a0) per-tensor FP8, e4m3 kernel, plain Gaussian inputs",
               rmse=rmse(run_fp8(qb, kb, vb, (qd, kd, vd)), attention(qg, kg, vg)))

    for name, fn in (("(a)", case_a), ("(b)", case_b), ("(b')", case_b_block),
                     ("(b'')", lambda: case_b_kernel(128, 128)), ("(b''-k192)", lambda: case_b_kernel(128, 192)),
                     ("(c)", case_c), ("(a0)", case_gauss_fp8)):
        if cases is None or name in cases:
            attempt(name, fn)


# --------------------------------------------------------------------------- speed

def speed(seqlen: int, heads: int = 16, v_layouts=("colmajor", "rowmajor"), head_dims=(64, 128, 256)):
    """Rows per (head dim, mask, V layout): colmajor is the default set's, rowmajor SET=fp8's
    (V transposed in shared memory); the row names the variant that ran."""
    from cubinforge.runtime import flash_attn_func, last_launch
    from .timing import time_cuda
    torch = _torch()
    for d in head_dims:
        for causal, v_layout in ((c, vl) for c in (False, True) for vl in v_layouts):
            case = f"e4m3 hd{d} {'causal' if causal else 'noncausal'} v-{v_layout} b1 h{heads} s{seqlen}"

            def one(d=d, causal=causal, case=case, v_layout=v_layout):
                g = torch.Generator(device="cuda").manual_seed(0)
                # e4m3 bytes 0..55: values in [0, 0.94], so S and exp2 stay tame.
                q = torch.randint(0, 56, (1, seqlen, heads, d), dtype=torch.uint8, device="cuda", generator=g)
                k = torch.randint(0, 56, (1, seqlen, heads, d), dtype=torch.uint8, device="cuda", generator=g)
                v_shape = (1, heads, d, seqlen) if v_layout == "colmajor" else (1, seqlen, heads, d)
                v = torch.randint(0, 56, v_shape, dtype=torch.uint8, device="cuda", generator=g)
                from cubinforge.runtime import as_device_array
                q8, k8, v8 = (as_device_array(t, dtype="e4m3") for t in (q, k, v))
                out = torch.empty((1, seqlen, heads, d), dtype=torch.bfloat16, device="cuda")
                lse = torch.empty((1, heads, seqlen), dtype=torch.float32, device="cuda")
                stream = torch.cuda.current_stream()
                fn = lambda: flash_attn_func(q8, k8, v8, causal=causal, out=out, lse=lse,  # noqa: E731
                                             stream=stream.cuda_stream, v_layout=v_layout)
                t = time_cuda(fn, warmup=3, min_iters=5, max_iters=20, budget_s=1.0)
                record(case, variant=last_launch().variant, ms=round(t.median_ms, 3),
                       tflops=round(tflops(attention_flops(1, heads, seqlen, seqlen, d, causal), t.median_ms), 1))

            attempt(case, one)


# The block-descale variants SET=fp8 builds (generator/spec.py): (causal, (q block, k block)).
BLOCK_FORMS = ((False, (128, 192)), (True, (128, 192)), (False, (128, 128)))


def block_speed(seqlen: int, heads: int = 16):
    """hd128 V column-major with block descales (all ones: the same arithmetic as any values),
    beside speed()'s per-head rows of the same head dim and mask; the row names the variant."""
    from cubinforge.runtime import as_device_array, flash_attn_func, last_launch
    from .timing import time_cuda
    torch = _torch()
    d = 128
    for causal, (bq, bk) in BLOCK_FORMS:
        case = f"e4m3 hd{d} {'causal' if causal else 'noncausal'} v-colmajor block q{bq}/k{bk} b1 h{heads} s{seqlen}"

        def one(causal=causal, bq=bq, bk=bk, case=case):
            g = torch.Generator(device="cuda").manual_seed(0)
            q = torch.randint(0, 56, (1, seqlen, heads, d), dtype=torch.uint8, device="cuda", generator=g)
            k = torch.randint(0, 56, (1, seqlen, heads, d), dtype=torch.uint8, device="cuda", generator=g)
            v = torch.randint(0, 56, (1, heads, d, seqlen), dtype=torch.uint8, device="cuda", generator=g)
            q8, k8, v8 = (as_device_array(t, dtype="e4m3") for t in (q, k, v))
            qd = torch.ones((1, heads, -(-seqlen // bq)), dtype=torch.float32, device="cuda")
            kd = torch.ones((1, heads, -(-seqlen // bk)), dtype=torch.float32, device="cuda")
            out = torch.empty((1, seqlen, heads, d), dtype=torch.bfloat16, device="cuda")
            lse = torch.empty((1, heads, seqlen), dtype=torch.float32, device="cuda")
            stream = torch.cuda.current_stream()
            fn = lambda: flash_attn_func(q8, k8, v8, causal=causal, out=out, lse=lse,  # noqa: E731
                                         stream=stream.cuda_stream, v_layout="colmajor", q_descale=qd,
                                         k_descale=kd, descale_block=(bq, bk))
            t = time_cuda(fn, warmup=3, min_iters=5, max_iters=20, budget_s=1.0)
            record(case, variant=last_launch().variant, ms=round(t.median_ms, 3),
                   tflops=round(tflops(attention_flops(1, heads, seqlen, seqlen, d, causal), t.median_ms), 1))

        attempt(case, one)


def scaled_mm_ceiling(n: int = 8192):
    from .timing import time_cuda
    torch = _torch()

    def one():
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major B
        one_ = torch.ones((), device="cuda", dtype=torch.float32)
        fn = lambda: torch._scaled_mm(a, b, scale_a=one_, scale_b=one_, out_dtype=torch.bfloat16)  # noqa: E731
        t = time_cuda(fn, warmup=10, min_iters=10, max_iters=50, budget_s=1.0)
        record(f"torch._scaled_mm e4m3 {n}^3 (ceiling)", ms=round(t.median_ms, 3),
               tflops=round(tflops(matmul_flops(n, n, n), t.median_ms), 1))

    attempt("ceiling", one)


# --------------------------------------------------------------------------- A/B home

def error_cases(d: int, causal: bool, seqlen: int, b: int = 1, h: int = 8, seed: int = 0) -> dict:
    """The error study's kernel rows for ab_home: case -> ([(bytes, descale (b, h))] for q, k, v,
    float64 reference O on the unquantised inputs), with the reference masked as the variant is
    (a causal kernel against a non-causal reference would read as error); "gauss": the plain
    Gaussian inputs for row (c). Inputs depend on (d, seqlen, seed) only, so a causal and a
    non-causal variant see the same bytes."""
    rng = np.random.default_rng(seed)
    g = np.random.default_rng(seed + 1)
    qo, ko = (outlier_inputs(rng, b, seqlen, h, d) for _ in range(2))
    vo = rng.standard_normal((b, seqlen, h, d))
    qg, kg, vg = (g.standard_normal((b, seqlen, h, d)) for _ in range(3))
    per_head = [quantize(x, None, had, seed=1234)[:2] for x, had in ((qo, True), (ko, True), (vo, False))]
    ref_o = attention(qo, ko, vo, causal=causal)
    return {
        "(a0) per-tensor, Gaussian": ([per_tensor(x) for x in (qg, kg, vg)], attention(qg, kg, vg, causal=causal)),
        "(a) per-tensor, outliers": ([per_tensor(x) for x in (qo, ko, vo)], ref_o),
        "(b) per-head + Hadamard, outliers": ([(bits, desc[:, :, 0]) for bits, desc in per_head], ref_o),
        "gauss": (qg, kg, vg),
    }


def ab_home(home: str, seqlen: int, err_seqlen: int, heads: int = 16, seed: int = 0, rounds: int = 3) -> int:
    """bench.ab's e4m3 candidates in the registry at `home` (`bench.ab build --experiments
    fp8-p-scale`): each through bench.ab's e4m3 gate (and its rising-score case where the
    softmax keeps a stale maximum or shifts P), then the error study's kernel rows (a0), (a)
    and (b) pinned to it (a causal variant against the causal float64 reference), and TFLOPS
    at `seqlen` in rounds of interleaved calls with the other variants of its (head dim, causal, V
    layout), read against that group's base (bench.ab's FP8_*_BASES); each causal variant's
    TFLOPS over the non-causal ones' of the same run (causal_ratios). A bf16 variant in the
    home gives row (c). The inputs are quantised on the host (fp8_reference.quantize:
    fp8_quant's numpy model), the same bytes for every variant. `rounds`: timing rounds per
    group (the median of each variant's rounds is its figure). Returns the gate's failures."""
    import os
    from pathlib import Path

    os.environ["CUBINFORGE_HOME"] = str(home)  # Ours pins through LocalSource() of this home
    from cubinforge.runtime import flash_attn_func

    from .ab import RISING_SHAPES, check_fp8_variant, fp8_call
    from .anchors import Ours
    from .timing import interleaved_rounds

    torch = _torch()
    ours = Ours()
    manifests = {p.stem: json.loads(p.read_text())["axes"] for p in sorted((Path(home) / "manifests").glob("*.json"))}
    dense = {n: ax for n, ax in manifests.items()
             if not any(ax.get(a) for a in ("split_kv", "pack_gqa", "paged_kv", "varlen"))}
    b, h = 1, 8
    inputs: dict[tuple[int, bool], dict] = {}

    def cases(d, causal=False):  # made once per head dim and mask
        if (d, causal) not in inputs:
            inputs[d, causal] = error_cases(d, causal, err_seqlen, b, h, seed)
        return inputs[d, causal]

    summary, rising = {}, {}  # rising: name -> check_fp8_variant's (rel, lse err, ok but for the LSE bound)
    for name, ax in dense.items():
        d = ax["head_dim"]
        if ax["dtype"] != "e4m3":
            def case_c(name=name, d=d):
                qg, kg, vg = cases(d)["gauss"]
                out, _ = flash_attn_func(bf16_dev(qg), bf16_dev(kg), bf16_dev(vg), **ours._source(name))
                torch.cuda.synchronize()
                summary[name] = {"(c) bf16, Gaussian": rmse(host_f64(out), attention(qg, kg, vg))}
                record(f"{name} (c) bf16 kernel, plain Gaussian inputs", rmse=summary[name]["(c) bf16, Gaussian"])
            attempt(name, case_c)
            continue
        v_layout = ax.get("v_layout", "rowmajor")
        row = summary[name] = {"gate": "FAIL"}

        def gate(name=name, d=d, ax=ax, v_layout=v_layout, row=row):
            rel, lse_err, ok = check_fp8_variant(ours, name, d, ax["causal"], v_layout)
            # Every variant, the shipped bases too, also meets the rising-score case (a stale
            # maximum or a shifted P is what it tests): its LSE error is read against its
            # group's base below, since e4m3 scores that large carry the tensor cores' own
            # accumulation error whatever the softmax does.
            rise = rising[name] = check_fp8_variant(ours, name, d, ax["causal"], v_layout, RISING_SHAPES,
                                                     rising_scores=True, lse_tol=float("inf"))
            row["gate"] = "ok" if ok else "FAIL"
            row["rising lse"] = rise[1]
            record(f"{name} gate", rel_err=f"{rel:.2e}", lse_err=f"{lse_err:.1e}", ok=ok,
                   rising_rel_err=f"{rise[0]:.2e}", rising_lse_err=f"{rise[1]:.1e}")
        attempt(f"{name} gate", gate)
        for case, (parts, ref) in ((c, v) for c, v in cases(d, ax["causal"]).items() if c.startswith("(")):
            def one(case=case, parts=parts, ref=ref, name=name, v_layout=v_layout, causal=ax["causal"]):
                (qb, qd), (kb, kd), (vb, vd) = parts
                row[case] = rmse(run_fp8(qb, kb, vb, (qd, kd, vd), causal=causal, v_layout=v_layout,
                                         **ours._source(name)), ref)
                if ours.last_variant() != name:
                    raise RuntimeError(f"{name}: the runtime ran {ours.last_variant()}")
                record(f"{name} {case}", rmse=row[case])
            attempt(f"{name} {case}", one)
    failed = rising_gate(summary, dense, rising)
    # Speed: the variants of one (head dim, causal, V layout) in rounds of interleaved calls.
    groups: dict[tuple, list[str]] = {}
    for name, ax in dense.items():
        if ax["dtype"] == "e4m3" and summary.get(name, {}).get("gate") == "ok":
            groups.setdefault((ax["head_dim"], ax["causal"], ax.get("v_layout", "rowmajor")), []).append(name)
    from .ab import fp8_inputs
    if groups:  # the yardstick, in the same run: % of the e4m3 matmul ceiling
        scaled_mm_ceiling()
    ceiling = next((r["tflops"] for r in ROWS if "ceiling" in r["case"] and "tflops" in r), None)
    for (d, causal, v_layout), names in groups.items():
        def timed(d=d, causal=causal, v_layout=v_layout, names=names):
            q8, k8, v8_in, _v = fp8_inputs(1, seqlen, seqlen, heads, heads, d, v_layout, seed=seqlen)
            out = torch.empty((1, seqlen, heads, d), dtype=torch.bfloat16, device="cuda")
            lse = torch.empty((1, heads, seqlen), dtype=torch.float32, device="cuda")
            fns = {n: fp8_call(ours, n, causal, v_layout, q8, k8, v8_in, out, lse) for n in names}
            ms, errors = interleaved_rounds(fns, rounds, min_iters=10, max_iters=30, budget_s=0.2)
            if errors:
                raise RuntimeError("; ".join(f"{n}: {type(e).__name__}: {e}" for n, e in errors.items())[:500])
            flops = attention_flops(1, heads, seqlen, seqlen, d, causal)
            base = group_base(names)
            for n in names:
                summary[n]["tflops"] = tflops(flops, ms[n])
            for n in names:
                summary[n]["vs_base"] = summary[n]["tflops"] / summary[base]["tflops"]
                record(f"{n} s{seqlen}", tflops=round(summary[n]["tflops"], 1),
                       vs_base=f"{summary[n]['vs_base']:.3f} of {base.split('+', 1)[1]}",
                       **({"of_ceiling": f"{summary[n]['tflops'] / ceiling:.3f}"} if ceiling else {}))
        attempt(f"speed hd{d} {'causal' if causal else 'noncausal'} {v_layout}", timed)
    for name, ratios in causal_ratios(summary, dense).items():
        summary[name].update(ratios)
        record(f"{name} causal / non-causal s{seqlen}", **{k: f"{v:.3f}" for k, v in ratios.items()})
    cols = ("gate", "tflops", "vs_base", "vs_noncausal", "vs_noncausal_same_v", "rising lse", "(a0) per-tensor, Gaussian",
            "(a) per-tensor, outliers", "(b) per-head + Hadamard, outliers", "(c) bf16, Gaussian")
    print("\n| variant | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, row in summary.items():
        cells = [row.get(c, "") for c in cols]
        fmt = [f"{x:.1f}" if c == "tflops" and x != "" else f"{x:.3f}" if c.startswith("vs_") and x != ""
               else f"{x:.3e}" if isinstance(x, float) else str(x) for c, x in zip(cols, cells)]
        print(f"| {name} | " + " | ".join(fmt) + " |")
    return failed


RISING_LSE_TOL, RISING_LSE_VS_BASE = 2e-2, 1.25


def group_base(names: list[str]) -> str:
    """The shipped form among one (head dim, causal, V layout) group's variants (bench.ab's
    FP8_*_BASES), else the first."""
    from .ab import FP8_CAUSAL_BASES, FP8_HD64_BASES, FP8_HD128_2_BASES, FP8_P_SCALE_BASES

    bases = FP8_P_SCALE_BASES + FP8_HD128_2_BASES + FP8_CAUSAL_BASES + FP8_HD64_BASES
    return next((n for n in names if n.split("+", 1)[1] in bases), names[0])


def rising_gate(summary: dict, axes: dict, rising: dict) -> int:
    """The rising-score half of the gate, once every variant has met it (`rising`: name ->
    check_fp8_variant's (rel, LSE error, ok but for the LSE bound)): O's error, NaNs and masked
    rows as the plain case, and the LSE error within max(2e-2, 1.25x its group base's on the
    same inputs), so a candidate fails for what its softmax adds, not for what the e4m3 scores
    carry. A variant failing here (or in the plain case) is not timed. Returns the failures."""
    groups: dict[tuple, list[str]] = {}
    for n in rising:
        ax = axes[n]
        groups.setdefault((ax["head_dim"], ax["causal"], ax.get("v_layout", "rowmajor")), []).append(n)
    failed = sum(1 for row in summary.values() if row.get("gate") == "FAIL")
    for names in groups.values():
        base = group_base(names)
        bound = max(RISING_LSE_TOL, RISING_LSE_VS_BASE * rising[base][1])
        for n in names:
            _rel, lse_err, ok = rising[n]
            if summary[n]["gate"] == "ok" and not (ok and lse_err <= bound):
                summary[n]["gate"] = "FAIL"
                failed += 1
            record(f"{n} rising-score gate", lse_err=f"{lse_err:.1e}", bound=f"{bound:.1e}",
                   base=base.split("+", 1)[1], ok=summary[n]["gate"] == "ok")
    return failed


def causal_ratios(summary: dict, axes: dict) -> dict:
    """Issue 13's causal >= 0.95x non-causal, from one run: each timed e4m3 causal variant's
    TFLOPS over the fastest timed non-causal variant of its head dim (`vs_noncausal`, any V
    layout: the non-causal headline is column-major's) and of its head dim and V layout
    (`vs_noncausal_same_v`). summary: name -> row with "tflops"; axes: name -> manifest axes."""
    def layout(n):
        return axes[n].get("v_layout", "rowmajor")

    timed = [n for n, r in summary.items() if "tflops" in r and axes[n].get("dtype") == "e4m3"]
    out = {}
    for n in (n for n in timed if axes[n]["causal"]):
        peers = [m for m in timed if not axes[m]["causal"] and axes[m]["head_dim"] == axes[n]["head_dim"]]
        same = [m for m in peers if layout(m) == layout(n)]
        ratios = {}
        if peers:
            ratios["vs_noncausal"] = summary[n]["tflops"] / max(summary[m]["tflops"] for m in peers)
        if same:
            ratios["vs_noncausal_same_v"] = summary[n]["tflops"] / max(summary[m]["tflops"] for m in same)
        if ratios:
            out[n] = ratios
    return out


def table() -> str:
    ceiling = next((r.get("tflops") for r in ROWS if "ceiling" in r["case"] and "tflops" in r), None)
    lines = ["| case | RMSE | ms | TFLOPS | % of e4m3 ceiling | error |", "|---|---|---|---|---|---|"]
    for r in ROWS:
        pct = f"{100 * r['tflops'] / ceiling:.0f}%" if ceiling and r.get("tflops") else ""
        lines.append(f"| {r['case']} | {r.get('rmse', ''):.3e} | " if "rmse" in r else f"| {r['case']} | | ")
        lines[-1] += f"{r.get('ms', '')} | {r.get('tflops', '')} | {pct} | {r.get('error', '')} |"
    rm = {r["case"].split()[0]: r["rmse"] for r in ROWS if "rmse" in r}
    for i, (num, den, note) in enumerate(RMSE_RATIOS):
        if rm.get(num) and rm.get(den):
            lead = "\n" if i == 0 else ""  # a blank line after the table, before the first
            lines.append(f"{lead}{num}/{den} = {rm[num] / rm[den]:.2f}{note}")
    return "\n".join(lines)


# The error rows' ratios the table ends with: (numerator, denominator, what it is held to).
RMSE_RATIOS = (("(a)", "(b)", " (target >= 2)"), ("(a)", "(b')", ""), ("(b)", "(c)", " (target <= 3)"),
               ("(b')", "(c)", ""), ("(a)", "(b'')", " (block + Hadamard through the kernel; target >= 2)"),
               ("(b'')", "(c)", " (target <= 3)"), ("(b'')", "(b)", " (block vs per-head scales, both with Hadamard)"))


def write_rows(path: str | None) -> None:
    """Every row so far as JSON at `path` (--json), if one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(ROWS, f, indent=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.fp8", description=__doc__.splitlines()[0])
    p.add_argument("--seqlen", type=int, default=16384, help="speed runs (default 16384)")
    p.add_argument("--err-seqlen", type=int, default=2048, help="error study (float64 reference on the host)")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-errors", action="store_true", help="speed rows only")
    p.add_argument("--block", action="store_true",
                   help="block descales only: error rows (a), (b), (b'), (b''), (b''-k192), (c), the ceiling, and hd128 "
                        "column-major TFLOPS per-head and with block descales (needs SET=fp8's block variants)")
    p.add_argument("--v-layout", choices=("colmajor", "rowmajor", "both"), default="both",
                   help="V layouts of the speed rows (rowmajor needs SET=fp8)")
    p.add_argument("--rounds", type=int, default=3, help="--ab-home: timing rounds per group (calls interleaved) "
                                                         "(default 3; more to resolve ~1%% differences)")
    p.add_argument("--ab-home", help="bench.ab's e4m3 candidates in this registry (fp8-p-scale): gate, "
                                     "error rows and TFLOPS per variant, nothing else")
    a = p.parse_args(argv)
    if a.ab_home:
        failed = ab_home(a.ab_home, a.seqlen, a.err_seqlen, rounds=a.rounds)
        write_rows(a.json)
        return 1 if failed else 0
    if a.block:
        if not a.skip_errors:
            attempt("error study", lambda: error_study(a.err_seqlen, cases=("(a)", "(b)", "(b')", "(b'')",
                                                                            "(b''-k192)", "(c)")))
        if not a.skip_speed:
            scaled_mm_ceiling()
            speed(a.seqlen, v_layouts=("colmajor",), head_dims=(128,))
            block_speed(a.seqlen)
        print("\n" + table())
        write_rows(a.json)
        return 0
    if not a.skip_errors:
        attempt("error study", lambda: error_study(a.err_seqlen))
    if not a.skip_speed:
        scaled_mm_ceiling()
        speed(a.seqlen, v_layouts=("colmajor", "rowmajor") if a.v_layout == "both" else (a.v_layout,))
        if a.v_layout != "rowmajor":
            block_speed(a.seqlen)
    print("\n" + table())
    write_rows(a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
