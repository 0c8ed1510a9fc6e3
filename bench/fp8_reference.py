"""numpy references for FP8: the e4m3 codec, fp8_quant's quantisation (per-head or per-block
scales, optional random-sign Hadamard rotation) and float64 attention on dequantised inputs.

Used by tests/gpu/test_fp8_gpu.py (element by element) and bench/fp8.py (error study);
numpy only, so it runs on the GPU machine (no DSL there).
"""

from __future__ import annotations

import numpy as np

from cubinforge.generator.kernels.fp8_quant_sm90.signs import hadamard_sign

E4M3_MAX = 448.0


def _e4m3_table() -> np.ndarray:
    """float64 value of each e4m3fn byte (0x7F and 0xFF are NaN)."""
    vals = np.empty(256)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        vals[b] = -v if s else v
    return vals


E4M3_VALUES = _e4m3_table()


def e4m3_decode(bits: np.ndarray) -> np.ndarray:
    return E4M3_VALUES[np.asarray(bits, np.uint8)]


def e4m3_round(x: np.ndarray) -> np.ndarray:
    """Round to the nearest e4m3 value, ties to even (cvt.rn), saturating at +-448."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -6)))
    ulp = 2.0 ** (e - 3)
    r = np.round(a / ulp) * ulp  # np.round: half to even
    return np.sign(x) * np.minimum(r, E4M3_MAX)


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """Bytes of e4m3_round(x) (+0 for zero)."""
    r = e4m3_round(x)
    pos = E4M3_VALUES[:127]  # bytes 0x00..0x7E: 0 .. 448, increasing
    idx = np.searchsorted(pos, np.abs(r))
    # The sign bit survives rounding to zero (-tiny -> 0x80), as cvt.rn does.
    return (idx + np.where(np.signbit(r), 128, 0)).astype(np.uint8)


def same_bytes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise e4m3 byte equality with +0 (0x00) and -0 (0x80) taken as equal."""
    a, b = np.asarray(a, np.uint8), np.asarray(b, np.uint8)
    return np.where(a == 0x80, 0, a) == np.where(b == 0x80, 0, b)


def hadamard_matrix(d: int, seed: int) -> np.ndarray:
    """R = H D / sqrt(d): rows rotated as x @ R.T (H Sylvester, D the seed's signs)."""
    h = np.array([[1.0]])
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    signs = np.array([hadamard_sign(seed, c) for c in range(d)], np.float64)
    return h * signs[None, :] / np.sqrt(d)


def rotate(x: np.ndarray, seed: int) -> np.ndarray:
    """x (..., d) -> x @ R.T, what the kernel applies to each token row."""
    return x @ hadamard_matrix(x.shape[-1], seed).T


def quantize(x: np.ndarray, block: int | None = None, hadamard: bool = False, seed: int = 0,
             f32: bool = True):
    """(bytes, descale (b, h, blocks), dequantised float64) as fp8_quant computes them.

    With f32, the rotation and the scale run in float32 as in the kernel (rounding of the
    rotation's sums may still differ in order); else all in float64."""
    b, s, h, d = x.shape
    v = np.asarray(x, np.float64)
    if hadamard:
        v = rotate(v, seed)
    if f32:
        v = v.astype(np.float32)
    tokens = s if block is None else min(block, s)
    nb = -(-s // tokens)
    desc = np.ones((b, h, nb), np.float32)
    out = np.empty((b, s, h, d), np.uint8)
    for i in range(nb):
        blk = v[:, i * tokens:(i + 1) * tokens]  # (b, t, h, d)
        amax = np.abs(blk).max(axis=(1, 3)).astype(np.float32)  # (b, h)
        scale = np.where(amax > 0, np.float32(E4M3_MAX) / np.where(amax > 0, amax, 1), 1).astype(np.float32)
        desc[:, :, i] = np.where(amax > 0, amax / np.float32(E4M3_MAX), 1)
        scaled = (blk * scale[:, None, :, None]).astype(np.float32) if f32 else blk * scale[:, None, :, None]
        out[:, i * tokens:(i + 1) * tokens] = e4m3_encode(scaled)
    deq = dequantize(out, desc, tokens)
    return out, desc, deq


def dequantize(bits: np.ndarray, descale: np.ndarray, block_tokens: int) -> np.ndarray:
    """float64 x ~= e4m3(bits) * descale of each token's block; descale (b, h, blocks) or (b, h)."""
    desc = np.asarray(descale, np.float64)
    if desc.ndim == 2:
        desc = desc[:, :, None]
    s = bits.shape[1]
    per_token = np.repeat(desc, block_tokens, axis=2)[:, :, :s]  # (b, h, s)
    return e4m3_decode(bits) * per_token.transpose(0, 2, 1)[..., None]


def attention(q, k, v, scale=None, causal=False):
    """float64 attention; q (b, sq, hq, d), k/v (b, sk, hkv, d); causal bottom-right aligned."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    g = hq // hkv
    kk = np.repeat(k, g, axis=2).transpose(0, 2, 3, 1)
    vv = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)
    s = np.matmul(q.transpose(0, 2, 1, 3), kk) * scale
    if causal:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        s = np.where(j <= i + sk - sq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    return np.matmul(p / np.where(l == 0, 1.0, l), vv).transpose(0, 2, 1, 3)


def outlier_inputs(rng, b, s, h, d, frac=0.01, big=10.0):
    """FA3's error-study inputs: N(0,1) with a fraction of entries drawn with std `big`."""
    x = rng.standard_normal((b, s, h, d))
    mask = rng.random((b, s, h, d)) < frac
    return np.where(mask, rng.standard_normal((b, s, h, d)) * big, x)
