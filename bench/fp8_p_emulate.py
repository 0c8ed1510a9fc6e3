"""numpy emulation of the e4m3 forward's P rounding: what rescale_threshold and p_scale_log2 do
to the error, on the CPU (no DSL, no GPU).

    python3 -m bench.fp8_p_emulate [--seqlen 2048] [--heads 4]

The kernel (softmax.OnlineSoftmax, fp8_p.py) walks the key blocks last to first; a row's
maximum is that of the blocks seen so far, kept stale under rescale_threshold until a block
raises it past the threshold in any row of the warp (16 rows vote together); P = 2^(s*scale -
(m*scale - k)) in fp32 is summed unrounded into the row sum and rounded to e4m3 (cvt.rn,
subnormals kept) for the PV GEMM. O = sum(P8 v) / sum(P), so the shift 2^k cancels; what it
changes is which P fall into e4m3's subnormals (below 2^-6, 1-2 mantissa bits) or to zero.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

if __package__ in (None, "", "bench"):
    from pathlib import Path

    _root = Path(__file__).resolve().parent.parent
    if str(_root) not in sys.path:
        sys.path.insert(0, str(_root))
    from bench._bootstrap import install

    install(_root)

from cubinforge.bench.fp8_reference import attention, e4m3_round, outlier_inputs, quantize  # noqa: E402

WARP_ROWS = 16  # rows of one warp's vote (8 quads x 2 rows per thread)


def emulate(q, k, v, tile_n: int, threshold: float = 0.0, p_scale_log2: float = 0.0, round_p: bool = True,
            scale: float | None = None):
    """O of the kernel's loop on float64 q, k, v (b, s, h, d), one KV head per head (MHA):
    S exact, P rounded as the kernel rounds it (round_p=False: P kept exact)."""
    b, sq, h, d = q.shape
    sk = k.shape[1]
    scale_log2 = (1.0 / np.sqrt(d) if scale is None else scale) * np.log2(np.e)
    n_blocks = -(-sk // tile_n)
    out = np.empty_like(q)
    for bi in range(b):
        for hi in range(h):
            qs, ks, vs = q[bi, :, hi], k[bi, :, hi], v[bi, :, hi]
            m = np.full(sq, -np.inf)
            acc = np.zeros((sq, v.shape[-1]))
            total = np.zeros(sq)
            for n in range(n_blocks - 1, -1, -1):
                cols = slice(n * tile_n, min((n + 1) * tile_n, sk))
                s = (qs @ ks[cols].T) * scale_log2  # log2 units
                m_cand = np.maximum(m, s.max(1))
                if n == n_blocks - 1 or threshold <= 0:
                    move = np.ones(sq, bool)
                else:  # a warp moves its rows' maxima when any of its rows grew past the threshold
                    grow = (m_cand - m) > threshold
                    move = np.repeat(grow.reshape(-1, WARP_ROWS).any(1), WARP_ROWS) if sq % WARP_ROWS == 0 else grow
                m_new = np.where(move, m_cand, m)
                factor = np.where(np.isfinite(m), np.exp2(m - m_new), 0.0)
                acc *= factor[:, None]
                total *= factor
                m = m_new
                p = np.exp2(s - (m[:, None] - p_scale_log2)).astype(np.float32)
                total += p.sum(1, dtype=np.float64)
                p8 = e4m3_round(p) if round_p else p.astype(np.float64)
                acc += p8 @ vs[cols]
            out[bi, :, hi] = acc / total[:, None]
    return out


def rmse(o, ref) -> float:
    return float(np.sqrt(np.mean((o - ref) ** 2)))


def per_tensor(x):
    """Per-tensor FP8 as bench.fp8's case (a): the dequantised values."""
    s = np.abs(x).max() / 448.0
    return e4m3_round(x / s) * s


CANDIDATES = ((0.0, 0.0), (8.0, 0.0), (4.0, 4.0), (2.0, 6.0), (0.0, 8.0), (0.0, 4.0))


def per_head_hadamard(x, rotate: bool):
    """bench.fp8's case (b): fp8_quant's per-(batch, head) scales, q and k rotated (seed 1234)."""
    return quantize(x, None, rotate, seed=1234)[2]


def study(seqlen: int, heads: int, d: int = 128, tile_n: int = 192, seed: int = 0):
    """bench.fp8's error cases (a0) per-tensor on Gaussian inputs, (a) per-tensor and (b)
    per-head + Hadamard on outlier inputs, emulated per candidate (threshold, p_scale_log2),
    with P exact for scale and P's rounding alone (the inputs unquantised)."""
    rng = np.random.default_rng(seed)
    gauss = [rng.standard_normal((1, seqlen, heads, d)) for _ in range(3)]
    outl = [outlier_inputs(rng, 1, seqlen, heads, d), outlier_inputs(rng, 1, seqlen, heads, d),
            rng.standard_normal((1, seqlen, heads, d))]
    cases = {
        "(a0) per-tensor, Gaussian": (gauss, [per_tensor(x) for x in gauss]),
        "(a) per-tensor, outliers": (outl, [per_tensor(x) for x in outl]),
        "(b) per-head + Hadamard, outliers": (outl, [per_head_hadamard(x, r) for x, r in zip(outl, (1, 1, 0))]),
    }
    rows = []
    for name, ((q, k, v), (qq, kk, vv)) in cases.items():
        ref = attention(q, k, v)
        exact_p = rmse(emulate(qq, kk, vv, tile_n, round_p=False), ref)
        print(f"{name}: P exact: RMSE {exact_p:.3e}", flush=True)
        for thr, ks in CANDIDATES:
            o = emulate(qq, kk, vv, tile_n, thr, ks)
            p_only = emulate(q, k, v, tile_n, thr, ks) if not name.startswith("(b)") else None
            rows.append((name, thr, ks, rmse(o, ref), None if p_only is None else rmse(p_only, ref)))
            alone = f" (P rounding alone {rows[-1][4]:.3e})" if p_only is not None else ""
            print(f"{name}: threshold {thr:g} p_scale_log2 {ks:g}: RMSE {rows[-1][3]:.3e}{alone}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.fp8_p_emulate", description=__doc__.splitlines()[0])
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--tile-n", type=int, default=192)
    a = ap.parse_args(argv)
    study(a.seqlen, a.heads, tile_n=a.tile_n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
