"""GPU: decode-shaped flash_attn_func calls routed to the split-KV forms (dispatch rule
decode-split-kv) against a float64 reference with NaN-poisoned outputs, and bit for bit
against flash_attn_with_kvcache with the same split count; a repeated call of the layout
(the cached path, new output buffers) gives the same bits. Skips without a GPU or without
the bf16 hd128 decode forms (the default set has them). No cutlass import."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_inference_gpu as G  # noqa: E402  (its host <-> device helpers and reference)

from cubinforge.runtime import driver, flash_attn_func, flash_attn_with_kvcache, last_launch  # noqa: E402
from cubinforge.runtime.dispatch import Problem  # noqa: E402
from cubinforge.runtime.registry_source import choose  # noqa: E402

pytestmark = G.pytestmark


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): the bench's --decode cells at 32k keys
# (hd128: 16 heads, batch 4) and the inference bench's dense GQA decode.
CASES = [(4, 1, 32768, 16, 16), (4, 16, 32768, 16, 16), (4, 64, 32768, 16, 16), (8, 1, 32768, 32, 8),
         (2, 3, 5000, 8, 2)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,sq,sk,hq,hkv", CASES)
def test_routed_decode_matches_reference_and_kvcache(b, sq, sk, hq, hkv, causal):
    G.need(split_kv=True, paged_kv=False, causal=causal)
    d, dtype = 128, "bf16"
    choice = choose(Problem("fa3_fwd", {"arch": G.ARCH, "dtype": dtype, "head_dim": d, "causal": causal},
                            batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                            sm_count=driver.sm_count(0)), G.SRC)
    if not choice.best.axes.get("split_kv"):
        pytest.skip(f"the dispatcher keeps the plain kernel here ({choice.best.variant})")
    rng = np.random.default_rng(b * 1000 + sq + causal)
    qh, q = G.rand(rng, (b, sq, hq, d), dtype)
    kh, k = G.rand(rng, (b, sk, hkv, d), dtype)
    vh, v = G.rand(rng, (b, sk, hkv, d), dtype)
    o, lse = G.poisoned((b, sq, hq, d), dtype), G.poisoned((b, hq, sq), "f32")
    flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, source=G.SRC)
    rec = last_launch()
    assert rec.variant == choice.best.variant and "attn-combine" in rec.note
    got_o, got_lse = G.download(o), G.download(lse)
    ref_o, ref_lse = G.reference(qh, list(kh), list(vh), [sk] * b, 1 / math.sqrt(d), causal)
    G.check(got_o, got_lse, ref_o, ref_lse, f"flash_attn_func b={b} sq={sq} sk={sk} {hq}/{hkv} causal={causal}")
    # The same launches through flash_attn_with_kvcache: the same bits.
    o2, lse2 = G.poisoned((b, sq, hq, d), dtype), G.poisoned((b, hq, sq), "f32")
    flash_attn_with_kvcache(q, k, v, causal=causal, num_splits=choice.params["num_splits"], pack_gqa=True,
                            out=o2, lse=lse2, source=G.SRC)
    assert np.array_equal(G.download(o2), got_o, equal_nan=True)
    assert np.array_equal(G.download(lse2), got_lse, equal_nan=True)
    # The cached path, new outputs: the same bits again.
    o3, lse3 = G.poisoned((b, sq, hq, d), dtype), G.poisoned((b, hq, sq), "f32")
    flash_attn_func(q, k, v, causal=causal, out=o3, lse=lse3, source=G.SRC)
    assert np.array_equal(G.download(o3), got_o) and np.array_equal(G.download(lse3), got_lse)


# --------------------------------------------------------------------------- cache_batch_idx

@pytest.mark.parametrize("s_cache", [1024, 1008])       # whole 128-key tiles per row; 16-row boxes
@pytest.mark.parametrize("s_new", [0, 2])
def test_cache_batch_idx_reads_and_appends_the_indexed_rows(s_cache, s_new):
    """Row b of q attends to cache row cache_batch_idx[b] of a dense cache with more rows than
    the batch (through the paged forms, no copy); appended k/v land in those rows."""
    from cubinforge.runtime import flash_attn_with_kvcache
    G.need(paged_kv=True, pack_gqa=True)
    if s_new:
        G._need_append(True)
    b, rows, hq, hkv, d, dtype = 4, 7, 16, 4, 128, "bf16"
    rng = np.random.default_rng(s_cache + s_new)
    idx = np.array([5, 0, 3, 6], np.int32)
    lens = np.array([0, 1, 500, s_cache - s_new], np.int32)
    qh, q = G.rand(rng, (b, max(s_new, 1), hq, d), dtype)
    kh, k = G.rand(rng, (rows, s_cache, hkv, d), dtype)
    vh, v = G.rand(rng, (rows, s_cache, hkv, d), dtype)
    new = {}
    if s_new:
        nkh, nk = G.rand(rng, (b, s_new, hkv, d), dtype)
        nvh, nv = G.rand(rng, (b, s_new, hkv, d), dtype)
        new = dict(k=nk, v=nv)
    before = G.download(k)
    sq = max(s_new, 1)
    o, lse = G.poisoned((b, sq, hq, d), dtype), G.poisoned((b, hq, sq), "f32")
    flash_attn_with_kvcache(q, k, v, cache_seqlens=G.upload(lens.view(np.uint32), "i32"),
                            cache_batch_idx=G.upload(idx.view(np.uint32), "i32"), causal=True, out=o, lse=lse,
                            check=True, source=G.SRC, **new)
    k_rows, v_rows = [kh[r].copy() for r in idx], [vh[r].copy() for r in idx]
    want = before.copy()
    for i in range(b):
        if s_new:
            k_rows[i][lens[i]:lens[i] + s_new] = nkh[i]
            v_rows[i][lens[i]:lens[i] + s_new] = nvh[i]
            want[idx[i], lens[i]:lens[i] + s_new] = nkh[i]
    assert np.array_equal(G.download(k), want), "the append wrote other rows than cache_batch_idx names"
    ref_o, ref_lse = G.reference(qh, k_rows, v_rows, lens + s_new, 1 / math.sqrt(d), True)
    G.check(G.download(o), G.download(lse), ref_o, ref_lse, f"cache_batch_idx s_cache={s_cache} s_new={s_new}")


# The bench's --decode cells outside bf16 hd128 (2048 / d heads; batch * seqlen_k = 128k, or
# fewer rows where the float64 reference would be slow): the pack-GQA form alone where one
# split fills the SMs (hd64 at 8k keys, rule decode-pack-hd64), split-KV + combine elsewhere.
OTHER_CELLS = [("bf16", 64, 16, 1, 8192), ("fp16", 64, 4, 16, 32768), ("bf16", 256, 4, 1, 32768),
               ("fp16", 256, 4, 16, 8192), ("fp16", 128, 4, 4, 32768), ("bf16", 64, 2, 3, 30000)]


def _routed_dense_decode(dtype, d, b, sq, sk, hq, hkv, causal, seed):
    """flash_attn_func on a decode shape the dispatcher sends to a pack-GQA form (skip where it
    keeps the plain kernel): the chosen variant runs, with the combine exactly when it splits,
    and matches the float64 reference on poisoned outputs."""
    G.need(dtype=dtype, head_dim=d, pack_gqa=True, paged_kv=False, causal=causal)
    choice = choose(Problem("fa3_fwd", {"arch": G.ARCH, "dtype": dtype, "head_dim": d, "causal": causal},
                            batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                            sm_count=driver.sm_count(0)), G.SRC)
    if not choice.best.axes.get("pack_gqa"):
        pytest.skip(f"the dispatcher keeps the plain kernel here ({choice.best.variant})")
    rng = np.random.default_rng(seed)
    qh, q = G.rand(rng, (b, sq, hq, d), dtype)
    kh, k = G.rand(rng, (b, sk, hkv, d), dtype)
    vh, v = G.rand(rng, (b, sk, hkv, d), dtype)
    o, lse = G.poisoned((b, sq, hq, d), dtype), G.poisoned((b, hq, sq), "f32")
    flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, source=G.SRC)
    rec = last_launch()
    assert rec.variant == choice.best.variant
    assert ("attn-combine" in rec.note) == bool(choice.best.axes.get("split_kv")), rec.note
    ref_o, ref_lse = G.reference(qh, list(kh), list(vh), [sk] * b, 1 / math.sqrt(d), causal)
    G.check(G.download(o), G.download(lse), ref_o, ref_lse,
            f"{dtype} hd{d} b={b} sq={sq} sk={sk} {hq}/{hkv} causal={causal} via {rec.variant}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype,d,b,sq,sk", OTHER_CELLS)
def test_routed_decode_of_other_head_dims_matches_reference(dtype, d, b, sq, sk, causal):
    h = 2048 // d
    _routed_dense_decode(dtype, d, b, sq, sk, h, h, causal, seed=d * 7 + b * 1000 + sq + causal)


# GQA decode where one split fills the SMs (rule decode-pack-gqa): 16 x 8 KV heads = 128
# tiles of the 64-row form, so the unsplit pack-GQA form instead of the plain kernel.
GQA_CELLS = [("bf16", 128, 16, 4, 8192, 32), ("fp16", 128, 16, 1, 4096, 64), ("bf16", 64, 16, 2, 3000, 32),
             ("bf16", 256, 16, 1, 2048, 32)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype,d,b,sq,sk,hq", GQA_CELLS)
def test_routed_gqa_decode_takes_the_pack_form_and_matches_reference(dtype, d, b, sq, sk, hq, causal):
    _routed_dense_decode(dtype, d, b, sq, sk, hq, 8, causal, seed=d * 11 + sq * 3 + hq + causal)
