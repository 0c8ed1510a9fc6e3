"""The C++ loader's flash_attn_with_kvcache and flash_attn_varlen_func checks say what the
Python runtime says, case by case: runtime/cpp/tests/inference_check.cpp runs check_kvcache /
check_varlen over tensors described on stdin; the same tensors (DeviceArrays at the same
addresses) go to kvcache.prepare_kvcache / varlen.prepare_varlen, and the InputError message
must be the same words ("ok" where both accept; Python then fails later, at the driver, with
no GPU here). Also the host value checks (check_varlen_values vs varlen.check_seqlens)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

from cubinforge.runtime import kvcache, varlen  # noqa: E402
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.decode_plan import MAX_SPLITS  # noqa: E402
from cubinforge.runtime.errors import InputError  # noqa: E402

pytestmark = pytest.mark.skipif(harness.missing_tools("g++") is not None,
                                reason=f"needs {harness.missing_tools('g++')}")

BASE = 1 << 32


def compact(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def T(shape, dtype="bf16", strides=None, offset=0):
    """A tensor description: shape, dtype, strides (compact by default), a byte offset from an aligned base."""
    return (tuple(shape), dtype, tuple(strides) if strides else compact(shape), offset)


B, SQ, HQ, HKV, D, S = 2, 3, 8, 2, 128, 256
KV = {"q": T((B, SQ, HQ, D)), "k_cache": T((B, S, HKV, D)), "v_cache": T((B, S, HKV, D)),
      "cache_seqlens": T((B,), "i32"), "out": T((B, SQ, HQ, D)), "lse": T((B, HQ, SQ), "f32")}
PAGED = {**KV, "k_cache": T((9, 64, HKV, D)), "v_cache": T((9, 64, HKV, D)), "page_table": T((B, 4), "i32")}
NEW = {"k": T((B, 2, HKV, D)), "v": T((B, 2, HKV, D))}


def kv(**over):
    return {k: v for k, v in {**KV, **over}.items() if v is not None}


# (tensors, num_splits, pack_gqa, cache_seqlens int (-1: the tensor, or None with no tensor), paged)
KV_CASES = [
    (kv(), 0, -1, -1, 0),
    (kv(**NEW), 0, -1, -1, 0),
    (kv(k=NEW["k"]), 0, -1, -1, 0),
    (kv(cache_seqlens=None, **NEW), 0, -1, None, 0),
    (kv(cache_batch_idx=T((B,), "i32"), page_table=T((B, 4), "i32")), 0, -1, -1, 1),
    (kv(), -1, -1, -1, 0),
    (kv(), MAX_SPLITS + 1, -1, -1, 0),
    (kv(q=T((B, SQ, HQ))), 0, -1, -1, 0),
    (kv(k_cache=T((B, S, HKV, D), strides=(S * HKV * D, HKV * D, 1, HKV))), 0, -1, -1, 0),
    (kv(v_cache=T((B, S, HKV, D), offset=8)), 0, -1, -1, 0),
    (kv(k_cache=T((B, S, HKV, D), "fp16")), 0, -1, -1, 0),
    (kv(v_cache=T((B, S + 16, HKV, D))), 0, -1, -1, 0),
    (kv(k_cache=T((B, S, HKV, 64)), v_cache=T((B, S, HKV, 64))), 0, -1, -1, 0),
    (kv(k_cache=T((B, S, 3, D)), v_cache=T((B, S, 3, D))), 0, -1, -1, 0),
    (kv(cache_batch_idx=T((B,), "i32"), k_cache=T((5, S, HKV, D)), v_cache=T((5, S, HKV, D))), 0, -1, -1, 0),
    (kv(cache_batch_idx=T((B + 1,), "i32")), 0, -1, -1, 0),
    (kv(cache_batch_idx=T((B,), "i32"), k_cache=T((B, 40, HKV, D)), v_cache=T((B, 40, HKV, D))), 0, -1, -1, 0),
    (kv(cache_batch_idx=T((B,), "i32"), **NEW), 0, -1, -1, 0),
    ({**PAGED}, 0, -1, -1, 1),
    ({**PAGED, "page_table": T((B + 1, 4), "i32")}, 0, -1, -1, 1),
    ({**PAGED, "page_table": T((B, 4), "f32")}, 0, -1, -1, 1),
    ({**PAGED, **NEW}, 0, -1, -1, 1),
    (kv(k_cache=T((B + 1, S, HKV, D)), v_cache=T((B + 1, S, HKV, D))), 0, -1, -1, 0),
    (kv(k=T((B, 2, HKV + 1, D)), v=T((B, 2, HKV + 1, D))), 0, -1, -1, 0),
    (kv(k=T((B, 2, HKV, D)), v=T((B, 3, HKV, D))), 0, -1, -1, 0),
    (kv(k=T((B, 2, HKV, D), "fp16"), v=T((B, 2, HKV, D), "fp16")), 0, -1, -1, 0),
    (kv(k=T((B, 2, HKV, D), strides=(2 * HKV * D, HKV * D, 1, HKV)), v=NEW["v"]), 0, -1, -1, 0),
    (kv(cache_seqlens=None), 0, -1, 100, 0),
    (kv(cache_seqlens=None), 0, -1, S, 0),
    (kv(cache_seqlens=None, **NEW), 0, -1, S - 1, 0),
    (kv(cache_seqlens=None), 0, -1, None, 0),
    (kv(cache_seqlens=T((B + 1,), "i32")), 0, -1, -1, 0),
    (kv(cache_seqlens=T((B,), "f32")), 0, -1, -1, 0),
    (kv(out=T((B, SQ, HQ, D), "fp16")), 0, -1, -1, 0),
    (kv(out=T((B, SQ + 1, HQ, D))), 0, -1, -1, 0),
    (kv(lse=T((B, SQ, HQ), "f32")), 0, -1, -1, 0),
    (kv(lse=T((B, HQ, SQ), "bf16")), 0, -1, -1, 0),
]

TQ, TK = 40, 50
VL = {"q": T((TQ, HQ, D)), "k": T((TK, HKV, D)), "v": T((TK, HKV, D)), "cu_seqlens_q": T((B + 1,), "i32"),
      "cu_seqlens_k": T((B + 1,), "i32"), "out": T((TQ, HQ, D)), "lse": T((HQ, TQ), "f32")}
VPAGED = {**VL, "k": T((9, 64, HKV, D)), "v": T((9, 64, HKV, D)), "page_table": T((B, 4), "i32")}
MLA = {**VL, "q": T((TQ, HQ, 192)), "k": T((TK, HKV, 192)), "v": T((TK, HKV, 128)), "out": T((TQ, HQ, 128))}


def vl(base=VL, **over):
    return {k: v for k, v in {**base, **over}.items() if v is not None}


# (tensors, num_splits, pack_gqa, max_seqlen_q, max_seqlen_k) with -1 for None
VL_CASES = [
    (vl(), 0, -1, -1, -1),
    (vl(), 0, -1, -2, -1),
    (vl(), 0, -1, 10, -3),
    (vl(), -1, -1, -1, -1),
    (vl(), 2, -1, -1, -1),
    (vl(), 0, 1, -1, -1),
    (vl(q=T((1, TQ, HQ, D))), 0, -1, -1, -1),
    (vl(k=T((9, 64, HKV, D))), 0, -1, -1, -1),
    (vl(VPAGED, v=T((TK, HKV, D))), 0, -1, -1, -1),
    (vl(k=T((TK, HKV, D), strides=(HKV * D, 1, HKV))), 0, -1, -1, -1),
    (vl(q=T((TQ, HQ, D), offset=4)), 0, -1, -1, -1),
    (vl(v=T((TK, HKV, D), "fp16")), 0, -1, -1, -1),
    (vl(v=T((TK + 1, HKV, D))), 0, -1, -1, -1),
    (vl(k=T((TK, HKV, 64)), v=T((TK, HKV, 64))), 0, -1, -1, -1),
    (vl(k=T((TK, 3, D)), v=T((TK, 3, D))), 0, -1, -1, -1),
    (vl(cu_seqlens_q=None), 0, -1, -1, -1),
    (vl(cu_seqlens_k=None), 0, -1, -1, -1),
    (vl(VPAGED, cu_seqlens_k=None, seqused_k=T((B,), "i32")), 0, -1, -1, -1),
    (vl(cu_seqlens_q=T((0,), "i32")), 0, -1, -1, -1),
    (vl(cu_seqlens_q=T((B + 1, 1), "i32")), 0, -1, -1, -1),
    (vl(cu_seqlens_q=T((B + 1,), "f32")), 0, -1, -1, -1),
    (vl(cu_seqlens_q=T((B + 1,), "i32", strides=(2,))), 0, -1, -1, -1),
    (vl(cu_seqlens_k=T((B + 2,), "i32")), 0, -1, -1, -1),
    (vl(seqused_q=T((B + 1,), "i32")), 0, -1, -1, -1),
    (vl(seqused_k=T((B,), "i32")), 0, -1, -1, -1),
    (vl(VPAGED), 0, -1, -1, -1),
    (vl(VPAGED, page_table=T((B + 1, 4), "i32")), 0, -1, -1, -1),
    (vl(VPAGED, k=T((9, 24, HKV, D)), v=T((9, 24, HKV, D))), 0, -1, -1, -1),
    (vl(VPAGED, k=T((9, 24, HKV, D)), v=T((9, 24, HKV, D)), seqused_k=T((B,), "i32")), 0, -1, -1, -1),
    (vl(out=T((TQ, HQ, D), "fp16")), 0, -1, -1, -1),
    (vl(out=T((TQ, HQ, D), strides=(HQ * D, D, 1), offset=2)), 0, -1, -1, -1),
    (vl(lse=T((TQ, HQ), "f32")), 0, -1, -1, -1),
    # v's own head dim (head_dim_v): packed (192, 128) is built, its out is v's width
    (vl(MLA), 0, -1, -1, -1),
    (vl(MLA, out=T((TQ, HQ, 192))), 0, -1, -1, -1),
    (vl(MLA, v=T((TK + 1, HKV, 128))), 0, -1, -1, -1),
    (vl(VPAGED, v=T((9, 64, HKV, 64))), 0, -1, -1, -1),
    (vl(v=T((TK, HKV, 64))), 0, -1, -1, -1),
]


def arrays(tensors):
    out = {}
    for i, (name, (shape, dtype, strides, offset)) in enumerate(sorted(tensors.items())):
        out[name] = DeviceArray(BASE * (i + 1) + offset, shape, strides, dtype, device=0)
    return out


def lines(kind, tensors, *ints):
    text = f"{kind} {' '.join(str(-1 if i is None else i) for i in ints)}\n"
    for name, a in arrays(tensors).items():
        text += f"t {name} {a.dtype} {a.ptr} {len(a.shape)} {' '.join(map(str, a.shape))} " \
                f"{' '.join(map(str, a.strides))}\n"
    return text + "end\n"


def python_says(call) -> str:
    try:
        call()
    except InputError as e:
        return str(e)
    except Exception:  # noqa: BLE001  past the checks: no driver or no kernel here
        return "ok"
    return "ok"


def kv_python(tensors, splits, pack, seqlens, paged):
    a = arrays(tensors)
    lens = a.get("cache_seqlens") if seqlens == -1 else seqlens
    return python_says(lambda: kvcache.prepare_kvcache(
        a["q"], a["k_cache"], a["v_cache"], a.get("k"), a.get("v"), lens, a.get("cache_batch_idx"),
        a.get("page_table") if paged else None, None, True, splits, None if pack < 0 else bool(pack),
        a.get("out"), a.get("lse"), 0))


def vl_python(tensors, splits, pack, mq, mk):
    a = arrays(tensors)
    return python_says(lambda: varlen.prepare_varlen(
        a["q"], a["k"], a["v"], a.get("cu_seqlens_q"), a.get("cu_seqlens_k"), None if mq == -1 else mq,
        None if mk == -1 else mk, a.get("seqused_q"), a.get("seqused_k"), a.get("page_table"), None, False, splits,
        None if pack < 0 else bool(pack), a.get("out"), a.get("lse"), 0))


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("inference")
    stub = harness.build_stub(tmp / "stub")
    out = tmp / "inference_check"
    harness.run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-pedantic", "-Werror",
                 f"-I{harness.INCLUDE}", f"-I{harness.cuda_include()}", harness.CPP / "tests" / "inference_check.cpp",
                 "-o", out, f"-L{stub.parent}", "-lcuda", f"-Wl,-rpath,{stub.parent}"])
    return out


def _compare(exe, text, want, cases):
    got = subprocess.run([str(exe), str(MAX_SPLITS)], input=text, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(got) == len(want)
    bad = [f"case {i} {c[1:]} {sorted(c[0])}:\n  C++    {g}\n  Python {w}"
           for i, (c, g, w) in enumerate(zip(cases, got, want)) if g != w]
    assert not bad, "\n".join(bad)
    return got


def test_kvcache_errors_match_python(exe: Path):
    text = "".join(lines("kvcache", t, s, p, -2 if n is None else n, paged) for t, s, p, n, paged in KV_CASES)
    want = [kv_python(*c) for c in KV_CASES]
    got = _compare(exe, text, want, KV_CASES)
    assert got.count("ok") >= 5 and len(set(got)) >= 25, got  # the cases reach many different checks


def test_varlen_errors_match_python(exe: Path):
    text = "".join(lines("varlen", *c) for c in VL_CASES)
    want = [vl_python(*c) for c in VL_CASES]
    got = _compare(exe, text, want, VL_CASES)
    assert got.count("ok") >= 3 and len(set(got)) >= 20, got


# check_seqlens(cu_q, cu_k, used_q, used_k, total_q, total_k, paged, table, max_pages, page_size, num_pages)
VALUES = [
    ([0, 3, 7], [0, 5, 9], None, None, 7, 9, 0, None, 0, 0, 0),
    ([-1, 3, 7], [0, 5, 9], None, None, 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 2], [0, 5, 9], None, None, 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 8], [0, 5, 9], None, None, 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 7], [0, 5, 10], None, None, 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 7], [0, 5, 9], [3, -1], None, 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 7], [0, 5, 9], [3, 5], None, 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 7], [0, 5, 9], None, [5, 4], 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 7], [0, 5, 9], None, [6, 4], 7, 9, 0, None, 0, 0, 0),
    ([0, 3, 7], None, None, [100, 4], 7, -1, 1, [0, 1, 2, 3], 2, 64, 4),
    ([0, 3, 7], None, None, [200, 4], 7, -1, 1, [0, 1, 2, 3], 2, 64, 4),
    ([0, 3, 7], None, None, [100, 4], 7, -1, 1, [0, 4, 2, 3], 2, 64, 4),
    ([0, 3, 7], [0, 64, 65], None, None, 7, -1, 1, [0, 1, -2, 3], 2, 64, 4),
]


def test_host_value_checks_match_python(exe: Path):
    def lst(x):
        return "-1" if x is None else f"{len(x)} {' '.join(map(str, x))}"

    text, want = "", []
    for cu_q, cu_k, uq, uk, tq, tk, paged, table, mp, ps, np_ in VALUES:
        text += f"values {paged} {tq} {tk} {mp} {ps} {np_} {lst(cu_q)} {lst(cu_k)} {lst(uq)} {lst(uk)} {lst(table)}\n"
        try:
            varlen.check_seqlens(cu_q, cu_k, uq, uk, tq, None if tk < 0 else tk, paged=bool(paged), table=table,
                                 max_pages=mp, page_size=ps, num_pages=np_)
            want.append("ok")
        except InputError as e:
            want.append(str(e))
    got = _compare(exe, text, want, [(dict(), v) for v in VALUES])
    assert got.count("ok") == 3 and len(set(got)) == len(VALUES) - 2, got
