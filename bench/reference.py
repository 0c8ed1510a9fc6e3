"""The attention forward in float32: O and LSE (natural log), in numpy and in torch.

Semantics the kernels must match:
  * q (b, sq, hq, d), k/v (b, sk, hkv, d); query head h reads kv head h // (hq // hkv);
  * causal is bottom-right aligned: query i sees keys j <= i + sk - sq;
  * a row that sees no key (causal with sq > sk) has O = 0 and LSE = -inf.
The torch version runs on the GPU in float32 (TF32 off), chunked over queries so the score
matrix stays under `max_score_bytes`.
"""

from __future__ import annotations

import math


def _visible(sq: int, sk: int, causal: bool, xp, q0: int = 0, q1: int | None = None, **kw):
    """Boolean (q1 - q0, sk) mask of visible keys, built with array module `xp`."""
    q1 = sq if q1 is None else q1
    i = xp.arange(q0, q1, **kw).reshape(-1, 1)
    j = xp.arange(sk, **kw).reshape(1, -1)
    if not causal:
        return (j >= 0) & (i >= 0)
    return j <= i + (sk - sq)


def _problem(q_shape, k_shape, softmax_scale):
    """(b, sq, hq, d, sk, query heads per kv head, scale) of a (b, s, h, d) problem."""
    b, sq, hq, d = q_shape
    sk, hkv = k_shape[1], k_shape[2]
    if hq % hkv:
        raise ValueError(f"heads_q {hq} not a multiple of heads_kv {hkv}")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    return b, sq, hq, d, sk, hq // hkv, scale


def attention_numpy(q, k, v, causal: bool, softmax_scale: float | None = None):
    """float32 O (b, sq, hq, d) and LSE (b, hq, sq) with numpy; for small problems."""
    import numpy as np

    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    b, sq, hq, d, sk, rep, scale = _problem(q.shape, k.shape, softmax_scale)
    kx = np.repeat(k, rep, axis=2)  # (b, sk, hq, d)
    vx = np.repeat(v, rep, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kx) * np.float32(scale)
    mask = _visible(sq, sk, causal, np)
    s = np.where(mask[None, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    seen = l > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(seen, np.log(np.where(seen, l, 1.0)) + m_safe, -np.inf)[..., 0]
    o = np.einsum("bhqk,bkhd->bhqd", p, vx) / np.where(seen, l, 1.0)
    o = np.where(seen, o, 0.0).transpose(0, 2, 1, 3)  # (b, sq, hq, d)
    return o.astype(np.float32), lse.astype(np.float32)


def attention_torch(q, k, v, causal: bool, softmax_scale: float | None = None,
                    max_score_bytes: int = 1 << 30):
    """float32 O (b, sq, hq, d) and LSE (b, hq, sq) with torch on q's device."""
    import torch

    b, sq, hq, d, sk, rep, scale = _problem(q.shape, k.shape, softmax_scale)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        qf = q.float().permute(0, 2, 1, 3)  # (b, hq, sq, d)
        kf = k.float().repeat_interleave(rep, dim=2).permute(0, 2, 3, 1)  # (b, hq, d, sk)
        vf = v.float().repeat_interleave(rep, dim=2).permute(0, 2, 1, 3)  # (b, hq, sk, d)
        o = torch.empty(b, hq, sq, d, device=q.device, dtype=torch.float32)
        lse = torch.empty(b, hq, sq, device=q.device, dtype=torch.float32)
        chunk = max(1, min(sq, max_score_bytes // max(1, b * hq * sk * 4)))
        for q0 in range(0, sq, chunk):
            q1 = min(sq, q0 + chunk)
            s = torch.matmul(qf[:, :, q0:q1], kf) * scale  # (b, hq, c, sk)
            mask = _visible(sq, sk, causal, torch, q0, q1, device=q.device)
            s.masked_fill_(~mask, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp(s - m_safe)
            l = p.sum(dim=-1, keepdim=True)
            seen = l > 0
            lse[:, :, q0:q1] = torch.where(seen, torch.log(l) + m_safe,
                                           torch.full_like(l, float("-inf")))[..., 0]
            oc = torch.matmul(p, vf) / torch.where(seen, l, torch.ones_like(l))
            o[:, :, q0:q1] = torch.where(seen, oc, torch.zeros_like(oc))
            del s, p
        return o.permute(0, 2, 1, 3).contiguous(), lse
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
