"""cubinforge.bench: the float32 reference's semantics and the pass/fail rule (numpy, no GPU)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_bench_bootstrap", ROOT / "bench" / "_bootstrap.py")
_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_boot)
_boot.install(ROOT)

from cubinforge.bench import correctness as C  # noqa: E402
from cubinforge.bench.devarray import bf16_bits, bf16_to_f32  # noqa: E402
from cubinforge.bench.reference import attention_numpy  # noqa: E402


def brute(q, k, v, causal, scale=None):
    """Row by row in float64: the definition, with no vectorisation to get wrong."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = scale if scale is not None else 1 / math.sqrt(d)
    o = np.zeros((b, sq, hq, d))
    lse = np.full((b, hq, sq), -np.inf)
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            for i in range(sq):
                js = [j for j in range(sk) if not causal or j <= i + sk - sq]
                if not js:
                    continue
                s = np.array([q[bi, i, h] @ k[bi, j, kh] for j in js], dtype=np.float64) * scale
                m = s.max()
                p = np.exp(s - m)
                lse[bi, h, i] = m + np.log(p.sum())
                o[bi, i, h] = (p[:, None] * v[bi, js, kh]).sum(0) / p.sum()
    return o, lse


@pytest.mark.parametrize("shape", [(1, 1, 1, 2, 2), (2, 5, 9, 4, 2), (1, 9, 5, 4, 4),
                                   (1, 7, 7, 8, 1), (2, 3, 12, 4, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_definition(shape, causal):
    b, sq, sk, hq, hkv = shape
    rng = np.random.default_rng(sum(shape) + causal)
    d = 8
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    o, lse = attention_numpy(q, k, v, causal)
    o_b, lse_b = brute(q, k, v, causal)
    assert o.shape == (b, sq, hq, d) and lse.shape == (b, hq, sq)
    np.testing.assert_allclose(o, o_b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(lse_b))
    fin = np.isfinite(lse_b)
    np.testing.assert_allclose(lse[fin], lse_b[fin], rtol=1e-5, atol=1e-5)


def test_fully_masked_rows_are_zero_and_minus_inf():
    # causal, sq > sk: query i sees keys j <= i + sk - sq, so the first sq - sk rows see none
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 6, 2, 4)).astype(np.float32)
    k = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)
    v = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)
    o, lse = attention_numpy(q, k, v, causal=True)
    assert np.all(o[:, :4] == 0) and np.all(np.isneginf(lse[:, :, :4]))
    assert np.all(np.isfinite(lse[:, :, 4:])) and np.all(o[:, 4:] != 0)
    assert not np.isnan(o).any()


def test_errors_and_judge():
    rng = np.random.default_rng(1)
    o_ref = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    lse_ref = rng.standard_normal((1, 2, 4)).astype(np.float32)
    lse_ref[0, 0, 0] = -np.inf
    e = C.errors_numpy(o_ref, o_ref, lse_ref, lse_ref)
    assert e == {"rel_err": 0.0, "lse_err": 0.0, "unwritten": 0}
    assert C.judge(e["rel_err"], e["lse_err"], e["unwritten"]) == []

    noisy = o_ref * (1 + 1e-2)
    e = C.errors_numpy(noisy, o_ref, lse_ref + 2e-3, lse_ref)
    assert e["rel_err"] == pytest.approx(1e-2, rel=1e-3)
    assert e["lse_err"] == pytest.approx(2e-3, rel=1e-2)
    why = C.judge(e["rel_err"], e["lse_err"], e["unwritten"])
    assert len(why) == 2

    poisoned = o_ref.copy()
    poisoned[0, 1, 1, :3] = np.nan
    lse_p = lse_ref.copy()
    lse_p[0, 1, 2] = np.nan
    e = C.errors_numpy(poisoned, o_ref, lse_p, lse_ref)
    assert e["unwritten"] == 4
    assert any("unwritten" in w for w in C.judge(e["rel_err"], e["lse_err"], e["unwritten"]))
    assert C.judge(math.nan, 0.0, 0)  # NaN never passes
    assert C.judge(None, 0.0, 0)

    # a -inf row must stay -inf: a finite value there is an infinite error
    wrong = lse_ref.copy()
    wrong[0, 0, 0] = 0.0
    assert C.errors_numpy(o_ref, o_ref, wrong, lse_ref)["lse_err"] == math.inf


def test_thresholds_are_the_issue_s():
    assert C.REL_TOL == 2.5e-3 and C.LSE_TOL == 1e-3
    assert C.judge(2.4e-3, 9e-4, 0) == []
    assert C.judge(2.6e-3, 9e-4, 0)
    assert C.judge(2.4e-3, 1.1e-3, 0)


def test_shapes_cover_the_issue():
    ids = {s.id for s in C.SHAPES}
    assert len(ids) == len(C.SHAPES)
    sq = {s.seqlen_q for s in C.SHAPES}
    assert {1, 17, 1000} <= sq
    assert any(s.seqlen_q > s.seqlen_k for s in C.SHAPES)
    assert any(s.seqlen_q < s.seqlen_k for s in C.SHAPES)
    assert {2, 4, 8} <= {s.heads // s.heads_kv for s in C.SHAPES}
    assert set(C.QUICK_SHAPES) <= set(C.SHAPES)


def test_case_record_and_summary():
    sh = C.SHAPES[1]
    ok = C.case_record("v1", "v1", sh, "bf16", 128, False,
                       {"rel_err": 1e-3, "lse_err": 1e-6, "unwritten": 0})
    bad = C.case_record("v1", "v1", C.SHAPES[2], "bf16", 128, False,
                        {"rel_err": 5e-2, "lse_err": math.inf, "unwritten": 3})
    err = C.case_record("v2", None, sh, "bf16", 64, True, None, error="CudaError: boom")
    assert ok["passed"] and not bad["passed"] and not err["passed"]
    assert err["failures"] == ["CudaError: boom"]
    s = C.summarize({"records": [ok, bad, err], "unexercised": ["v3"], "skipped": []})
    assert (s["cases"], s["passed"], s["failed"]) == (3, 1, 2)
    assert s["max_rel_err"] == 5e-2 and s["max_lse_err"] == 1e-6
    assert s["unexercised"] == ["v3"]


def test_sticky_errors():
    assert C._is_sticky(RuntimeError("CUDA error: an illegal memory access was encountered"))  # torch's words
    assert C._is_sticky(RuntimeError("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"))
    assert C._is_sticky(RuntimeError("cuCtxSynchronize failed: CUDA_ERROR_LAUNCH_FAILED (719)"))
    assert not C._is_sticky(ValueError("head_dim 96 not supported"))


def test_bf16_round_trip():
    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, 0.0], dtype=np.float32)
    back = bf16_to_f32(bf16_bits(x))
    np.testing.assert_allclose(back, x, rtol=2 ** -8)
    assert bf16_bits(np.array([1.0], np.float32))[0] == 0x3F80
    # round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1
    assert bf16_bits(np.array([1 + 2 ** -8], np.float32))[0] == 0x3F80
    assert bf16_bits(np.array([1 + 3 * 2 ** -8], np.float32))[0] == 0x3F82
