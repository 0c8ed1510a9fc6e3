"""Decode forms side by side, one registry home per form: the same flash_attn_with_kvcache call
against each home (whose only decode forms are one tile's), run once on NaN-poisoned O and LSE
and checked against torch's float32 attention (bench.reference.attention_torch,
bench.correctness.judge), then timed in rounds of interleaved calls (timing.interleaved_rounds).

    PYTHONPATH=. python3 -m bench.decode_tiles --homes .cubinforge-ab-d80,.cubinforge-ab-d64
    PYTHONPATH=. python3 -m bench.decode_tiles --head-dim 128 --dtype fp16 --homes A,B --cells 32,4,8192,32,8

Build a home with `python -m cubinforge.bench.decode_tiles build --home H --tile-n N [--head-dim D]
[--dtypes bf16,fp16]`: the pack-GQA forms (split and unsplit, causal and not, dense cache) at
64 x N (config.TUNED_DECODE's switches where it names that tile), and the combine.
Figures: ms, TB/s of K+V read and TFLOPS, per cell and home, and each home's ratio to the first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv) per head dim: Gemma-2-like 16/8 heads at hd256;
# at hd128 the inference bench's decode cells (32/8 and 64/8 heads), MHA 16/16 ones, and query
# chunks of 16-2048 tokens against a dense cache (where a 64-row form stops being decode).
CELLS = {
    256: ((8, 1, 32768, 16, 8), (64, 1, 4096, 16, 8), (32, 4, 8192, 16, 8)),
    128: ((8, 1, 32768, 32, 8), (64, 1, 4096, 32, 8), (32, 4, 8192, 32, 8), (32, 1, 8192, 64, 8),
          (16, 1, 8192, 16, 16), (4, 1, 32768, 16, 16), (16, 16, 8192, 16, 16), (8, 16, 8192, 32, 8),
          (8, 64, 8192, 32, 8), (4, 128, 8192, 32, 8), (4, 512, 8192, 32, 8), (2, 2048, 8192, 32, 8)),
}
CELLS[64] = CELLS[128]  # gpt-oss-like hd64 decode takes the same shapes
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def build_home(home: Path, tile_n: int, head_dim: int = 256, dtypes=("bf16",), paged: bool = False) -> int:
    from cubinforge.generator import build as gbuild
    from cubinforge.generator.spec import make_variant
    from cubinforge.registry import Registry

    variants = [make_variant("fa3_fwd", arch="sm_90a", dtype=dt, head_dim=head_dim, causal=c, split_kv=s,
                             pack_gqa=True, paged_kv=paged, tile_m=64, tile_n=tile_n)
                for dt in dtypes for c in (False, True) for s in (False, True)]
    variants += [make_variant("attn_combine", arch="sm_90a", dtype=dt, head_dim=head_dim) for dt in dtypes]
    return gbuild.run(variants, Registry(home=home), jobs=2)


def run(homes: list[Path], causal: bool = True, head_dim: int = 256, dtype: str = "bf16", cells=None,
        page: int = 0) -> int:
    """``page`` > 0: the cache is paged (page_size ``page``, a shuffled page table), and the
    reference reads the same keys through the table."""
    import torch

    from cubinforge.runtime import prepare_kvcache
    from cubinforge.runtime.registry_source import LocalSource

    from .correctness import errors_torch, judge
    from .decode_ab import occupancy
    from .reference import attention_torch
    from .timing import interleaved_rounds

    D, tdt = head_dim, getattr(torch, TORCH_DTYPES[dtype])
    failed = 0
    for b, sq, sk, hq, hkv in cells or CELLS[head_dim]:
        g = torch.Generator(device="cuda").manual_seed(sk + b)
        q = torch.randn(b, sq, hq, D, device="cuda", dtype=tdt, generator=g)
        k = torch.randn(b, sk, hkv, D, device="cuda", dtype=tdt, generator=g)
        v = torch.randn_like(k)
        seqlens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        ref_o, ref_lse = attention_torch(q, k, v, causal)
        table = None
        if page:
            # Page j of sequence i holds its keys j * page ...; pages stored in a shuffled order.
            pages = sk // page
            table = torch.randperm(b * pages, device="cuda", generator=g).to(torch.int32).reshape(b, pages)
            kc, vc = (torch.empty(b * pages, page, hkv, D, device="cuda", dtype=tdt) for _ in range(2))
            kc[table.flatten().long()] = k.reshape(b * pages, page, hkv, D)
            vc[table.flatten().long()] = v.reshape(b * pages, page, hkv, D)
            k, v = kc, vc
        stream = torch.cuda.current_stream().cuda_stream
        fns, names = {}, {}
        for home in homes:
            out = torch.full_like(q, float("nan"))
            lse = torch.full((b, hq, sq), float("nan"), dtype=torch.float32, device="cuda")
            p = prepare_kvcache(q, k, v, cache_seqlens=seqlens, page_table=table, causal=causal, out=out, lse=lse,
                                stream=stream, source=LocalSource(home))
            p.run(stream)
            torch.cuda.synchronize()
            errs = errors_torch(out, ref_o, lse, ref_lse)
            why = judge(errs["rel_err"], errs["lse_err"], errs["unwritten"])
            ok = not why
            failed += not ok
            names[home.name] = (f"{','.join(p.kernels)} splits {p.plan.num_splits} CTAs/SM "
                                f"{','.join(map(str, occupancy(p)))} rel {errs['rel_err']:.2e} "
                                f"lse {errs['lse_err']:.1e} {'ok' if ok else 'FAIL ' + '; '.join(why)}")
            if ok:
                fns[home.name] = (lambda p=p: p.run(stream))
        ms, errors = interleaved_rounds(fns, 3, warmup=5, budget_s=0.2)
        for n, e in errors.items():
            print(f"{n}: timing failed: {type(e).__name__}: {e}"[:300], flush=True)
            failed += 1
        nbytes = 2 * b * sk * hkv * D * 2
        # Causal bottom-right: query i of sq sees sk - sq + i + 1 keys.
        keys_seen = sq * sk - (sq * (sq - 1) // 2 if causal else 0)
        flops = 4 * b * hq * keys_seen * D
        first = None
        for home in homes:
            n = home.name
            if n not in ms:
                print(f"b{b} q{sq} k{sk} {hq}/{hkv}  {n:24s} not timed: {names[n]}", flush=True)
                continue
            t = ms[n]
            first = first or t
            print(f"{dtype} b{b} q{sq} k{sk} {hq}/{hkv}{f' p{page}' if page else ''}  {n:24s} {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s "
                  f"{flops / t / 1e9:6.1f} TFLOPS  x{first / t:.3f}  {names[n]}", flush=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["build"]:
        ap = argparse.ArgumentParser(prog="decode_tiles build")
        ap.add_argument("--home", type=Path, required=True)
        ap.add_argument("--tile-n", type=int, required=True)
        ap.add_argument("--head-dim", type=int, default=256)
        ap.add_argument("--dtypes", default="bf16")
        ap.add_argument("--paged", action="store_true", help="the paged forms instead of the dense-cache ones")
        a = ap.parse_args(argv[1:])
        return build_home(a.home, a.tile_n, a.head_dim, tuple(a.dtypes.split(",")), a.paged)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--homes", required=True, help="comma list of registry homes, the first the baseline")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=256, choices=sorted(CELLS))
    ap.add_argument("--dtype", default="bf16", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--cells", default="", help="';'-separated batch,seqlen_q,seqlen_k,heads_q,heads_kv (default: "
                    "the head dim's CELLS)")
    ap.add_argument("--page", type=int, default=0, help="page size of a paged cache (0: dense)")
    a = ap.parse_args(argv)
    cells = [tuple(int(x) for x in c.split(",")) for c in a.cells.split(";") if c.strip()] or None
    return run([Path(h) for h in a.homes.split(",")], bool(a.causal), a.head_dim, a.dtype, cells, a.page)


if __name__ == "__main__":
    sys.exit(main())
