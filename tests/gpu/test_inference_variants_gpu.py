"""GPU tests of the model variants in the inference forms (issue 12) against a float64 numpy
reference: sliding windows, softcap and learnable sinks through flash_attn_with_kvcache (paged
with shuffled page tables of 16 and 256 rows, and dense caches; split-KV with 1, 3 and auto
splits; pack-GQA; GQA 1/4/8) and flash_attn_varlen_func (ragged batches with 0-, 1- and
17-token sequences, seqlen_q != seqlen_k per sequence). Outputs are NaN-poisoned before each
launch and every element is checked. Each test skips where the registry lacks the variant
(`make kernels ARCH=sm90` has gpt-oss's hd64 sink decode (window and full), a hd128 window
decode and varlen prefill and a hd256 softcap decode; `SET=inference` has the rest).
No cutlass import: this module collects on the device image.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cubinforge.runtime.registry_source import LocalSource, manifests
from _helpers import compare, download, softmax_rows
from test_inference_gpu import NO_GPU, poisoned, rand, upload

SRC = LocalSource()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]

WINDOWS = [(0, 0), (1, 1), (63, 0), (127, 127), (128, 0), (-1, 0), (16, -1)]
GQA = [(8, 8), (32, 8), (64, 8)]  # ratios 1, 4, 8


def _found():
    if NO_GPU is not None:
        return []
    return manifests(SRC, "fa3_fwd")[0]


FOUND = _found()


def need(dtype, head_dim, window=(-1, -1), causal=False, softcap=False, sink=False, **form):
    """Skip unless a variant with these axes exists (the window resolved as the runtime does)."""
    from cubinforge.runtime.variants import resolve
    va = resolve(causal, window, 1.0 if softcap else 0.0, sink)
    want = {"dtype": dtype, "head_dim": head_dim, "varlen": False, **va.axes, **form}
    ok = [m for m in FOUND if all(bool(m.axes.get(k)) == v if isinstance(v, bool) else m.axes.get(k) == v
                                  for k, v in want.items())]
    if not ok:
        pytest.skip(f"no fa3_fwd variant with {want} in {SRC.home}")


def i32(values):
    return upload(np.asarray(values, np.int32).view(np.uint32), "i32")


def attend(q, k, v, scale, causal=False, window=(-1, -1), softcap=0.0, sink=None):
    """float64 attention of one sequence, FlashAttention's conventions: q (nq, hq, d), k/v (nk,
    hkv, d) -> o (nq, hq, d), lse (hq, nq). Window bottom-right aligned (row i sees i + nk - nq
    - left .. + right, -1 unbounded; causal: right 0); softcap * tanh(s / softcap); a sink is
    one more logit per head in each row's denominator and LSE (no key: O = 0, LSE = sink)."""
    nq, hq, d = q.shape
    nk = k.shape[0]
    left, right = window
    if causal:
        right = 0
    if nk == 0 and sink is None:
        return np.zeros((nq, hq, v.shape[2])), np.full((hq, nq), -np.inf)
    g = hq // k.shape[1]
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(nq)[:, None] + nk - nq
    j = np.arange(nk)[None, :]
    keep = np.ones((nq, nk), bool)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    s = np.where(keep, s, -np.inf)
    if sink is not None:
        s = np.concatenate([s, np.broadcast_to(np.asarray(sink, np.float64)[:, None, None], (hq, nq, 1))], -1)
    p, lse = softmax_rows(s)
    if sink is not None:
        p = p[..., :-1]
    return np.einsum("hqk,khd->qhd", p, vv), lse


# --------------------------------------------------------------------------- kvcache

def run_decode(rng, *, b, sq, hq, hkv, lens, capacity, d, causal=True, window=(-1, -1), softcap=0.0, sink=False,
               num_splits=0, page_size=None, dtype="bf16"):
    from cubinforge.runtime import prepare_kvcache

    qh, qd = rand(rng, (b, sq, hq, d), dtype)
    if page_size is None:
        kh, kd = rand(rng, (b, capacity, hkv, d), dtype)
        vh, vd = rand(rng, (b, capacity, hkv, d), dtype)
        k_rows, v_rows, table = list(kh), list(vh), None
    else:
        pages = -(-capacity // page_size)
        pool = b * pages + 3
        kh, kd = rand(rng, (pool, page_size, hkv, d), dtype)
        vh, vd = rand(rng, (pool, page_size, hkv, d), dtype)
        t = rng.permutation(pool)[: b * pages].reshape(b, pages).astype(np.int32)
        k_rows = [kh[t[i]].reshape(-1, hkv, d) for i in range(b)]
        v_rows = [vh[t[i]].reshape(-1, hkv, d) for i in range(b)]
        table = upload(t.view(np.uint32), "i32")
    sink_h = rng.standard_normal(hq) * 2 if sink else None
    sink_d = upload(sink_h.astype(np.float32).view(np.uint32), "f32") if sink else None
    out, lse = poisoned((b, sq, hq, d), dtype), poisoned((b, hq, sq), "f32")
    scale = 1 / math.sqrt(d)
    prepared = prepare_kvcache(qd, kd, vd, cache_seqlens=i32(lens), page_table=table, causal=causal,
                               num_splits=num_splits, out=out, lse=lse, window_size=window, softcap=softcap,
                               learnable_sink=sink_d, source=SRC)
    prepared.run()
    ref_o = np.zeros((b, sq, hq, d))
    ref_lse = np.zeros((b, hq, sq))
    for i in range(b):
        n = int(lens[i])
        ref_o[i], ref_lse[i] = attend(qh[i], k_rows[i][:n], v_rows[i][:n], scale, causal, window, softcap, sink_h)
    what = (f"b={b} sq={sq} {hq}/{hkv} lens={list(lens)} causal={causal} window={window} softcap={softcap} "
            f"sink={sink} splits={num_splits}->{prepared.plan.num_splits} page={page_size} {prepared.kernels}")
    errs = compare(download(out), download(lse), ref_o, ref_lse, what, zero_empty_rows=True)
    assert not errs, "\n".join(errs)
    return prepared


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("hq,hkv", GQA)
@pytest.mark.parametrize("page_size", [16, 256])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
@pytest.mark.parametrize("sq", [1, 4])
def test_gpt_oss_paged_decode_window_and_sink(window, hq, hkv, page_size, num_splits, sq):
    """gpt-oss: hd64, a random sink per head, window (127/128, 0) or full (causal) layers;
    sequences of 0 and 1 keys (O = 0, LSE = sink), one shorter than the window, long ones."""
    need("bf16", 64, window, causal=True, sink=True, paged_kv=True)
    rng = np.random.default_rng(hash((window, hq, page_size, num_splits, sq)) % (1 << 32))
    run_decode(rng, b=5, sq=sq, hq=hq, hkv=hkv, lens=[0, 1, 50, 700, 1024], capacity=1024, d=64, window=window,
               sink=True, num_splits=num_splits, page_size=page_size)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("hq,hkv", GQA)
@pytest.mark.parametrize("page_size", [16, 256])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_window_paged_decode_hd128(window, hq, hkv, page_size, num_splits):
    """A sliding window at hd128 (Mistral), 3 query tokens against ragged caches, right sides
    as given (causal=False; (-1, 0) is the causal form); the splits are cut from the windowed
    range (an auto split count over a 2k cache)."""
    need("bf16", 128, window, causal=False, paged_kv=True)
    rng = np.random.default_rng(hash((window, hq, page_size, num_splits, 7)) % (1 << 32))
    run_decode(rng, b=4, sq=3, hq=hq, hkv=hkv, lens=[1, 130, 2000, 2048], capacity=2048, d=128, causal=False,
               window=window, num_splits=num_splits, page_size=page_size)


@pytest.mark.parametrize("softcap", [30.0, 50.0])
@pytest.mark.parametrize("hq,hkv", GQA)
@pytest.mark.parametrize("page_size", [16, 256])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_softcap_paged_decode_hd256(softcap, hq, hkv, page_size, num_splits):
    """Gemma-2's softcap at hd256 (causal decode, 2 query tokens)."""
    need("bf16", 256, causal=True, softcap=True, paged_kv=True)
    rng = np.random.default_rng(hash((softcap, hq, page_size, num_splits)) % (1 << 32))
    run_decode(rng, b=3, sq=2, hq=hq, hkv=hkv, lens=[0, 333, 1500], capacity=1536, d=256, softcap=softcap,
               num_splits=num_splits, page_size=page_size)


@pytest.mark.parametrize("window,softcap,sink", [((63, 0), 0.0, True), ((128, 0), 0.0, False), ((-1, -1), 30.0, False),
                                                  ((127, 127), 0.0, True)])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
def test_dense_cache_decode_variants(window, softcap, sink, d, num_splits):
    """The dense-cache forms (SET=inference), non-causal where the window has a right side."""
    causal = window[1] == 0 or window == (-1, -1)
    # 32/8 heads decode packs GQA, and 0 (auto) splits this cache: the forms the call needs,
    # which SET=inference builds and the default set only partly.
    need("bf16", d, window, causal=causal, softcap=bool(softcap), sink=sink, paged_kv=False, pack_gqa=True,
         split_kv=num_splits != 1)
    rng = np.random.default_rng(hash((window, softcap, sink, d, num_splits)) % (1 << 32))
    run_decode(rng, b=3, sq=4, hq=32, hkv=8, lens=[1, 17, 900], capacity=1024, d=d, causal=causal, window=window,
               softcap=softcap, sink=sink, num_splits=num_splits)


# --------------------------------------------------------------------------- varlen

def run_varlen(rng, slots_q, slots_k, *, hq, hkv, d, causal=False, window=(-1, -1), softcap=0.0, sink=False,
               page_size=None, dtype="bf16", spare=3):
    from cubinforge.runtime import flash_attn_varlen_func

    b = len(slots_q)
    cu_q = [0] + np.cumsum(slots_q).tolist()
    total_q = cu_q[-1] + spare
    qh, qd = rand(rng, (total_q, hq, d), dtype)
    if page_size is None:
        cu_k = [0] + np.cumsum(slots_k).tolist()
        kh, kd = rand(rng, (cu_k[-1] + spare, hkv, d), dtype)
        vh, vd = rand(rng, (cu_k[-1] + spare, hkv, d), dtype)
        k_rows = [kh[cu_k[i]:cu_k[i + 1]] for i in range(b)]
        v_rows = [vh[cu_k[i]:cu_k[i + 1]] for i in range(b)]
        table, cu_k_arg, used_k = None, i32(cu_k), None
    else:
        pages = max(1, -(-max(max(slots_k), 1) // page_size))
        pool = b * pages + 5
        kh, kd = rand(rng, (pool, page_size, hkv, d), dtype)
        vh, vd = rand(rng, (pool, page_size, hkv, d), dtype)
        t = rng.permutation(pool)[: b * pages].reshape(b, pages).astype(np.int32)
        k_rows = [kh[t[i]].reshape(-1, hkv, d)[: slots_k[i]] for i in range(b)]
        v_rows = [vh[t[i]].reshape(-1, hkv, d)[: slots_k[i]] for i in range(b)]
        table, cu_k_arg, used_k = upload(t.view(np.uint32), "i32"), None, i32(slots_k)
    sink_h = rng.standard_normal(hq) * 2 if sink else None
    sink_d = upload(sink_h.astype(np.float32).view(np.uint32), "f32") if sink else None
    out, lse = poisoned((total_q, hq, d), dtype), poisoned((hq, total_q), "f32")
    scale = 1 / math.sqrt(d)
    flash_attn_varlen_func(qd, kd, vd, i32(cu_q), cu_k_arg, max(slots_q), max(slots_k), seqused_k=used_k,
                           page_table=table, causal=causal, out=out, lse=lse, window_size=window, softcap=softcap,
                           learnable_sink=sink_d, source=SRC)
    got_o, got_lse = download(out), download(lse)
    want_o = np.full((total_q, hq, d), np.nan)
    want_lse = np.full((hq, total_q), np.nan)
    for i in range(b):
        r0, n = cu_q[i], slots_q[i]
        want_o[r0:r0 + n], want_lse[:, r0:r0 + n] = attend(qh[r0:r0 + n], k_rows[i], v_rows[i], scale, causal,
                                                           window, softcap, sink_h)
    from test_varlen_gpu import compare as compare_varlen
    compare_varlen(got_o, got_lse, want_o, want_lse,
                   f"slots_q={slots_q} slots_k={slots_k} {hq}/{hkv} causal={causal} window={window} "
                   f"softcap={softcap} sink={sink} page={page_size} hd{d}")


SLOTS_Q = [0, 1, 17, 300, 129, 1, 200]
SLOTS_K = [5, 0, 17, 520, 100, 1, 260]  # seqlen_q != seqlen_k both ways; an empty key set


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("hq,hkv", GQA)
def test_window_varlen_prefill_hd128(window, hq, hkv):
    """Both window sides as given (causal=False; (-1, 0) is the causal form), per sequence."""
    need("bf16", 128, window, causal=False, varlen=True, paged_kv=False)
    rng = np.random.default_rng(hash((window, hq, 3)) % (1 << 32))
    run_varlen(rng, SLOTS_Q, SLOTS_K, hq=hq, hkv=hkv, d=128, causal=False, window=window)


@pytest.mark.parametrize("window", [(0, 0), (1, 1), (63, 63), (127, 0), (128, 0), (-1, 0)])
@pytest.mark.parametrize("page_size", [16, 256])
def test_window_paged_chunked_prefill(window, page_size):
    need("bf16", 128, window, causal=False, varlen=True, paged_kv=True)
    rng = np.random.default_rng(hash((window, page_size)) % (1 << 32))
    run_varlen(rng, [0, 1, 17, 300], [1, 1, 600, 300], hq=32, hkv=8, d=128, causal=False, window=window,
               page_size=page_size)


@pytest.mark.parametrize("window", [(128, 0), (-1, 0), (0, 0)])
@pytest.mark.parametrize("hq,hkv", GQA)
def test_gpt_oss_varlen_prefill_with_sink(window, hq, hkv):
    need("bf16", 64, window, causal=True, sink=True, varlen=True, paged_kv=False)
    rng = np.random.default_rng(hash((window, hq, 11)) % (1 << 32))
    run_varlen(rng, SLOTS_Q, SLOTS_K, hq=hq, hkv=hkv, d=64, causal=True, window=window, sink=True)


@pytest.mark.parametrize("softcap", [30.0, 50.0])
def test_softcap_varlen_prefill(softcap):
    need("bf16", 128, causal=True, softcap=True, varlen=True, paged_kv=False)
    rng = np.random.default_rng(int(softcap))
    run_varlen(rng, SLOTS_Q, SLOTS_K, hq=16, hkv=4, d=128, causal=True, softcap=softcap)
