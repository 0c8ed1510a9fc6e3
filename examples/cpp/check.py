"""Check the C++ example's output against a float64 numpy reference.

    python examples/cpp/check.py OUT_DIR

OUT_DIR holds meta.json and q/k/v/o/lse .bin files written by flash_attn_example. The reference
is softmax(scale * Q K^T) V in float64 on the same (bf16/fp16-rounded) Q, K, V, with GQA
(query head h reads kv head h // (heads_q / heads_kv)) and, when causal, the mask aligned
bottom-right: query i sees key j iff j <= i + seqlen_k - seqlen_q. Passes when
||O - ref||_F / ||ref||_F <= 2.5e-3 and max |LSE - ref| <= 1e-3 (natural log) over rows that
see at least one key; rows that see none must have O = 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

O_REL_TOL = 2.5e-3
LSE_ABS_TOL = 1e-3


def load(out_dir: Path, meta: dict, name: str) -> np.ndarray:
    """A tensor of the run as float64, in its dims order (see meta['tensors'][name]['dims'])."""
    t = meta["tensors"][name]
    raw = (out_dir / t["file"]).read_bytes()
    if t["dtype"] == "bf16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        a = bits.view(np.float32)
    elif t["dtype"] == "fp16":
        a = np.frombuffer(raw, dtype="<f2")
    elif t["dtype"] == "f32":
        a = np.frombuffer(raw, dtype="<f4")
    else:
        raise SystemExit(f"{name}: dtype {t['dtype']} is not handled by this check")
    return a.astype(np.float64).reshape(t["shape"])


def to_layout(a: np.ndarray, dims: list[str], want: list[str]) -> np.ndarray:
    """Transpose `a` from its dims order to `want` (names as in the contract)."""
    return np.transpose(a, [dims.index(d) for d in want])


def reference(q, k, v, scale: float, causal: bool):
    """q (b, sq, hq, d), k/v (b, sk, hkv, d) -> o (b, sq, hq, d), lse (b, hq, sq), rows_seen (sq,)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    o = np.zeros((b, sq, hq, d))
    lse = np.full((b, hq, sq), -np.inf)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    mask = j <= i + (sk - sq) if causal else np.ones((sq, sk), dtype=bool)
    seen = mask.any(axis=1)
    for bi in range(b):
        for h in range(hq):
            s = scale * (q[bi, :, h, :] @ k[bi, :, h // group, :].T)  # (sq, sk)
            s = np.where(mask, s, -np.inf)
            m = np.max(s, axis=1, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - m)
            total = p.sum(axis=1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                o[bi, :, h, :] = np.where(total > 0, (p @ v[bi, :, h // group, :]) / total, 0.0)
                lse[bi, h, :] = np.where(total[:, 0] > 0, np.log(total[:, 0]) + m[:, 0], -np.inf)
    return o, lse, seen


def check(out_dir: Path) -> bool:
    meta = json.loads((out_dir / "meta.json").read_text())
    t = meta["tensors"]
    q = to_layout(load(out_dir, meta, "q"), t["q"]["dims"], ["batch", "seqlen_q", "heads_q", "head_dim"])
    k = to_layout(load(out_dir, meta, "k"), t["k"]["dims"], ["batch", "seqlen_k", "heads_kv", "head_dim"])
    v = to_layout(load(out_dir, meta, "v"), t["v"]["dims"], ["batch", "seqlen_k", "heads_kv", "head_dim"])
    o = to_layout(load(out_dir, meta, "o"), t["o"]["dims"], ["batch", "seqlen_q", "heads_q", "head_dim"])
    ref_o, ref_lse, seen = reference(q, k, v, float(meta["softmax_scale"]), bool(meta["causal"]))

    ok = True
    print(f"{meta['variant']} on {meta['arch']}: q {list(q.shape)}, k {list(k.shape)}, "
          f"causal={meta['causal']}, softmax_scale={meta['softmax_scale']:.8g}")
    if not np.all(np.isfinite(o)):
        print("FAIL O has non-finite values")
        ok = False
    rel = np.linalg.norm((o - ref_o)[:, seen]) / max(np.linalg.norm(ref_o[:, seen]), 1e-300)
    print(f"O   rel err {rel:.3e} (tolerance {O_REL_TOL:.1e})")
    ok &= bool(rel <= O_REL_TOL)
    if not seen.all():
        unseen = np.abs(o[:, ~seen]).max()
        print(f"O   rows that see no key ({int((~seen).sum())}): max |O| = {unseen:.3e} (must be 0)")
        ok &= bool(unseen == 0)
    if "lse" in t:
        lse = to_layout(load(out_dir, meta, "lse"), t["lse"]["dims"], ["batch", "heads_q", "seqlen_q"])
        err = np.abs(lse[:, :, seen] - ref_lse[:, :, seen]).max() if seen.any() else 0.0
        print(f"LSE max abs err {err:.3e} (tolerance {LSE_ABS_TOL:.1e})")
        ok &= bool(err <= LSE_ABS_TOL)
    print("PASS" if ok else "FAIL")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="the --out directory of flash_attn_example")
    args = ap.parse_args(argv)
    return 0 if check(args.out_dir) else 1


if __name__ == "__main__":
    sys.exit(main())
