"""e4m3 KV-cache decode and varlen prefill on the GPU (issue 13). Decode:
flash_attn_with_kvcache with an FP8 cache (q, k_cache, v_cache e4m3, V row-major as the
cache holds it), per-(batch, head_kv) descales,
dense or paged (pages 16 / 256, shuffled), split 1 or auto (then the bf16 combine),
pack-GQA at GQA 1 and 8, against a float64 reference on the e4m3-decoded values times the
descales; outputs NaN-poisoned, so a row never written shows. Varlen: packed ragged e4m3
sequences and chunked prefill against an e4m3 paged cache, descales per sequence.

No cutlass import: this module collects on the device image.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cubinforge.bench.fp8_reference import e4m3_decode, e4m3_encode
from _helpers import compare, download, gpu_probe
from test_fp8_gpu import ATOL_LSE_FP8 as ATOL_LSE  # the dense e4m3 forward's tolerances: one home
from test_fp8_gpu import RTOL_FP8
from test_fp8_gpu import upload as upload_bits  # e4m3 / f32 / bf16 bits, CuPy or torch
from test_inference_gpu import SRC, need, need_combine, poisoned, reference, upload

NO_GPU, ARCH = gpu_probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]

# P goes to the PV GEMM in e4m3: its rounding alone gives ~2e-2 relative error on O (the
# dense FP8 test's measure); a wrong layout, permutation or descale gives ~0.3 - 1. LSE comes
# from fp32 scores of exactly the e4m3 values, as bf16's does.


def e4m3_rand(rng, shape):
    """(bytes, decoded float64) of standard normal values rounded to e4m3."""
    bits = e4m3_encode(rng.standard_normal(shape))
    return bits, e4m3_decode(bits)


def run_fp8_case(rng, *, b, sq, hq, hkv, lens, capacity, causal, num_splits, page_size=None, d=128,
                 batch_idx=None):
    """One call; the descales are random per (q's batch row, head_kv). batch_idx: a dense cache
    of len(batch_idx) rows, row b of q reading cache row batch_idx[b]."""
    from cubinforge.runtime import prepare_kvcache

    g = hq // hkv
    desc = {n: rng.uniform(0.25, 2.0, (b, hkv)).astype(np.float32) for n in "qkv"}
    q_bits, q_dec = e4m3_rand(rng, (b, sq, hq, d))
    q = q_dec * np.repeat(desc["q"], g, axis=1)[:, None, :, None]
    table = None
    if page_size is None:
        rows = b if batch_idx is None else max(batch_idx) + 2
        k_bits, k_dec = e4m3_rand(rng, (rows, capacity, hkv, d))
        v_bits, v_dec = e4m3_rand(rng, (rows, capacity, hkv, d))
        src = list(range(b)) if batch_idx is None else list(batch_idx)
        k_rows = [k_dec[src[i]] for i in range(b)]
        v_rows = [v_dec[src[i]] for i in range(b)]
    else:
        pages = -(-capacity // page_size)
        pool = b * pages + 3
        k_bits, k_dec = e4m3_rand(rng, (pool, page_size, hkv, d))
        v_bits, v_dec = e4m3_rand(rng, (pool, page_size, hkv, d))
        tab = rng.permutation(pool)[: b * pages].reshape(b, pages).astype(np.int32)
        k_rows = [k_dec[tab[i]].reshape(-1, hkv, d) for i in range(b)]
        v_rows = [v_dec[tab[i]].reshape(-1, hkv, d) for i in range(b)]
        table = upload(tab.view(np.uint32), "i32")
    # The descales scale what row b of q attends to, whichever cache row holds it.
    k_rows = [k_rows[i] * desc["k"][i][None, :, None] for i in range(b)]
    v_rows = [v_rows[i] * desc["v"][i][None, :, None] for i in range(b)]
    seqlens = upload(np.asarray(lens, np.int32).view(np.uint32), "i32")
    out, lse = poisoned((b, sq, hq, d), "bf16"), poisoned((b, hq, sq), "f32")
    bi = None if batch_idx is None else upload(np.asarray(batch_idx, np.int32).view(np.uint32), "i32")
    kw = {f"{n}_descale": upload_bits(desc[n], "f32") for n in "qkv"}
    prepared = prepare_kvcache(upload_bits(q_bits, "e4m3"), upload_bits(k_bits, "e4m3"), upload_bits(v_bits, "e4m3"),
                               cache_seqlens=seqlens, page_table=table, cache_batch_idx=bi, causal=causal,
                               num_splits=num_splits, out=out, lse=lse, source=SRC, **kw)
    prepared.run()
    ref_o, ref_lse = reference(q, k_rows, v_rows, lens, 1 / math.sqrt(d), causal)
    what = (f"e4m3 hd{d} b={b} sq={sq} {hq}/{hkv} lens={list(lens)[:6]} causal={causal} splits={num_splits}"
            f"->{prepared.plan.num_splits} page={page_size} {prepared.kernels}")
    errs = compare(download(out), download(lse), ref_o, ref_lse, what, rtol=RTOL_FP8, atol=ATOL_LSE,
                   zero_empty_rows=True)
    assert not errs, "\n".join(errs)
    return prepared


LENS = [0, 1, 37, 300, 1000, 2049]  # an empty sequence, a partial first page, many blocks


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("page_size", [16, 256, None], ids=["page16", "page256", "dense"])
@pytest.mark.parametrize("hq,hkv", [(8, 8), (32, 4)], ids=["gqa1", "gqa8"])
@pytest.mark.parametrize("num_splits", [1, 0], ids=["split1", "auto"])
def test_e4m3_decode(d, page_size, hq, hkv, num_splits):
    need("e4m3", d, paged_kv=page_size is not None, pack_gqa=True)
    if num_splits != 1:
        need_combine("bf16", d)
    rng = np.random.default_rng(d + hq + (page_size or 1) + num_splits)
    p = run_fp8_case(rng, b=len(LENS), sq=1, hq=hq, hkv=hkv, lens=LENS, capacity=2304, causal=True,
                     num_splits=num_splits, page_size=page_size, d=d)
    assert p.out is not None
    if num_splits == 0:
        # Few tiles (6 sequences x 4-8 packed heads), long keys: auto splits them.
        assert p.plan.num_splits > 1 and p.kernels[-1].startswith("attn-combine"), p.kernels


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_e4m3_speculative_paged(causal, num_splits):
    """4 query tokens per sequence: the causal rows each see one more key (bottom-right)."""
    need("e4m3", 128, paged_kv=True, pack_gqa=True, causal=causal)
    if num_splits != 1:
        need_combine("bf16", 128)
    rng = np.random.default_rng(17 + num_splits + causal)
    run_fp8_case(rng, b=3, sq=4, hq=32, hkv=4, lens=[4, 129, 700], capacity=768, causal=causal,
                 num_splits=num_splits, page_size=16)


def test_e4m3_descales_follow_q_batch_under_cache_batch_idx():
    """cache_batch_idx: row b of q reads cache row idx[b]; its descales are row b's (FA3's)."""
    need("e4m3", 128, paged_kv=True, pack_gqa=True)
    rng = np.random.default_rng(5)
    run_fp8_case(rng, b=3, sq=1, hq=16, hkv=2, lens=[100, 513, 64], capacity=1024, causal=True, num_splits=0,
                 batch_idx=[4, 0, 2])  # cache rows 1, 3, 5 unused


def test_e4m3_cache_refuses_append_and_bf16_q():
    need("e4m3", 128, paged_kv=True, pack_gqa=True)
    from cubinforge.runtime import InputError, flash_attn_with_kvcache
    rng = np.random.default_rng(0)
    k8 = upload_bits(e4m3_rand(rng, (4, 16, 2, 128))[0], "e4m3")
    q8 = upload_bits(e4m3_rand(rng, (1, 1, 4, 128))[0], "e4m3")
    table = upload(np.arange(4, dtype=np.int32).reshape(1, 4).view(np.uint32), "i32")
    with pytest.raises(InputError, match="appending k/v into an e4m3 cache is not built"):
        flash_attn_with_kvcache(q8, k8, k8, k=q8, v=q8, cache_seqlens=3, page_table=table, source=SRC)
    with pytest.raises(InputError, match="an e4m3 cache takes e4m3 q"):
        flash_attn_with_kvcache(poisoned((1, 1, 4, 128), "bf16"), k8, k8, cache_seqlens=3, page_table=table,
                                source=SRC)


# --------------------------------------------------------------------------- varlen prefill

def run_fp8_varlen(rng, slots, *, hq, hkv, causal, d=128, page_size=None, spare=3):
    """Self-attention over packed e4m3 sequences (or chunked prefill against an e4m3 paged
    cache, the keys per sequence = its query slots), descales random per (sequence, head_kv)."""
    from cubinforge.runtime import flash_attn_varlen_func
    from test_varlen_gpu import attend, cumsum0, i32

    b, g = len(slots), hq // hkv
    cu = cumsum0(slots)
    total = cu[-1] + spare
    desc = {n: rng.uniform(0.25, 2.0, (b, hkv)).astype(np.float32) for n in "qkv"}
    q_bits, q_dec = e4m3_rand(rng, (total, hq, d))
    if page_size is None:
        k_bits, k_dec = e4m3_rand(rng, (total, hkv, d))
        v_bits, v_dec = e4m3_rand(rng, (total, hkv, d))
        k_rows = [k_dec[cu[i]:cu[i + 1]] for i in range(b)]
        v_rows = [v_dec[cu[i]:cu[i + 1]] for i in range(b)]
        table, cu_k, used_k = None, i32(cu), None
    else:
        pages = max(1, -(-max(slots) // page_size))
        pool = b * pages + 5
        k_bits, k_dec = e4m3_rand(rng, (pool, page_size, hkv, d))
        v_bits, v_dec = e4m3_rand(rng, (pool, page_size, hkv, d))
        t = rng.permutation(pool)[: b * pages].reshape(b, pages).astype(np.int32)
        k_rows = [k_dec[t[i]].reshape(-1, hkv, d)[: slots[i]] for i in range(b)]
        v_rows = [v_dec[t[i]].reshape(-1, hkv, d)[: slots[i]] for i in range(b)]
        table, cu_k, used_k = upload(t.view(np.uint32), "i32"), None, i32(slots)
    out, lse = poisoned((total, hq, d), "bf16"), poisoned((hq, total), "f32")
    kw = {f"{n}_descale": upload_bits(desc[n], "f32") for n in "qkv"}
    flash_attn_varlen_func(upload_bits(q_bits, "e4m3"), upload_bits(k_bits, "e4m3"), upload_bits(v_bits, "e4m3"),
                           i32(cu), cu_k, max(slots), max(slots), seqused_k=used_k, page_table=table,
                           causal=causal, out=out, lse=lse, source=SRC, **kw)
    o, l = download(out), download(lse)
    rows = np.zeros(total, bool)
    want_o, want_l = np.zeros((total, hq, d)), np.full((hq, total), -np.inf)
    for i in range(b):
        r = slice(cu[i], cu[i + 1])
        rows[r] = True
        qq = q_dec[r] * np.repeat(desc["q"][i], g)[None, :, None]
        kk = k_rows[i] * desc["k"][i][None, :, None]
        vv = v_rows[i] * desc["v"][i][None, :, None]
        want_o[r], want_l[:, r] = attend(qq, kk, vv, causal, 1 / math.sqrt(d))
    what = f"e4m3 varlen hd{d} slots={slots[:8]} {hq}/{hkv} causal={causal} page={page_size}"
    # Rows outside every sequence stay as poisoned.
    assert np.isnan(o[~rows]).all() and np.isnan(l[:, ~rows]).all(), f"{what}: rows outside the sequences written"
    errs = compare(o[rows][None], l[:, rows][None], want_o[rows][None], want_l[:, rows][None], what,
                   rtol=RTOL_FP8, atol=ATOL_LSE)
    assert not errs, "\n".join(errs)


def need_varlen(d, causal, paged=False):
    from test_varlen_gpu import need as need_v
    need_v("e4m3", d, causal, paged)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hq,hkv", [(8, 8), (32, 4)], ids=["gqa1", "gqa8"])
def test_e4m3_varlen_packed(d, causal, hq, hkv):
    need_varlen(d, causal)
    run_fp8_varlen(np.random.default_rng(d + causal + hq), [1, 17, 300, 129, 0, 1000, 128], hq=hq, hkv=hkv,
                   causal=causal, d=d)


@pytest.mark.parametrize("page_size", [16, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_e4m3_varlen_paged(page_size, causal):
    need_varlen(128, causal, paged=True)
    run_fp8_varlen(np.random.default_rng(page_size + causal), [700, 33, 256], hq=32, hkv=4, causal=causal,
                   page_size=page_size)
