"""The C++ loader's kvcache and decode choices equal the Python runtime's, problem by problem:
runtime/cpp/tests/kvcache_choice.cpp, compiled against a bundle rendered from the local
registry (the default set's decode forms), prints what `choose_kvcache` (forms, split count,
pack-GQA) and `select` with sizes (the dispatcher's variant and its num_splits) pick; the
Python side asks kvcache._pick and registry_source.choose. Also checks the C++ port of the
decode plan against runtime/decode_plan.py. No GPU: the stub libcuda is linked."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

from cubinforge.runtime import kvcache  # noqa: E402
from cubinforge.runtime.decode_plan import decode_splits  # noqa: E402
from cubinforge.runtime.dispatch import Problem  # noqa: E402
from cubinforge.runtime.errors import InputError, VariantNotFound  # noqa: E402
from cubinforge.runtime.registry_source import LocalSource, choose, manifests  # noqa: E402

SRC = LocalSource()
_forms = [m for m in manifests(SRC, "fa3_fwd")[0] if m.axes.get("split_kv")]
pytestmark = [
    pytest.mark.skipif(harness.missing_tools("g++") is not None, reason=f"needs {harness.missing_tools('g++')}"),
    pytest.mark.skipif(not _forms, reason=f"no split-KV forms in {SRC.home} (make kernels ARCH=sm90)"),
]

# batch seqlen_q seqlen_k(capacity) heads_q heads_kv head_dim causal paged sm_count num_splits pack_gqa dtype
PROBLEMS = [
    (4, 1, 32768, 16, 16, 128, 1, 0, 132, 0, -1, "bf16"),    # the bench's --decode cells at 32k
    (4, 16, 32768, 16, 16, 128, 0, 0, 132, 0, -1, "bf16"),
    (4, 64, 32768, 16, 16, 128, 1, 0, 132, 0, -1, "bf16"),
    (16, 1, 8192, 16, 16, 128, 1, 0, 132, 0, -1, "bf16"),    # fills the SMs: no split
    (8, 1, 32768, 32, 8, 128, 1, 0, 132, 0, -1, "bf16"),     # dense decode, inference bench
    (8, 1, 32768, 32, 8, 128, 1, 1, 132, 0, -1, "bf16"),     # paged, page 256 capacity 32k
    (64, 1, 4096, 32, 8, 128, 1, 1, 132, 0, -1, "bf16"),
    (32, 4, 8192, 32, 8, 128, 1, 0, 132, 0, -1, "bf16"),     # speculative
    (32, 1, 8192, 64, 8, 128, 1, 0, 132, 0, -1, "bf16"),     # GQA 8
    (2, 3, 5000, 8, 2, 128, 0, 0, 132, 0, -1, "bf16"),
    (2, 3, 5000, 8, 2, 128, 1, 0, 132, 5, -1, "bf16"),       # explicit splits
    (2, 1, 5000, 8, 2, 128, 1, 1, 132, 1, -1, "bf16"),       # never split
    (2, 1, 5000, 8, 2, 128, 1, 0, 132, 0, 0, "bf16"),        # unpacked: not in the default set
    (2, 1, 5000, 8, 2, 128, 1, 0, 78, 0, -1, "bf16"),        # another SM count
    (4, 1, 32768, 16, 16, 128, 1, 0, 132, 0, -1, "fp16"),    # no fp16 decode forms: plain / error
    (4, 1, 32768, 16, 16, 64, 1, 0, 132, 0, -1, "bf16"),     # no hd64 forms
    (8, 64, 8192, 32, 8, 128, 1, 0, 132, 0, -1, "bf16"),     # the two-CTA 64 x 64 forms' last query count
    (8, 65, 8192, 32, 8, 128, 1, 0, 132, 0, -1, "bf16"),     # past it: 64 x 128
    (2, 2048, 8192, 32, 8, 128, 1, 0, 132, 0, -1, "fp16"),   # a chunk against a dense cache
    (16, 16, 8192, 16, 16, 128, 0, 0, 132, 0, -1, "fp16"),   # MHA decode: flash_attn routes to the form
    (1, 512, 512, 16, 16, 128, 1, 0, 132, 0, -1, "bf16"),    # prefill
    (1, 4096, 4096, 16, 16, 192, 1, 0, 132, 0, -1, "bf16"),  # head_dim_v left out: V as wide as Q, not dv128
]


def python_line(b, sq, sk, hq, hkv, d, causal, paged, sms, splits, pack, dtype) -> str:
    try:
        plan, fwd = kvcache._pick("sm_90a", dtype, d, bool(causal), sq, None if pack < 0 else bool(pack), bool(paged),
                                  splits, sms, b, hq, hkv, sk, SRC)
        comb = kvcache._combine_kernel("sm_90a", dtype, d, SRC).variant if fwd.manifest.axes.get("split_kv") else "-"
        kv = f"{fwd.variant} {comb} {plan.num_splits} {int(plan.pack_gqa)}"
    except (VariantNotFound, InputError):
        kv = "error"
    try:
        choice = choose(Problem("fa3_fwd", {"arch": "sm_90a", "dtype": dtype, "head_dim": d, "causal": bool(causal)},
                                batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, sm_count=sms), SRC)
        dense = f"{choice.best.variant} {choice.params.get('num_splits', 0)}"
    except VariantNotFound:
        dense = "error 0"
    return f"{kv} | {dense} | {decode_splits(b, sq, hq, hkv, sk, sms)}"


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    from cubinforge.generator.cpp_bundle import load_home, render_cpp_bundle

    tmp = tmp_path_factory.mktemp("kvcache")
    stub = harness.build_stub(tmp / "stub")
    ms, blobs = load_home(SRC.home)
    render_cpp_bundle(ms, blobs, tmp / "bundle")
    out = tmp / "kvcache_choice"
    harness.run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-pedantic", "-Werror",
                 f"-I{harness.INCLUDE}", f"-I{tmp / 'bundle'}", f"-I{harness.cuda_include()}",
                 harness.CPP / "tests" / "kvcache_choice.cpp", "-o", out, f"-L{stub.parent}", "-lcuda",
                 f"-Wl,-rpath,{stub.parent}"])
    return out


def test_cpp_chooses_what_python_chooses(exe: Path):
    import subprocess
    lines = "\n".join(" ".join(map(str, p)) for p in PROBLEMS) + "\n"
    got = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True).stdout.splitlines()
    want = [python_line(*p) for p in PROBLEMS]
    assert len(got) == len(want)
    bad = [f"{p}:\n  C++    {g}\n  Python {w}" for p, g, w in zip(PROBLEMS, got, want) if g.strip() != w]
    assert not bad, "\n".join(bad)
    # The cases mean something: the 32k decode cells route to the split forms in both.
    assert "splitkv" in got[0].split("|")[1] and got[0].split("|")[1].split()[1] == "2"
    assert "splitkv" not in got[3].split("|")[1]
    assert "hd192-causal" in got[-1] and "dv128" not in got[-1]


# dtype head_dim causal paged head_dim_v (-1: as head_dim): the varlen forward each side picks
# (varlen.select_varlen_variant); (192, 128) and hd256 are spec.VARLEN_WIDE's.
VARLEN = [(dt, d, c, p, -1) for dt in ("bf16", "fp16") for d in (64, 128, 192, 256) for c in (0, 1)
          for p in (0, 1)] + [(dt, 192, c, p, 128) for dt in ("bf16", "fp16") for c in (0, 1) for p in (0, 1)]


def test_cpp_chooses_the_varlen_variant_python_chooses(exe: Path):
    import subprocess
    from cubinforge.runtime import varlen

    lines = "".join(f"varlen {dt} {d} {c} {p} {dv}\n" for dt, d, c, p, dv in VARLEN)
    got = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True).stdout.splitlines()
    want = []
    for dt, d, c, p, dv in VARLEN:
        try:
            want.append(varlen.select_varlen_variant("sm_90a", dt, d, bool(c), bool(p), SRC,
                                                     head_dim_v=None if dv < 0 else dv).variant)
        except VariantNotFound:
            want.append("error")
    assert got == want
    assert sum(w != "error" for w in want) >= 4, want  # the default set's varlen forms are there
    if any("dv128" in w for w in want):  # a registry with spec.VARLEN_WIDE: hd192 means v as wide
        assert all(("dv128" in w) == (dv == 128) for w, (_, _, _, _, dv) in zip(want, VARLEN) if w != "error")


# The model variants (issue 12): causal window_left window_right softcap sink, then
# batch seqlen_q seqlen_k heads_q heads_kv head_dim paged sm_count num_splits dtype.
MODEL = [
    (0, 1023, 0, 0.0, 0, 8, 1, 8192, 32, 8, 128, 1, 132, 0, "bf16"),    # window: paged decode forms
    (1, 127, -1, 0.0, 0, 4, 4, 4096, 32, 8, 128, 1, 132, 3, "bf16"),    # causal sets right = 0
    (0, -1, 0, 0.0, 0, 4, 1, 4096, 32, 8, 128, 1, 132, 0, "bf16"),      # (-1, 0) is plain causal
    (1, -1, -1, 0.0, 1, 4, 1, 4096, 64, 8, 64, 1, 132, 0, "bf16"),      # gpt-oss: hd64 sink
    (1, 128, 0, 0.0, 1, 4, 2, 4096, 64, 8, 64, 1, 132, 0, "bf16"),      # gpt-oss: hd64 window + sink
    (1, -1, -1, 50.0, 0, 2, 1, 3000, 16, 8, 256, 1, 132, 0, "bf16"),    # Gemma-2: hd256 softcap
    (0, 63, 0, 0.0, 0, 1, 1000, 1000, 8, 8, 128, 0, 132, 0, "bf16"),    # dense prefill window / varlen window
    (1, -1, -1, 30.0, 0, 2, 600, 900, 8, 2, 128, 0, 132, 0, "bf16"),    # dense softcap
    (1, -1, -1, 0.0, 1, 2, 512, 640, 16, 16, 128, 0, 132, 0, "bf16"),   # dense sink
    (0, 64, 64, 30.0, 1, 2, 1, 4096, 32, 8, 128, 1, 132, 0, "bf16"),    # nothing builds all three: nearest
    (0, 64, 64, 0.0, 0, 2, 1, 4096, 32, 8, 128, 1, 132, 0, "fp16"),     # no fp16 window forms
]


def python_model_lines(causal, wl, wr, cap, sink, b, sq, sk, hq, hkv, d, paged, sms, splits, dtype):
    from cubinforge.runtime.varlen import select_varlen_variant
    from cubinforge.runtime.variants import resolve

    va = resolve(bool(causal), (wl, wr), cap, bool(sink))
    try:
        plan, fwd = kvcache._pick("sm_90a", dtype, d, va.causal, sq, None, bool(paged), splits, sms, b, hq, hkv, sk,
                                  SRC, va)
        comb = kvcache._combine_kernel("sm_90a", dtype, d, SRC).variant if fwd.manifest.axes.get("split_kv") else "-"
        kv, msg = f"{fwd.variant} {comb} {plan.num_splits}", "-"
    except VariantNotFound as e:
        kv, msg = "error", str(e)
    try:
        dense = choose(Problem("fa3_fwd", {"arch": "sm_90a", "dtype": dtype, "head_dim": d, **va.axes}, batch=b,
                               seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, sm_count=sms), SRC).best.variant
    except VariantNotFound:
        dense = "error"
    try:
        vl = select_varlen_variant("sm_90a", dtype, d, va.causal, bool(paged), SRC, va).variant
    except VariantNotFound:
        vl = "error"
    return f"{kv} | {dense} | {vl}", msg


def test_cpp_chooses_the_model_variants_python_chooses(exe: Path):
    """resolve_variant + choose_kvcache / select / choose_varlen pick what variants.resolve +
    kvcache._pick / choose / select_varlen_variant pick, and a miss names the same model
    axes and the nearest variants."""
    import subprocess

    lines = "".join("model " + " ".join(map(str, p)) + "\n" for p in MODEL)
    out = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True).stdout.splitlines()
    got, msgs = out[0::2], out[1::2]
    want = [python_model_lines(*p) for p in MODEL]
    bad = [f"{p}:\n  C++    {g}\n  Python {w}" for p, g, (w, _) in zip(MODEL, got, want) if g.strip() != w]
    assert not bad, "\n".join(bad)
    for p, g, m, (_, pm) in zip(MODEL, got, msgs, want):
        if not g.startswith("error"):
            continue
        # The same request and hint in both; C++ writes its nearest list with the bundle's axis text.
        assert m.split(" (built for")[0] == pm.split(" (built for")[0], (m, pm)
        assert "SET=inference" in m and "Nearest:" in m and "Nearest:" in pm
    # The cases mean something: windows reach the local forms, sinks the sink forms, the miss misses.
    assert "local" in got[0].split("|")[0] and "splitkv" in got[0]
    assert "local" in got[1].split("|")[0]
    assert "hd128-causal" in got[2].split("|")[1] and "local" not in got[2]
    assert "sink" in got[3].split("|")[0] and "local-sink" in got[4].split("|")[0]
    assert "softcap" in got[5].split("|")[0]
    assert "varlen-local" in got[6].split("|")[2] and "noncausal-local" in got[6].split("|")[1]
    assert "softcap" in got[7].split("|")[1] and "sink" in got[8].split("|")[1]
    assert got[9].startswith("error") and "local=True, softcap=True, learnable_sink=True" in msgs[9]


def test_cpp_resolves_the_variant_arguments_as_python_does(exe: Path):
    """variants.h resolve_variant against runtime/variants.py resolve over FlashAttention's
    corners: no window, (-1, 0) = causal, causal setting right = 0, any negative = -1,
    windows of 0 and one-sided, softcap on/off/bad, a sink."""
    import subprocess
    from cubinforge.runtime.variants import resolve

    windows = [(-1, -1), (-1, 0), (0, 0), (63, 0), (-5, -3), (-1, 7), (128, 128), (4096, -1), (0, -1), (-9, 0)]
    grid = [(c, w, cap, sink) for c in (0, 1) for w in windows for cap in (0.0, 30.0, -1.0, float("nan"), 0.5)
            for sink in (0, 1)]
    lines = "".join(f"resolve {c} {w[0]} {w[1]} {cap!r} {sink}\n" for c, w, cap, sink in grid)
    got = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True).stdout.splitlines()
    want = []
    for c, w, cap, sink in grid:
        try:
            va = resolve(bool(c), w, cap, bool(sink))
        except InputError as e:
            want.append(f"error {e}")
            continue
        scalars = "".join(f" {k}={v!r}" for k, v in va.scalars.items())
        want.append(f"{int(va.causal)} {int(va.local)} {int(va.softcap)} {int(va.learnable_sink)}{scalars}")
    bad = [f"{g_}: C++ {a!r} Python {b!r}" for g_, a, b in zip(grid, got, want) if a != b]
    assert len(got) == len(want) and not bad, "\n".join(bad[:10])
    assert any(w.startswith("error softcap") for w in want) and any("window_left=63" in w for w in want)
