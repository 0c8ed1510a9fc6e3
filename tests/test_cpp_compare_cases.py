"""examples/cpp/compare_inference_with_python.py's case list, on the CPU: it covers every C++
entry point (dense attention, flash_attn_with_kvcache in each form, flash_attn_varlen_func
packed and paged, flash_attn_combine), and every case passes both sides' host checks
(check_lib.cpp with launch=0, built against the stub libcuda; the Python runtime's prepare
calls on fake device pointers, which get past their checks and fail only at the missing
driver), so the H200 run spends its time comparing, not finding a malformed case."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

from cubinforge.runtime import kvcache  # noqa: E402
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.errors import InputError  # noqa: E402
from cubinforge.runtime.registry_source import LocalSource, manifests  # noqa: E402

_spec = importlib.util.spec_from_file_location("cmp_inference", harness.EXAMPLE / "compare_inference_with_python.py")
cmp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmp)

SRC = LocalSource()
H200_SMS = 132


def of(entry):
    return [c for c in cmp.CASES if c["entry"] == entry]


def test_cases_cover_every_entry_point():
    assert {c["entry"] for c in cmp.CASES} == {"dense", "kvcache", "varlen", "combine"}
    kv = of("kvcache")
    assert {c["page_size"] for c in kv} >= {0, 1, 16, 256}
    assert any(c["page_size"] % 16 for c in kv if c["page_size"] > 1)        # the gather path
    assert {0, 1} <= {c["num_splits"] for c in kv} and any(c["num_splits"] > 1 for c in kv)
    assert any(c["seqlen_new"] and not c["page_size"] and not c["batch_idx"] for c in kv)   # append, dense
    assert any(c["seqlen_new"] and c["page_size"] for c in kv)                               # append, paged
    assert any(c["batch_idx"] and not c["seqlen_new"] for c in kv)
    assert any(c["batch_idx"] and c["seqlen_new"] for c in kv)
    assert any(c["capacity"] >= 32768 for c in kv)                                          # long context
    assert {c["causal"] for c in kv} == {0, 1} and any(c["heads_q"] == c["heads_kv"] for c in kv)
    vl = of("varlen")
    assert any(not c["page_size"] for c in vl) and {16, 256} <= {c["page_size"] for c in vl}
    assert any(c["page_size"] % 16 for c in vl if c["page_size"])
    assert any(0 in c["q_lens"] and 1 in c["q_lens"] for c in vl)
    assert any(c["used_q"] is not None and c["used_q"] != c["q_lens"] for c in vl)
    assert {c["causal"] for c in vl} == {0, 1} and {c["head_dim"] for c in vl} >= {64, 128}
    dense = of("dense")
    assert {c["dtype"] for c in dense} == {"bf16", "fp16"} and {c["causal"] for c in dense} == {0, 1}
    assert of("combine")


def test_cases_cover_the_model_variants():
    """Issue 12's arguments on every entry point that takes them: small windows (one side and
    both), the resolve rule's corners ((-1, 0) is causal; causal sets right = 0), softcap and
    a sink, in dense attention, paged kvcache decode and varlen."""
    dense = [c for c in of("dense") if cmp.has_model(c)]
    windows = {tuple(c["window"]) for c in dense}
    assert {(63, 0), (128, 128), (-1, 0)} <= windows and any(w[0] >= 4096 for w in windows)
    assert any(c["softcap"] == 30.0 for c in dense) and any(c["sink"] for c in dense)
    assert any(c["causal"] and c["window"][1] < 0 <= c["window"][0] for c in dense)
    kv = [c for c in of("kvcache") if cmp.has_model(c)]
    assert all(c["page_size"] for c in kv)                                     # paged decode
    assert any(c["window"] != (-1, -1) and not c["sink"] for c in kv)
    assert any(c["sink"] and c["window"] == (-1, -1) for c in kv) and any(c["sink"] and c["window"] != (-1, -1)
                                                                         for c in kv)
    assert any(c["softcap"] for c in kv) and any(c["num_splits"] > 1 for c in kv)
    vl = [c for c in of("varlen") if cmp.has_model(c)]
    assert {(63, 0), (128, 128)} <= {tuple(c["window"]) for c in vl}


@pytest.mark.skipif(not [m for m in manifests(SRC, "fa3_fwd")[0] if m.axes.get("local")],
                    reason=f"no model variants in {SRC.home} (make kernels ARCH=sm90)")
def test_model_cases_have_their_variants_in_the_default_set():
    """Every model case finds its variant in the registry (the default set builds them), so
    the H200 run compares it rather than skipping it."""
    from cubinforge.runtime.attention import choose_attention_variant
    from cubinforge.runtime.variants import resolve
    from cubinforge.runtime.varlen import select_varlen_variant

    for c in (c for c in cmp.CASES if cmp.has_model(c)):
        va = resolve(bool(c["causal"]), **cmp.model(c), has_sink=bool(c["sink"]))
        if c["entry"] == "dense":
            axes = choose_attention_variant(c["dtype"], c["head_dim"], arch="sm_90a", source=SRC, **va.axes).best.axes
        elif c["entry"] == "kvcache":
            capacity = cmp._pages(c["capacity"], c["page_size"]) * c["page_size"]
            _, fwd = kvcache._pick("sm_90a", "bf16", c["head_dim"], va.causal, c["seqlen_q"], None, True,
                                   c["num_splits"], H200_SMS, c["batch"], c["heads_q"], c["heads_kv"], capacity, SRC,
                                   va)
            axes = fwd.manifest.axes
        else:
            axes = select_varlen_variant("sm_90a", "bf16", c["head_dim"], va.causal, False, SRC, va).axes
        assert {a: bool(axes.get(a)) for a in ("local", "softcap", "learnable_sink")} == \
            {a: va.axes[a] for a in ("local", "softcap", "learnable_sink")}, c


@pytest.mark.skipif(not [m for m in manifests(SRC, "fa3_fwd")[0] if m.axes.get("split_kv")],
                    reason=f"no split-KV forms in {SRC.home} (make kernels ARCH=sm90)")
def test_kvcache_cases_reach_split_combine_and_pack_gqa_on_an_h200():
    """What the Python runtime would pick on 132 SMs: auto splits > 1 (the combine kernel) on a
    long-context case, pack-GQA over several query tokens, split and unsplit forms."""
    picks = []
    for c in (c for c in of("kvcache") if not cmp.has_model(c)):
        paged = bool(c["page_size"] or c["batch_idx"]) and c["page_size"] % 16 == 0
        plan, fwd = kvcache._pick("sm_90a", "bf16", 128, bool(c["causal"]), c["seqlen_q"], None, paged,
                                  c["num_splits"], H200_SMS, c["batch"], c["heads_q"], c["heads_kv"],
                                  cmp._pages(c["capacity"], c["page_size"]) * c["page_size"] if c["page_size"]
                                  else c["capacity"], SRC)
        picks.append((c, plan, fwd.manifest.axes))
    assert any(c["num_splits"] == 0 and p.num_splits > 1 and c["capacity"] >= 32768 for c, p, _ in picks)
    assert any(a.get("split_kv") for _, _, a in picks) and any(not a.get("split_kv") for _, _, a in picks)
    # pack-GQA with queries of several tokens sharing a KV head (the default set builds packed forms)
    assert any(a.get("pack_gqa") and c["heads_q"] > c["heads_kv"] and c["seqlen_q"] > 1 for c, _, a in picks)


@pytest.mark.skipif(not [m for m in manifests(SRC, "fa3_fwd")[0] if m.axes.get("split_kv")],
                    reason=f"no split-KV forms in {SRC.home} (make kernels ARCH=sm90)")
def test_dense_decode_cases_reach_split_combine_on_an_h200():
    """What flash_attn_func's dispatcher picks on 132 SMs for the dense cases: the split-KV
    forms with several split counts (so the C++ side must run split + combine), the unsplit
    pack-GQA form for hd64, and the plain kernel for the prefill cases."""
    from cubinforge.runtime.attention import choose_attention_variant

    picks = []
    for c in (c for c in of("dense") if not cmp.has_model(c)):
        sizes = {k: c[k] for k in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv")}
        ch = choose_attention_variant(c["dtype"], c["head_dim"], bool(c["causal"]), arch="sm_90a", source=SRC,
                                      sizes={**sizes, "sm_count": H200_SMS})
        picks.append((c, ch.best.axes, ch.params.get("num_splits")))
    split = [(c, n) for c, a, n in picks if a.get("split_kv")]
    assert len({n for _, n in split}) >= 3 and all(n > 1 for _, n in split)
    assert {c["head_dim"] for c, _ in split} == {64, 128, 256} and {c["dtype"] for c, _ in split} == {"bf16", "fp16"}
    assert any(c["seqlen_q"] > 1 and c["causal"] for c, _ in split)
    assert any(a.get("pack_gqa") and not a.get("split_kv") for _, a, _ in picks)
    assert any(not a.get("pack_gqa") and not a.get("split_kv") for _, a, _ in picks)


BASE = 1 << 32


def fake_arrays(case):
    """name -> DeviceArray at made-up, 256-byte aligned addresses, compact."""
    out = {}
    for i, (n, (shape, dtype)) in enumerate(cmp.tensors(case).items()):
        out[n] = DeviceArray(BASE * (i + 1), shape, cmp.compact(shape), dtype, device=0)
    return out


def python_says(case, a) -> str:
    from cubinforge.runtime import flash_attn_func
    from cubinforge.runtime.varlen import prepare_varlen

    g, e = a.get, case["entry"]
    mv = {**cmp.model(case), "learnable_sink": g("learnable_sink")}
    try:
        if e == "kvcache":
            kvcache.prepare_kvcache(a["q"], a["k_cache"], a["v_cache"], k=g("k"), v=g("v"),
                                    cache_seqlens=a["cache_seqlens"], cache_batch_idx=g("cache_batch_idx"),
                                    page_table=g("page_table"), causal=bool(case["causal"]),
                                    num_splits=case["num_splits"], out=a["o"], lse=a["lse"], source=SRC, **mv)
        elif e == "varlen":
            prepare_varlen(a["q"], a["k"], a["v"], a["cu_seqlens_q"], g("cu_seqlens_k"), seqused_q=g("seqused_q"),
                           seqused_k=g("seqused_k"), page_table=g("page_table"), causal=bool(case["causal"]),
                           out=a["o"], lse=a["lse"], source=SRC, **mv)
        elif e == "combine":
            kvcache.flash_attn_combine(a["out_partial"], a["lse_partial"], out=a["o"], lse=a["lse"], source=SRC)
        else:
            flash_attn_func(a["q"], a["k"], a["v"], causal=bool(case["causal"]), out=a["o"], lse=a["lse"],
                            source=SRC, **mv)
    except InputError as err:
        return str(err)
    except Exception:  # noqa: BLE001  past the checks: no driver here
        return "ok"
    return "ok"


@pytest.fixture(scope="module")
def check_lib(tmp_path_factory):
    if harness.missing_tools("g++"):
        pytest.skip(harness.missing_tools("g++"))
    from cubinforge.generator.cpp_bundle import load_home, render_cpp_bundle

    tmp = tmp_path_factory.mktemp("check_lib")
    stub = harness.build_stub(tmp / "stub")
    ms, blobs = load_home(SRC.home)
    if not ms:  # a fresh checkout before `make kernels`: a bundle of no variants does not compile
        pytest.skip(f"no variants in {SRC.home} (make kernels ARCH=sm90)")
    render_cpp_bundle(ms, blobs, tmp / "bundle")
    lib = tmp / "libcubinforge_check.so"
    harness.run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-pedantic", "-Werror", "-shared",
                 "-fPIC", f"-I{harness.INCLUDE}", f"-I{tmp / 'bundle'}", f"-I{harness.cuda_include()}",
                 harness.EXAMPLE / "check_lib.cpp", "-o", lib, f"-L{stub.parent}", "-lcuda",
                 f"-Wl,-rpath,{stub.parent}"])
    return lambda reqs: _in_child(lib, reqs)


# The library links the stub libcuda.so.1: it is loaded in a child process, so the test
# process never holds a libcuda that cuda-bindings would then find.
_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("c", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
call = mod.load(sys.argv[2])
print(json.dumps([call(text, launch) for text, launch in json.load(sys.stdin)]))
"""


def _in_child(lib, reqs):
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(harness.EXAMPLE / "compare_inference_with_python.py"),
                           str(lib)], input=json.dumps(reqs), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _request(case, arrays):
    return cmp.request(case, {n: (a.ptr, a.shape, a.strides, a.dtype) for n, a in arrays.items()})


def test_every_case_passes_both_sides_host_checks(check_lib):
    arrays = [fake_arrays(c) for c in cmp.CASES]
    replies = check_lib([(_request(c, a), False) for c, a in zip(cmp.CASES, arrays)])
    bad = []
    for c, a, cpp in zip(cmp.CASES, arrays, replies):
        py = python_says(c, a)
        if cpp != "ok - 0" or py != "ok":
            bad.append(f"{c['entry']} {cmp.label(c)}:\n  C++    {cpp}\n  Python {py}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("entry, name", [("kvcache", "lse"), ("varlen", "cu_seqlens_q"), ("combine", "lse_partial")])
def test_a_malformed_case_is_refused_by_both_in_the_same_words(check_lib, entry, name):
    c = of(entry)[0]
    a = fake_arrays(c)
    x = a[name]
    a[name] = DeviceArray(x.ptr, x.shape[:-1] + (x.shape[-1] + 1,), cmp.compact(x.shape[:-1] + (x.shape[-1] + 1,)),
                          x.dtype, device=0)
    (cpp,), py = check_lib([(_request(c, a), False)]), python_says(c, a)
    assert cpp.startswith("error CUDA_ERROR_INVALID_VALUE: ") and py != "ok"
    assert cpp.split(": ", 1)[1] == py


def _model_case(entry):
    return next(c for c in of(entry) if cmp.has_model(c))


@pytest.mark.parametrize("entry", ["dense", "kvcache", "varlen"])
@pytest.mark.parametrize("softcap", [-1.0, float("nan"), float("inf"), -0.25])
def test_a_bad_softcap_is_refused_by_both_in_the_same_words(check_lib, entry, softcap):
    c = {**_model_case(entry), "softcap": softcap}
    a = fake_arrays(c)
    (cpp,), py = check_lib([(_request(c, a), False)]), python_says(c, a)
    assert py.startswith("softcap must be finite and >= 0"), py
    assert cpp == "error CUDA_ERROR_INVALID_VALUE: " + py


@pytest.mark.parametrize("entry", ["dense", "kvcache", "varlen"])
@pytest.mark.parametrize("bad", ["shape", "dtype", "stride"])
def test_a_bad_sink_is_refused_by_both_in_the_same_words(check_lib, entry, bad):
    c = {**_model_case(entry), "sink": 1}
    a = fake_arrays(c)
    s = a["learnable_sink"]
    if bad == "shape":
        a["learnable_sink"] = DeviceArray(s.ptr, (s.shape[0] + 1,), (1,), "f32", device=0)
    elif bad == "dtype":
        a["learnable_sink"] = DeviceArray(s.ptr, s.shape, (1,), "i32", device=0)
    else:
        a["learnable_sink"] = DeviceArray(s.ptr, s.shape, (2,), "f32", device=0)
    (cpp,), py = check_lib([(_request(c, a), False)]), python_says(c, a)
    if entry == "dense" and bad == "stride":
        # flash_attn_func leaves the stride to the variant's contract, checked at the launch
        assert cpp == "ok - 0" and py == "ok"
        return
    assert py.startswith("learnable_sink must be"), py
    assert cpp == "error CUDA_ERROR_INVALID_VALUE: " + py


def test_launching_without_a_driver_fails_cleanly(check_lib):
    reqs = [(_request(c, fake_arrays(c)), True) for c in (of(e)[0] for e in ("dense", "kvcache", "varlen", "combine"))]
    *launched, bogus = check_lib(reqs + [("bogus\nend\n", False)])
    assert launched == ["error CUDA_ERROR_NO_DEVICE: cuInit failed"] * 4
    assert bogus.startswith("error CUDA_ERROR_INVALID_VALUE: request: unknown entry point")


def test_int_values_fit_their_tensors():
    for c in cmp.CASES:
        shapes = cmp.tensors(c)
        for n, v in cmp.int_values(c).items():
            assert v.shape == shapes[n][0], (c, n)
        if c["entry"] == "kvcache":
            lens = cmp.int_values(c)["cache_seqlens"]
            assert lens.max() + c["seqlen_new"] <= c["capacity"] and lens[-1] + c["seqlen_new"] == c["capacity"]


@pytest.mark.skipif(not [m for m in manifests(SRC, "fa3_fwd")[0] if m.axes.get("varlen")],
                    reason=f"no varlen forms in {SRC.home} (make kernels ARCH=sm90)")
def test_packed_bf16_hd128_varlen_cases_reach_the_ragged_o_store():
    """The shipped packed bf16 hd128 varlen forms store O through a ragged tensor map
    (config.TUNED_VARLEN_DTYPE): the case list runs them non-causal and causal, so the H200
    run proves the C++ ragged encode bit for bit on both."""
    from cubinforge.runtime.varlen import select_varlen_variant

    reached = set()
    for c in of("varlen"):
        if c["page_size"] or c["head_dim"] != 128 or cmp.has_model(c):
            continue
        m = select_varlen_variant("sm_90a", "bf16", 128, bool(c["causal"]), False, SRC)
        if any(p.spec.get("ragged_dim") is not None for p in m.contract.params):
            reached.add(c["causal"])
    assert reached == {0, 1}
