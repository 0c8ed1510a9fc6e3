"""GPU tests of flash_attn_varlen_func (issue 11) against a float64 numpy reference.

Packed ragged batches (sequences of 0, 1, 17 tokens beside long ones, tile edges), seqused
shorter than the slots, causal (bottom-right per sequence) and not, GQA 1/4/8, paged KV with
shuffled page tables (page sizes 16, 64, 256, and 1 through the gather). Out and LSE are
poisoned with NaN before each launch and every element is checked: rows of a sequence
against the reference, every other row (slot tails past seqused_q, spare rows past
cu_seqlens_q[-1]) must still be NaN (never written). Each test skips where there is no GPU
or the registry lacks the variant (`make kernels ARCH=sm90` has bf16/fp16 hd64/128 packed
and bf16 hd128 paged; SET=inference has every varlen form). No cutlass import.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cubinforge.runtime import InputError
from cubinforge.runtime.registry_source import LocalSource, manifests
from _helpers import ATOL_LSE, NAN_BITS, RTOL_O, download, from_bits, numerics_checked, softmax_rows, to_bits
from test_inference_gpu import BACKEND, NO_GPU, XP, poisoned, rand, upload

SRC = LocalSource()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]


def need(dtype, head_dim, causal, paged=False, head_dim_v=None):
    if NO_GPU is not None:
        pytest.skip(NO_GPU)
    found, _ = manifests(SRC, "fa3_fwd")
    dv = head_dim if head_dim_v is None else head_dim_v
    if not any(m.axes.get("varlen") and m.axes.get("dtype") == dtype and m.axes.get("head_dim") == head_dim
               and m.axes.get("head_dim_v", head_dim) == dv
               and m.axes.get("causal") == causal and bool(m.axes.get("paged_kv")) == paged for m in found):
        pytest.skip(f"no varlen {dtype} hd{head_dim} dv{dv} causal={causal} paged={paged} in {SRC.home}")


def i32(values):
    return upload(np.asarray(values, np.int32).view(np.uint32), "i32")


def cumsum0(xs):
    return [0] + list(np.cumsum(xs, dtype=np.int64).tolist())


def attend(q, k, v, causal, scale):
    """float64 attention of one sequence: q (nq, hq, d), k (nk, hkv, d), v (nk, hkv, dv) -> o (nq, hq, dv),
    lse (hq, nq)."""
    nq, hq, d = q.shape
    nk, dv = k.shape[0], v.shape[-1]
    if nq == 0:
        return np.zeros((0, hq, dv)), np.zeros((hq, 0))
    if nk == 0:
        return np.zeros((nq, hq, dv)), np.full((hq, nq), -np.inf)
    g = hq // k.shape[1]
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kk) * scale
    if causal:
        s = np.where(np.arange(nk)[None, :] <= np.arange(nq)[:, None] + nk - nq, s, -np.inf)
    p, lse = softmax_rows(s)
    return np.einsum("hqk,khd->qhd", p, vv), lse


def run_varlen(rng, slots_q, slots_k, *, hq, hkv, causal, used_q=None, used_k=None, page_size=None, d=128,
               dtype="bf16", spare=3, check=False, host_cu=False, dv=None, k_ramp=False, runs=1, graph=False):
    """`runs` > 1: one prepared plan run that many times, O and LSE NaN-poisoned again before
    each run and every run checked (a variant's state across launches: the tile counter);
    `graph` (CuPy): the plan captured once in a CUDA graph, the graph replayed `runs` times."""
    from cubinforge.runtime import as_device_array, flash_attn_varlen_func, prepare_varlen
    from cubinforge.runtime.fill import fill

    b = len(slots_q)
    dv = d if dv is None else dv
    cu_q = cumsum0(slots_q)
    total_q = cu_q[-1] + spare
    qh, qd = rand(rng, (total_q, hq, d), dtype)
    nq = used_q if used_q is not None else slots_q
    nk = used_k if used_k is not None else slots_k
    if page_size is None:
        cu_k = cumsum0(slots_k)
        kh, kd = rand(rng, (cu_k[-1] + spare, hkv, d), dtype)
        if k_ramp:
            # Keys scaled 8x down to 1x along each sequence: the kernel walks key blocks last to
            # first, so every block raises the rows' maximum (the conditional rescale's case).
            ramp = np.ones(kh.shape[0])
            for i in range(b):
                n = slots_k[i]
                ramp[cu_k[i]:cu_k[i] + n] = 1 + 7 * np.arange(n)[::-1] / max(n - 1, 1)
            bits = to_bits(kh * ramp[:, None, None], dtype)
            kh, kd = from_bits(bits, dtype), upload(bits, dtype)
        vh, vd = rand(rng, (cu_k[-1] + spare, hkv, dv), dtype)
        k_rows = [kh[cu_k[i]:cu_k[i] + nk[i]] for i in range(b)]
        v_rows = [vh[cu_k[i]:cu_k[i] + nk[i]] for i in range(b)]
        table = None
        cu_k_arg = cu_k if host_cu else i32(cu_k)
    else:
        pages = max(1, -(-max(max(nk), 1) // page_size))
        pool = b * pages + 5
        kh, kd = rand(rng, (pool, page_size, hkv, d), dtype)
        vh, vd = rand(rng, (pool, page_size, hkv, d), dtype)
        t = rng.permutation(pool)[: b * pages].reshape(b, pages).astype(np.int32)
        k_rows = [kh[t[i]].reshape(-1, hkv, d)[: nk[i]] for i in range(b)]
        v_rows = [vh[t[i]].reshape(-1, hkv, d)[: nk[i]] for i in range(b)]
        table = upload(t.view(np.uint32), "i32")
        cu_k_arg = None
        if used_k is None:
            used_k = slots_k  # a paged cache has no packed offsets: the key counts are seqused_k
    out, lse = poisoned((total_q, hq, dv), dtype), poisoned((hq, total_q), "f32")
    scale = 1 / math.sqrt(d)
    args = (qd, kd, vd, cu_q if host_cu else i32(cu_q), cu_k_arg, max(slots_q), max(slots_k))
    kw = dict(seqused_q=None if used_q is None else i32(used_q), seqused_k=None if used_k is None else i32(used_k),
              page_table=table, causal=causal, out=out, lse=lse, check=check, source=SRC)
    results = []
    if runs == 1:
        flash_attn_varlen_func(*args, **kw)
        results.append((download(out), download(lse)))
    else:
        stream = XP.cuda.Stream(non_blocking=True) if graph else None
        handle = stream.ptr if graph else 0
        plan = prepare_varlen(*args, **kw, stream=handle)
        replay = plan.run
        if graph:
            plan.run(handle)  # loads the module outside the capture (the counter is left zero)
            with stream:
                stream.begin_capture()
                try:
                    plan.run(handle)
                finally:
                    captured = stream.end_capture()  # never leave the stream capturing
            replay = lambda h: captured.launch(stream)  # noqa: E731
        for _ in range(runs):
            fill(as_device_array(out, dtype=dtype), NAN_BITS[dtype][1], handle)
            fill(as_device_array(lse), NAN_BITS["f32"][1], handle)
            replay(handle)
            if graph:
                stream.synchronize()
            results.append((download(out), download(lse)))
    want_o = np.full((total_q, hq, dv), np.nan)
    want_lse = np.full((hq, total_q), np.nan)
    for i in range(b):
        r0 = cu_q[i]
        o, l = attend(qh[r0:r0 + nq[i]], k_rows[i], v_rows[i], causal, scale)
        want_o[r0:r0 + nq[i]], want_lse[:, r0:r0 + nq[i]] = o, l
    what = (f"slots_q={list(slots_q)[:8]} slots_k={list(slots_k)[:8]} used_q={used_q and list(used_q)[:8]} "
            f"used_k={used_k and list(used_k)[:8]} {hq}/{hkv} causal={causal} page={page_size} {dtype} hd{d} dv{dv}")
    for run, (got_o, got_lse) in enumerate(results):
        compare(got_o, got_lse, want_o, want_lse, what + (f" run {run + 1} of {runs}" if runs > 1 else ""))


def compare(o, lse, ref_o, ref_lse, what):
    errs = []
    rows = ~np.isnan(ref_lse[0])  # the rows a sequence owns; every other row must be untouched
    if not np.isnan(o[~rows]).all() or not np.isnan(lse[:, ~rows]).all():
        errs.append(f"{what}: rows outside every sequence were written "
                    f"({int((~np.isnan(o[~rows])).any(axis=(1, 2)).sum())} rows of O)")
    o, lse, ref_o, ref_lse = o[rows], lse[:, rows], ref_o[rows], ref_lse[:, rows]
    if np.isnan(o).any() or np.isnan(lse).any():
        errs.append(f"{what}: {int(np.isnan(o).any(axis=(1, 2)).sum())} rows of O / "
                    f"{int(np.isnan(lse).sum())} LSE entries never written (NaN)")
    else:
        rel = np.linalg.norm(o - ref_o) / max(np.linalg.norm(ref_o), 1e-30)
        if not rel <= RTOL_O:
            errs.append(f"{what}: O rel err {rel:.2e} > {RTOL_O}")
        inf = np.isinf(ref_lse)
        if (lse[inf] != ref_lse[inf]).any():
            errs.append(f"{what}: LSE of rows with no key should be -inf")
        if inf.any() and np.abs(o[inf.T]).max(initial=0) != 0:
            errs.append(f"{what}: O of rows with no key should be 0")
        fin = ~inf
        if fin.any() and not np.abs(lse[fin] - ref_lse[fin]).max() <= ATOL_LSE:
            errs.append(f"{what}: LSE abs err {np.abs(lse[fin] - ref_lse[fin]).max():.2e} > {ATOL_LSE}")
    assert not errs, "\n".join(errs)
    numerics_checked()


# --------------------------------------------------------------------------- packed

RAGGED = [0, 1, 17, 300, 129, 0, 1000, 128, 2]
GQA = [(8, 8), (16, 4), (32, 4)]  # ratios 1, 4, 8


@pytest.mark.parametrize("hq,hkv", GQA)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_packed_self_attention_ragged(hq, hkv, causal, d):
    need("bf16", d, causal)
    rng = np.random.default_rng(100 * hq + 10 * causal + d)
    run_varlen(rng, RAGGED, RAGGED, hq=hq, hkv=hkv, causal=causal, d=d)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_packed_fp16(causal, d):
    need("fp16", d, causal)
    rng = np.random.default_rng(7 + causal + d)
    run_varlen(rng, RAGGED, RAGGED, hq=16, hkv=4, causal=causal, d=d, dtype="fp16")


@pytest.mark.parametrize("causal", [False, True])
def test_packed_cross_lengths_and_tile_edges(causal):
    """Keys and queries of different lengths per sequence (fewer keys than queries: causal rows
    with no key), sequences ending on and beside the 128- and 192-row tile edges."""
    need("bf16", 128, causal)
    rng = np.random.default_rng(11 + causal)
    run_varlen(rng, [127, 128, 129, 1, 17, 0, 191, 192, 193], [300, 5, 129, 0, 1, 9, 1000, 192, 64],
               hq=16, hkv=4, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("which", ["q", "k", "both"])
def test_seqused_shorter_than_the_slots(causal, which):
    need("bf16", 128, causal)
    rng = np.random.default_rng(13 + causal + len(which))
    slots_q, slots_k = [20, 1, 300, 17, 0, 700], [40, 3, 300, 17, 2, 900]
    used_q = [3, 0, 299, 17, 0, 1] if which in ("q", "both") else None
    used_k = [40, 1, 5, 0, 2, 650] if which in ("k", "both") else None
    run_varlen(rng, slots_q, slots_k, hq=8, hkv=8, causal=causal, used_q=used_q, used_k=used_k)


def test_many_short_sequences_and_host_cu_seqlens():
    """More sequences than one warp's worth, lengths 0-40, cu_seqlens given as host lists."""
    need("bf16", 128, True)
    rng = np.random.default_rng(17)
    lens = rng.integers(0, 41, size=70).tolist()
    run_varlen(rng, lens, lens, hq=16, hkv=4, causal=True, host_cu=True)


def test_one_long_sequence_matches():
    need("bf16", 128, False)
    rng = np.random.default_rng(19)
    run_varlen(rng, [4096], [4096], hq=4, hkv=1, causal=False, spare=0)


# --------------------------------------------------------------------------- paged

@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_chunked_prefill(page_size, causal):
    """New tokens of each request (q) against its cached keys (more keys than queries, bottom-
    right causal), through a shuffled page table; page size 1 through kv_gather."""
    need("bf16", 128, causal, paged=page_size % 16 == 0)
    if page_size % 16:
        found, _ = manifests(SRC, "kv_gather")
        if not any(m.axes.get("dtype") == "bf16" and m.axes.get("head_dim") == 128 for m in found):
            pytest.skip("no kv_gather bf16 hd128")
    rng = np.random.default_rng(23 + page_size + causal)
    run_varlen(rng, [0, 1, 17, 200, 129], [5, 300, 17, 1000, 129], hq=32, hkv=8, causal=causal,
               page_size=page_size, check=True)


@pytest.mark.parametrize("hq,hkv", GQA)
def test_paged_gqa_with_seqused_q(hq, hkv):
    need("bf16", 128, True, paged=True)
    rng = np.random.default_rng(29 + hq)
    run_varlen(rng, [64, 1, 17, 300], [700, 1, 33, 512], hq=hq, hkv=hkv, causal=True, used_q=[60, 1, 0, 300],
               page_size=64)


# --------------------------------------------------------------------------- errors on device data

def test_check_true_reads_device_cu_seqlens():
    from cubinforge.runtime import flash_attn_varlen_func
    need("bf16", 128, False)
    rng = np.random.default_rng(31)
    _, qd = rand(rng, (40, 8, 128), "bf16")
    _, kd = rand(rng, (40, 8, 128), "bf16")
    with pytest.raises(InputError, match=r"non-decreasing: cu_seqlens_k\[2\] = 3 < cu_seqlens_k\[1\] = 30"):
        flash_attn_varlen_func(qd, kd, kd, i32([0, 10, 40]), i32([0, 30, 3]), 30, 30, check=True, source=SRC)


# --------------------------------------------------------------------------- wider head dims

# DeepSeek MLA prefill (192, 128) and Gemma's hd256, packed on the persistent walk: ragged
# batches with empty and one-token sequences, tile edges, seqused shorter than the slots, GQA.
WIDE = [(192, 128), (256, 256)]


@pytest.mark.parametrize("hq,hkv", GQA)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,dv", WIDE)
def test_wide_head_dims_ragged(hq, hkv, causal, d, dv):
    need("bf16", d, causal, head_dim_v=dv)
    rng = np.random.default_rng(d * 100 + hq + causal)
    run_varlen(rng, RAGGED, RAGGED, hq=hq, hkv=hkv, causal=causal, d=d, dv=dv)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,dv", [(128, 128), *WIDE])
def test_a_plan_replays_in_a_cuda_graph(causal, d, dv):
    """The shipped persistent forms hand tiles out from a counter the plan owns: a CUDA graph of
    the plan, replayed three times (poisoned before each), walks every tile every time."""
    if BACKEND != "cupy":
        pytest.skip("capture test written against CuPy's stream capture API")
    need("bf16", d, causal, head_dim_v=dv)
    rng = np.random.default_rng(17 + d + causal)
    run_varlen(rng, [0, 1, 17, 600, 129, 700, 5, 300], [5, 1, 17, 600, 129, 800, 0, 300], hq=16, hkv=4,
               causal=causal, d=d, dv=dv, runs=3, graph=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,dv", WIDE)
def test_wide_head_dims_fp16_cross_lengths_and_seqused(causal, d, dv):
    need("fp16", d, causal, head_dim_v=dv)
    rng = np.random.default_rng(7 + d + causal)
    slots_q, slots_k = [65, 0, 129, 1, 300], [200, 5, 129, 64, 1000]
    run_varlen(rng, slots_q, slots_k, hq=8, hkv=8, causal=causal, d=d, dv=dv, dtype="fp16",
               used_q=[60, 0, 128, 1, 17], used_k=[200, 0, 100, 63, 999])
