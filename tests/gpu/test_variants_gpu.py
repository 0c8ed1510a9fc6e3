"""GPU tests of the model variants (sliding window, softcap, learnable sink, value head dim !=
head dim) against a float64
numpy reference, through flash_attn_func, with NaN-poisoned outputs.

Each test runs over every variant of its kind in the local registry ($CUBINFORGE_HOME,
default ./.cubinforge; build them with `cubinforge build --arch sm90 --set variants` and the
default set) and skips where there is none. Shapes are not tile multiples, seqlen_q !=
seqlen_k both ways, GQA ratios 1, 4 and 8.
"""

from __future__ import annotations

import math
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _helpers import numerics_checked  # noqa: E402
from test_runtime_gpu import (ATOL_LSE, NO_GPU, RTOL_O, download, from_bits, host_bits,  # noqa: E402
                              poisoned, upload, wrap)

from cubinforge.runtime import flash_attn_func, last_launch  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]


def _variants():
    """fa3_fwd manifests for the device, by kind."""
    if NO_GPU is not None:
        return {}
    from cubinforge.runtime import driver
    from cubinforge.runtime.registry_source import default_source, manifests
    arch = driver.device_arch(0)
    found, _ = manifests(default_source(), "fa3_fwd")
    found = [m for m in found if m.contract.arch == arch
             and not any(m.axes.get(a) for a in ("varlen", "paged_kv", "split_kv", "pack_gqa"))]
    kinds = {"local": [], "softcap": [], "learnable_sink": [], "head_dim_v": []}
    for m in sorted(found, key=lambda m: m.variant):
        for kind in ("local", "softcap", "learnable_sink"):
            if m.axes.get(kind):
                kinds[kind].append(m)
        if m.axes.get("head_dim_v", m.axes["head_dim"]) != m.axes["head_dim"]:
            kinds["head_dim_v"].append(m)
    return kinds


VARIANTS = _variants()


def _names(kind):
    return [m.variant for m in VARIANTS.get(kind, [])] or [f"no-{kind}-variant"]


def _manifest(kind, name):
    for m in VARIANTS.get(kind, []):
        if m.variant == name:
            return m
    pytest.skip(f"the local registry has no {kind} variant for this device "
                f"(build: cubinforge build --arch sm90 --set variants)")


# --------------------------------------------------------------------------- reference

def reference(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, sink=None):
    """O and natural-log LSE in float32 (the inputs are bf16/fp16 values, exact in float32;
    float32's own error, ~1e-6, is far below the tolerances, and it halves the host time). Masks bottom-right aligned (FlashAttention): row i sees
    j with i + sk - sq - left <= j <= i + sk - sq + right, -1 unbounded, causal = right 0.
    softcap: softcap * tanh(s * scale / softcap). sink (hq,): one more logit in each row's
    denominator and LSE (FA4): a row with no key gets O = 0 and LSE = sink."""
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    scale = np.float32(scale)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    kk = np.repeat(k, g, axis=2).transpose(0, 2, 3, 1)       # (b, hq, d, sk)
    vv = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)       # (b, hq, sk, dv)
    s = np.matmul(q.transpose(0, 2, 1, 3), kk) * scale        # (b, hq, sq, sk)
    if softcap > 0:
        s = np.float32(softcap) * np.tanh(s / np.float32(softcap))
    left, right = window
    if causal:
        right = 0
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    keep = np.ones((sq, sk), bool)
    if left >= 0:
        keep &= j >= i + sk - sq - left
    if right >= 0:
        keep &= j <= i + sk - sq + right
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink.astype(np.float32)[None, :, None, None])
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    if sink is not None:
        l = l + np.exp(sink.astype(np.float32)[None, :, None, None] - m)
    o = np.matmul(p / np.where(l == 0, 1.0, l), vv).transpose(0, 2, 1, 3)
    lse = np.where(l[..., 0] == 0, -np.inf, (m + np.log(np.where(l == 0, 1.0, l)))[..., 0])
    return (o.astype(np.float64), lse.astype(np.float64), ~keep.any(-1),
            float(np.abs(np.where(np.isfinite(s), s, 0.0)).max()))


# tanh.approx.f32 (the MUFU's tanh, FA4's too) has a relative error of at most 2^-11, so a
# capped logit x carries up to |x| * 2^-11 of error before the softmax: LSE moves by up to
# that, and O's weights by up to twice it. Softcap cases add this to the dense tolerances.
TANH_APPROX_REL = 2.0 ** -11


def compare(o, lse, ref_o, ref_lse, no_key_rows, what, extra_tol: float = 0.0) -> list[str]:
    """Every element written (no NaN left of the poison), rows that see no key exactly 0,
    O within RTOL_O relative (Frobenius) and every finite LSE within ATOL_LSE (each plus
    `extra_tol`, the softcap's tanh error)."""
    rtol_o, atol_lse = RTOL_O + 2 * extra_tol, ATOL_LSE + extra_tol
    errs = []
    for name, x in (("O", o), ("LSE", lse)):
        if np.isnan(x).any():
            errs.append(f"{what}: {int(np.isnan(x).sum())} {name} elements never written (NaN)")
    if errs:
        return errs
    if no_key_rows.any() and np.abs(o[:, no_key_rows]).max() != 0:
        errs.append(f"{what}: rows that see no key must have O = 0")
    rel = np.linalg.norm(o - ref_o) / max(np.linalg.norm(ref_o), 1e-30)
    if not rel <= rtol_o:
        errs.append(f"{what}: O rel err {rel:.2e} > {rtol_o:.2e}")
    inf_ref = np.isinf(ref_lse)
    if (lse[inf_ref] != ref_lse[inf_ref]).any():
        errs.append(f"{what}: LSE of rows with no key (and no sink) should be -inf")
    fin = ~inf_ref
    if fin.any():
        lerr = np.abs(lse[fin] - ref_lse[fin]).max()
        if not lerr <= atol_lse:
            errs.append(f"{what}: LSE abs err {lerr:.2e} > {atol_lse:.2e}")
    if not errs:
        numerics_checked()
    return errs


def inputs(rng, b, sq, sk, hq, hkv, d, dtype, dv=None):
    hosts, devs = [], []
    for shape in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, dv or d)):
        bits = host_bits(rng.standard_normal(shape), dtype)
        hosts.append(from_bits(bits, dtype))
        devs.append(upload(bits, dtype))
    return hosts, devs


def run_case(m, rng, shape, *, causal=False, window=(-1, -1), softcap=0.0, sink=False, scale=None):
    """One flash_attn_func call on poisoned outputs against the reference; the error list."""
    dtype, d = m.axes["dtype"], int(m.axes["head_dim"])
    dv = int(m.axes.get("head_dim_v", d))
    b, sq, sk, hq, hkv = shape
    (qh, kh, vh), (q, k, v) = inputs(rng, b, sq, sk, hq, hkv, d, dtype, dv)
    o, lse = poisoned((b, sq, hq, dv), dtype), poisoned((b, hq, sq), "f32")
    sink_h = sink_d = None
    if sink:
        sink_h = (rng.standard_normal(hq) * 2.0).astype(np.float32)
        sink_d = upload(sink_h.view(np.uint32), "f32")
    what = (f"{m.variant} b={b} sq={sq} sk={sk} hq={hq} hkv={hkv} dv={dv} causal={causal} window={window} "
            f"softcap={softcap} sink={sink}")
    try:
        flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), softmax_scale=scale, causal=causal,
                        out=wrap(o, dtype), lse=lse, window_size=window, softcap=softcap,
                        learnable_sink=sink_d)
    except Exception as e:                  # one case's failure must not hide the others'
        return [f"{what}: {type(e).__name__}: {e}"]
    ran = last_launch().variant
    ref_o, ref_lse, no_key, logit_max = reference(qh, kh, vh, scale or 1 / math.sqrt(d), causal, window,
                                                  softcap, sink_h)
    extra = TANH_APPROX_REL * logit_max if softcap > 0 else 0.0
    errs = compare(download(wrap(o, dtype)), download(lse), ref_o, ref_lse, no_key, f"{what} [{ran}]", extra)
    return errs, ran


def _check(results):
    errs, ran = [], []
    for r in results:
        if isinstance(r, list):
            errs += r
        else:
            errs += r[0]
            ran.append(r[1])
    return errs, ran


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): not tile multiples, sq != sk both ways,
# GQA 4, 1, 8; LONG is long enough that a 4096 window cuts keys off.
WINDOW_SHAPES = [(1, 300, 517, 4, 1), (2, 257, 190, 8, 8), (1, 555, 600, 8, 1)]
LONG = (1, 133, 4500, 2, 1)
WINDOWS = [(0, 0), (1, 0), (63, 0), (64, 0), (127, 0), (4096, 0), (128, 128), (1, 1), (63, 64),
           (5, 200), (-1, 33), (33, -1), (0, -1)]


@pytest.mark.parametrize("name", _names("local"))
def test_sliding_window(name):
    m = _manifest("local", name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    results = []
    for n, w in enumerate(WINDOWS):
        # Two of the shapes per window, in turn, and the long one where the window is long.
        shapes = [WINDOW_SHAPES[n % 3], WINDOW_SHAPES[(n + 1) % 3]] + ([LONG] if max(w) >= 128 else [])
        for i, shape in enumerate(shapes):
            results.append(run_case(m, rng, shape, window=w, softcap=30.0 if m.axes.get("softcap") else 0.0,
                                    sink=bool(m.axes.get("learnable_sink")), scale=None if i % 2 else 0.07))
    errs, ran = _check(results)
    assert not errs, "\n".join(errs)
    # The right kernel ran: a local window goes to a local variant of this dtype and head dim.
    assert ran and all("-local" in r for r in ran), sorted(set(ran))


def test_causal_window_is_the_causal_path():
    """window (-1, 0) and causal=True with window (-1, -1) both run the causal kernel."""
    ms = [m for m in VARIANTS.get("local", [])]
    if not ms:
        pytest.skip("no local variant built")
    m = ms[0]
    rng = np.random.default_rng(7)
    errs = []
    for kw in (dict(window=(-1, 0)), dict(causal=True), dict(causal=True, window=(64, -1))):
        r = run_case(m, rng, (2, 300, 517, 4, 1), **kw)
        if isinstance(r, list):
            errs += r
            continue
        errs += r[0]
        want = "-local" if kw.get("window", (-1, -1))[0] >= 0 else "-causal"
        if want not in r[1]:
            errs.append(f"{kw}: ran {r[1]}, expected a {want} variant")
    assert not errs, "\n".join(errs)


SOFTCAP_SHAPES = [(1, 300, 517, 4, 4), (2, 517, 300, 8, 2), (1, 600, 555, 8, 1)]


@pytest.mark.parametrize("name", _names("softcap"))
def test_softcap(name):
    m = _manifest("softcap", name)
    if m.axes.get("local"):
        pytest.skip("softcap with a window runs in test_sliding_window")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    causal = bool(m.axes["causal"])
    results = []
    for cap in (1.0, 30.0, 50.0):
        for n, shape in enumerate(SOFTCAP_SHAPES):
            # larger scales as well, so the cap bends the scores: c * tanh(s / c) differs from s
            # by ~s^3 / (3 c^2), 0.2 at s = 12, c = 50 (the test can tell a missing cap)
            results.append(run_case(m, rng, shape, causal=causal, softcap=cap,
                                    sink=bool(m.axes.get("learnable_sink")),
                                    scale=None if n % 2 else (2.0 if cap == 1.0 else 4.0)
                                    / math.sqrt(int(m.axes["head_dim"]))))
    errs, ran = _check(results)
    assert not errs, "\n".join(errs)
    assert ran and all("-softcap" in r for r in ran), sorted(set(ran))


SINK_SHAPES = [(1, 300, 517, 4, 1), (2, 517, 300, 8, 8), (1, 600, 555, 8, 2), (1, 64, 1, 4, 4)]


@pytest.mark.parametrize("name", _names("learnable_sink"))
def test_learnable_sink(name):
    m = _manifest("learnable_sink", name)
    if m.axes.get("local"):
        pytest.skip("sink with a window runs in test_sliding_window")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    causal = bool(m.axes["causal"])
    results = [run_case(m, rng, shape, causal=causal, sink=True, scale=None if n % 2 else 0.1)
               for n, shape in enumerate(SINK_SHAPES)]
    errs, ran = _check(results)
    assert not errs, "\n".join(errs)
    assert ran and all("-sink" in r for r in ran), sorted(set(ran))


def test_sink_row_with_no_key_gets_the_sink_as_lse():
    """Causal with seqlen_q > seqlen_k: the first rows see no key; FA4 gives them O = 0 and
    LSE = sink (the sink is the row's only term)."""
    ms = [m for m in VARIANTS.get("learnable_sink", []) if m.axes["causal"] and not m.axes.get("local")]
    if not ms:
        pytest.skip("no causal sink variant built")
    m = ms[0]
    dtype, d = m.axes["dtype"], int(m.axes["head_dim"])
    rng = np.random.default_rng(11)
    (qh, kh, vh), (q, k, v) = inputs(rng, 1, 200, 50, 4, 2, d, dtype)
    sink = np.array([0.5, -1.0, 2.0, 3.5], np.float32)
    o, lse = poisoned((1, 200, 4, d), dtype), poisoned((1, 4, 200), "f32")
    flash_attn_func(wrap(q, dtype), wrap(k, dtype), wrap(v, dtype), causal=True, out=wrap(o, dtype), lse=lse,
                    learnable_sink=upload(sink.view(np.uint32), "f32"))
    got_o, got_lse = download(wrap(o, dtype)), download(lse)
    no_key = np.arange(200) < 150                      # row i sees keys j <= i - 150
    assert (got_o[0, no_key] == 0).all()
    np.testing.assert_allclose(got_lse[0][:, no_key], np.repeat(sink[:, None], no_key.sum(), 1), atol=1e-5)
    ref_o, ref_lse, _, _ = reference(qh, kh, vh, 1 / math.sqrt(d), True, sink=sink)
    errs = compare(got_o, got_lse, ref_o, ref_lse, no_key, "sink, rows with no key")
    assert not errs, "\n".join(errs)


DV_SHAPES = [(1, 300, 517, 4, 1), (2, 517, 300, 8, 8), (1, 600, 555, 8, 2), (3, 77, 130, 4, 4)]


@pytest.mark.parametrize("name", _names("head_dim_v"))
def test_value_head_dim(name):
    """O and the PV GEMM use head_dim_v; v is (b, sk, hkv, head_dim_v), o (b, sq, hq, head_dim_v)."""
    m = _manifest("head_dim_v", name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    causal = bool(m.axes["causal"])
    results = [run_case(m, rng, shape, causal=causal, scale=None if n % 2 else 0.09)
               for n, shape in enumerate(DV_SHAPES)]
    errs, ran = _check(results)
    assert not errs, "\n".join(errs)
    assert ran and all(r == m.variant for r in ran), sorted(set(ran))
