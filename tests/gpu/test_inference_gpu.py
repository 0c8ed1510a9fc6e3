"""GPU tests of the inference kernels (issue 11) against a float64 numpy reference.

flash_attn_with_kvcache over dense and paged caches (split-KV, pack-GQA, paged KV; ragged
cache_seqlens; causal and not), and flash_attn_combine on its own. Outputs and LSE are
poisoned with NaN before each launch and every element is checked. Each test skips where
there is no GPU or the local registry lacks the variants it needs (build them with
`make kernels ARCH=sm90 SET=inference`, or the default set for the bf16 hd128 decode forms).
No cutlass import: this module collects on the device image.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cubinforge.runtime import InputError, as_device_array
from cubinforge.runtime.registry_source import LocalSource, manifests
from _helpers import NAN_BITS, backend, compare, download, from_bits, gpu_probe, softmax_rows  # noqa: F401 (download: for the importers)
from _helpers import to_bits

# Pinned at import: other tests swap the process's default source while they run.
SRC = LocalSource()

NO_GPU, ARCH = gpu_probe()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]


def _variants():
    if NO_GPU is not None:
        return []
    found, _ = manifests(SRC, "fa3_fwd")
    return [m for m in found if m.contract.arch == ARCH
            and any(m.axes.get(a) for a in ("split_kv", "pack_gqa", "paged_kv")) and not m.axes.get("varlen")
            and not any(m.axes.get(a) for a in ("local", "softcap", "learnable_sink"))]  # test_inference_variants_gpu


VARIANTS = _variants()


def need(dtype="bf16", head_dim=128, **axes):
    """Skip unless the registry has an inference variant with these axes."""
    ok = [m for m in VARIANTS if m.axes.get("dtype") == dtype and m.axes.get("head_dim") == head_dim
          and all(bool(m.axes.get(k)) == v for k, v in axes.items())]
    if not ok:
        pytest.skip(f"no inference variant {dtype} hd{head_dim} {axes} in {SRC.home}")


def need_combine(dtype="bf16", head_dim=128):
    if NO_GPU is not None:
        pytest.skip(NO_GPU)
    found, _ = manifests(SRC, "attn_combine")
    if not any(m.axes.get("dtype") == dtype and m.axes.get("head_dim") == head_dim for m in found):
        pytest.skip(f"no attn_combine {dtype} hd{head_dim} in the registry")


# --------------------------------------------------------------------------- host <-> device

BACKEND, XP = backend() if NO_GPU is None else (None, None)


def upload(bits: np.ndarray, dtype: str):
    """A device array of ``bits``, wrapped so the runtime reads it as ``dtype``."""
    view = {"bf16": np.uint16, "fp16": np.float16, "f32": np.float32, "i32": np.int32}[dtype]
    host = np.ascontiguousarray(bits.view(view))
    if BACKEND == "cupy":
        dev = XP.asarray(host)
    else:
        dev = XP.from_numpy(host.view(np.int16) if dtype == "bf16" else host).cuda()
    return as_device_array(dev, dtype=dtype) if dtype == "bf16" else dev


def rand(rng, shape, dtype):
    bits = to_bits(rng.standard_normal(shape), dtype)
    return from_bits(bits, dtype), upload(bits, dtype)


def poisoned(shape, dtype):
    t, nan = NAN_BITS[dtype]
    return upload(np.full(shape, nan, t), dtype)


# --------------------------------------------------------------------------- reference

def reference(q, k_rows, v_rows, lens, scale, causal):
    """float64 attention per sequence; k_rows[b] / v_rows[b] are (capacity, hkv, d) and only the
    first lens[b] keys count. Causal bottom-right: query i of sq sees keys j <= i + L - sq."""
    b, sq, hq, d = q.shape
    o = np.zeros((b, sq, hq, d))
    lse = np.full((b, hq, sq), -np.inf)
    for i in range(b):
        n = int(lens[i])
        if n == 0:
            continue
        kk, vv = k_rows[i][:n], v_rows[i][:n]
        g = hq // kk.shape[1]
        kk, vv = np.repeat(kk, g, axis=1), np.repeat(vv, g, axis=1)  # (n, hq, d)
        s = np.einsum("qhd,khd->hqk", q[i], kk) * scale
        if causal:
            qi = np.arange(sq)[:, None]
            kj = np.arange(n)[None, :]
            s = np.where(kj <= qi + n - sq, s, -np.inf)
        p, lse[i] = softmax_rows(s)
        o[i] = np.einsum("hqk,khd->qhd", p, vv)
    return o, lse


def check(o, lse, ref_o, ref_lse, what):
    errs = compare(o, lse, ref_o, ref_lse, what, zero_empty_rows=True)
    assert not errs, "\n".join(errs)


def make_cache(rng, b, capacity, hkv, d, dtype, page_size=None):
    """(k rows per batch, v rows per batch, k_cache dev, v_cache dev, page_table dev or None).
    Paged: a shuffled page table over a pool with spare pages; every slot holds finite data."""
    if page_size is None:
        kh, kd = rand(rng, (b, capacity, hkv, d), dtype)
        vh, vd = rand(rng, (b, capacity, hkv, d), dtype)
        return list(kh), list(vh), kd, vd, None
    pages = -(-capacity // page_size)
    pool = b * pages + 3
    kh, kd = rand(rng, (pool, page_size, hkv, d), dtype)
    vh, vd = rand(rng, (pool, page_size, hkv, d), dtype)
    table = rng.permutation(pool)[: b * pages].reshape(b, pages).astype(np.int32)
    k_rows = [kh[table[i]].reshape(-1, hkv, d) for i in range(b)]
    v_rows = [vh[table[i]].reshape(-1, hkv, d) for i in range(b)]
    return k_rows, v_rows, kd, vd, upload(table.view(np.uint32), "i32")


def run_case(rng, *, b, sq, hq, hkv, lens, capacity, causal, num_splits, pack_gqa=None, page_size=None,
             dtype="bf16", d=128):
    from cubinforge.runtime import prepare_kvcache

    qh, qd = rand(rng, (b, sq, hq, d), dtype)
    k_rows, v_rows, kd, vd, table = make_cache(rng, b, capacity, hkv, d, dtype, page_size)
    seqlens = upload(np.asarray(lens, np.int32).view(np.uint32), "i32")
    out, lse = poisoned((b, sq, hq, d), dtype), poisoned((b, hq, sq), "f32")
    scale = 1 / math.sqrt(d)
    prepared = prepare_kvcache(qd, kd, vd, cache_seqlens=seqlens, page_table=table, causal=causal,
                               num_splits=num_splits, pack_gqa=pack_gqa, out=out, lse=lse, source=SRC)
    prepared.run()
    ref_o, ref_lse = reference(qh, k_rows, v_rows, lens, scale, causal)
    what = (f"b={b} sq={sq} {hq}/{hkv} lens={list(lens)[:6]} causal={causal} splits={num_splits}"
            f"->{prepared.plan.num_splits} pack={pack_gqa}->{prepared.plan.pack_gqa} page={page_size} "
            f"{prepared.kernels}")
    check(download(out), download(lse), ref_o, ref_lse, what)
    return prepared


# --------------------------------------------------------------------------- tests

GQA = [(8, 8), (16, 4), (32, 4), (32, 2)]  # ratios 1, 4, 8, 16


@pytest.mark.parametrize("hq,hkv", GQA)
@pytest.mark.parametrize("num_splits", [1, 2, 3, 5, 8, 16, 0])
def test_split_kv_decode_dense(hq, hkv, num_splits):
    need(split_kv=True, paged_kv=False)
    need_combine()
    rng = np.random.default_rng(1000 * hq + num_splits)
    run_case(rng, b=3, sq=1, hq=hq, hkv=hkv, lens=[700, 1, 1500], capacity=1536, causal=True,
             num_splits=num_splits)


@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_splits", [1, 4, 0])
@pytest.mark.parametrize("pack_gqa", [True, False])
def test_decode_forms_ragged(sq, causal, num_splits, pack_gqa):
    """Ragged cache_seqlens with an empty and a 1-key sequence (fewer keys than queries:
    causal rows with no key give O = 0, LSE = -inf), both pack forms, split or not."""
    need(pack_gqa=pack_gqa, paged_kv=False)
    need_combine()
    rng = np.random.default_rng(7 + 10 * sq + num_splits + 100 * pack_gqa + 1000 * causal)
    run_case(rng, b=5, sq=sq, hq=32, hkv=8, lens=[0, 1, 3, 257, 2000], capacity=2048, causal=causal,
             num_splits=num_splits, pack_gqa=pack_gqa)


def need_gather():
    if NO_GPU is not None:
        pytest.skip(NO_GPU)
    found, _ = manifests(SRC, "kv_gather")
    if not any(m.axes.get("dtype") == "bf16" and m.axes.get("head_dim") == 128 for m in found):
        pytest.skip("no kv_gather bf16 hd128 in the registry (page sizes below 16 go through it)")


@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
@pytest.mark.parametrize("num_splits", [1, 3, 0])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_decode(page_size, num_splits, causal):
    """Shuffled page tables; page size 1 goes through kv_gather and the dense form."""
    need(paged_kv=page_size % 16 == 0)
    need_combine()
    if page_size % 16:
        need_gather()
    rng = np.random.default_rng(page_size + num_splits + 500 * causal)
    run_case(rng, b=4, sq=1, hq=32, hkv=8, lens=[1, 300, 1024, 777], capacity=1024, causal=causal,
             num_splits=num_splits, page_size=page_size)


@pytest.mark.parametrize("page_size", [16, 256])
@pytest.mark.parametrize("pack_gqa", [True, False])
def test_paged_speculative(page_size, pack_gqa):
    need(paged_kv=True, pack_gqa=pack_gqa)
    need_combine()
    rng = np.random.default_rng(3 * page_size + pack_gqa)
    run_case(rng, b=3, sq=4, hq=16, hkv=1, lens=[2, 513, 1024], capacity=1024, causal=True, num_splits=0,
             pack_gqa=pack_gqa, page_size=page_size)


def test_long_context_auto_splits():
    """Few tiles, many keys: auto must split, and the result is still exact."""
    need(split_kv=True)
    need_combine()
    rng = np.random.default_rng(5)
    p = run_case(rng, b=1, sq=1, hq=32, hkv=8, lens=[16384], capacity=16384, causal=True, num_splits=0)
    assert p.plan.num_splits > 1, p.plan


def test_int_cache_seqlens_and_no_out():
    """cache_seqlens as an int and out/lse allocated by the call."""
    from cubinforge.runtime import flash_attn_with_kvcache
    need(pack_gqa=True, paged_kv=False)
    need_combine()
    rng = np.random.default_rng(9)
    qh, qd = rand(rng, (2, 1, 16, 128), "bf16")
    kh, kd = rand(rng, (2, 600, 4, 128), "bf16")
    vh, vd = rand(rng, (2, 600, 4, 128), "bf16")
    out, lse = flash_attn_with_kvcache(qd, kd, vd, cache_seqlens=555, source=SRC)
    ref_o, ref_lse = reference(qh, list(kh), list(vh), [555, 555], 1 / math.sqrt(128), True)
    check(download(out), download(lse), ref_o, ref_lse, "int cache_seqlens")


def test_combine_lse_and_empty_splits():
    from cubinforge.runtime import flash_attn_combine
    need_combine()
    rng = np.random.default_rng(11)
    s, b, sq, h, d = 6, 2, 3, 4, 128
    op = rng.standard_normal((s, b, sq, h, d))
    lp = rng.standard_normal((s, b, h, sq)) * 3
    lp[1] = -np.inf                     # an empty split everywhere
    lp[:, 0, 0, 0] = -np.inf            # a row with every split empty
    op_bits = op.astype(np.float32).view(np.uint32).copy()
    op_bits[1] = 0x7FC00000             # an empty split's O is never read: NaN must not leak
    op_d = upload(op_bits, "f32")
    lp_d = upload(lp.astype(np.float32).view(np.uint32), "f32")
    out, lse = poisoned((b, sq, h, d), "bf16"), poisoned((b, h, sq), "f32")
    flash_attn_combine(op_d, lp_d, out=out, lse=lse, source=SRC)
    lp32, op32 = lp.astype(np.float32).astype(np.float64), op.astype(np.float32).astype(np.float64)
    m = lp32.max(0)
    ms = np.where(np.isfinite(m), m, 0)
    tot = np.exp(lp32 - ms).sum(0)
    ref_lse = np.where(tot > 0, ms + np.log(np.where(tot > 0, tot, 1)), -np.inf)
    w = np.where(np.isfinite(lp32), np.exp(lp32 - np.where(np.isfinite(ref_lse), ref_lse, 0)), 0)  # (s,b,h,sq)
    op32[1] = 0
    ref_o = np.einsum("sbhq,sbqhd->bqhd", w, op32)
    check(download(out), download(lse), ref_o, ref_lse, "combine")


def test_bad_inputs_are_refused():
    from cubinforge.runtime import flash_attn_with_kvcache
    need(paged_kv=True)
    rng = np.random.default_rng(13)
    _, qd = rand(rng, (2, 1, 8, 128), "bf16")
    _, kd = rand(rng, (4, 16, 8, 128), "bf16")
    _, vd = rand(rng, (4, 16, 8, 128), "bf16")
    bad_table = upload(np.array([[0, 1], [2, 9]], np.int32).view(np.uint32), "i32")
    lens = upload(np.array([20, 32], np.int32).view(np.uint32), "i32")
    with pytest.raises(InputError, match=r"page_table\[1, 1\] = 9"):
        flash_attn_with_kvcache(qd, kd, vd, cache_seqlens=lens, page_table=bad_table, check=True, source=SRC)
    too_long = upload(np.array([20, 40], np.int32).view(np.uint32), "i32")
    with pytest.raises(InputError, match="capacity"):
        flash_attn_with_kvcache(qd, kd, vd, cache_seqlens=too_long, page_table=bad_table, check=True, source=SRC)
    with pytest.raises(InputError, match="capacity"):
        flash_attn_with_kvcache(qd, kd, vd, cache_seqlens=33, page_table=bad_table, source=SRC)
    with pytest.raises(InputError, match="int32"):
        flash_attn_with_kvcache(qd, kd, vd, cache_seqlens=lens, page_table=upload(np.zeros((2, 2), np.float32).view(np.uint32), "f32"), source=SRC)


def _need_append(paged):
    if NO_GPU is not None:
        pytest.skip(NO_GPU)
    found, _ = manifests(SRC, "kv_append")
    if not any(m.axes.get("dtype") == "bf16" and m.axes.get("head_dim") == 128
               and bool(m.axes.get("paged_kv")) == paged for m in found):
        pytest.skip(f"no kv_append bf16 hd128 paged={paged} in the registry")


@pytest.mark.parametrize("page_size", [None, 16, 256])
@pytest.mark.parametrize("s_new", [1, 4])
def test_append_then_attend(page_size, s_new):
    """New k/v land in the cache at cache_seqlens (checked in the cache afterwards, the rest
    of the cache untouched) and attention sees cache_seqlens + s_new keys, causal."""
    from cubinforge.runtime import flash_attn_with_kvcache
    _need_append(page_size is not None)
    need(paged_kv=page_size is not None, pack_gqa=True)
    need_combine()
    rng = np.random.default_rng(17 + s_new + (page_size or 0))
    b, hq, hkv, d, capacity = 3, 16, 4, 128, 768
    lens = np.array([0, 100, 768 - s_new], np.int32)
    qh, qd = rand(rng, (b, s_new, hq, d), "bf16")
    nkh, nkd = rand(rng, (b, s_new, hkv, d), "bf16")
    nvh, nvd = rand(rng, (b, s_new, hkv, d), "bf16")
    k_rows, v_rows, kd, vd, table = make_cache(rng, b, capacity, hkv, d, "bf16", page_size)
    before = download(kd)
    out, lse = poisoned((b, s_new, hq, d), "bf16"), poisoned((b, hq, s_new), "f32")
    flash_attn_with_kvcache(qd, kd, vd, k=nkd, v=nvd, cache_seqlens=upload(lens.view(np.uint32), "i32"),
                            page_table=table, causal=True, out=out, lse=lse, check=True, source=SRC)
    for i in range(b):
        k_rows[i][lens[i]:lens[i] + s_new] = nkh[i]
        v_rows[i][lens[i]:lens[i] + s_new] = nvh[i]
    after = download(kd)
    if page_size is None:
        want = np.stack(k_rows)
    else:
        t = download(table).astype(np.int64)
        want = before.copy()
        for i in range(b):
            for j in range(s_new):
                p = lens[i] + j
                want[t[i, p // page_size], p % page_size] = nkh[i, j]
    assert np.array_equal(after, want), "k_cache after the append differs from the expected cache"
    ref_o, ref_lse = reference(qh, k_rows, v_rows, lens + s_new, 1 / math.sqrt(d), True)
    check(download(out), download(lse), ref_o, ref_lse, f"append s_new={s_new} page={page_size}")
