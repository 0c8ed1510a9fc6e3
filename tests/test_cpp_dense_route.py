"""The C++ dense entry point (attention.h prepare_attention) routes as the Python runtime's
flash_attn_func does: over a grid of decode-shaped and other dense problems (hd64/128/256,
GQA 1/4/8, seqlen_q 1..64 and a prefill, seqlen_k 512..65536, 132 SMs) both pick the same
variant and num_splits, and the plan makes the launches Python makes: the same kernels in the
same order (split-KV forward, then the combine), the same grids, every parameter byte
(pointers to the split partials and key counts included) and the same fill of the key counts
at prepare; its run() calls cuLaunchKernelEx once per launch and nothing else.

C++: runtime/cpp/tests/dense_route.cpp, a fake driver of its own (MockDriver's answers),
against a bundle rendered from the local registry. Python: flash_attn_func under
bench/host_overhead.py's MockDriver, with a tensor-map encode that writes what the C++ fake
writes (the global address, then a hash of every other argument). No GPU."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

from cubinforge.bench.host_overhead import MockDriver  # noqa: E402
from cubinforge.runtime import attention, kvcache  # noqa: E402
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.registry_source import LocalSource, manifests  # noqa: E402

SRC = LocalSource()
_forms = [m for m in manifests(SRC, "fa3_fwd")[0] if m.axes.get("split_kv") and not m.axes.get("paged_kv")]
pytestmark = [
    pytest.mark.skipif(harness.missing_tools("g++") is not None, reason=f"needs {harness.missing_tools('g++')}"),
    pytest.mark.skipif(not _forms, reason=f"no split-KV forms in {SRC.home} (make kernels ARCH=sm90)"),
]
SMS = 132
# dense_route.cpp's fake addresses of q, k, v, o, lse.
BASE, STEP = 1 << 40, 1 << 37


def grid():
    """batch seqlen_q seqlen_k heads_q heads_kv head_dim causal dtype sm_count."""
    out = []
    for d in (64, 128, 256):
        for group in (1, 4, 8):
            for b in (1, 16):
                for sq in (1, 2, 4, 8, 16, 64, 512):
                    for sk in (512, 2048, 8192, 32768, 65536):
                        out.append((b, sq, sk, 8 * group, 8, d, int(sq % 2 == 0 or sk == 8192), "bf16", SMS))
    # fp16, the other causal flag and another SM count on a few decode cells
    out += [(4, 1, 32768, 16, 16, 128, c, "fp16", SMS) for c in (0, 1)]
    out += [(2, 4, 16384, 32, 8, d, 0, "bf16", 78) for d in (64, 128, 256)]
    return out


PROBLEMS = grid()
# ... and the dense cases the H200 check compares bit for bit (examples/cpp/compare_inference_with_python.py).
_spec = importlib.util.spec_from_file_location("cmp_inference", harness.EXAMPLE / "compare_inference_with_python.py")
cmp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmp)
PROBLEMS += [(*c[:7], c[7], SMS) for c in cmp.DENSE_CASES + cmp.DENSE_DECODE_CASES]


def _fnv(values) -> int:
    h = 0xCBF29CE484222325
    for v in values:
        for i in range(8):
            h ^= (int(v) >> (8 * i)) & 0xFF
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class _Recording(MockDriver):
    """MockDriver whose tensor maps hold what dense_route.cpp's fake encode writes."""

    def _fakes(self):
        fakes = super()._fakes()
        d = self.d

        def encode(dtype, rank, address, dims, strides, box, estr, il, sw, l2, oob):
            h = _fnv([dtype, rank, *dims, *strides, *box, *estr, il, sw, l2, oob])
            tm = d.CUtensorMap()
            ctypes.memmove(tm.getPtr(), int(address).to_bytes(8, "little")
                           + h.to_bytes(8, "little"), 16)
            self.counts["cuTensorMapEncodeTiled"] += 1
            return d.CUresult.CUDA_SUCCESS, tm

        fakes["cuTensorMapEncodeTiled"] = encode
        return fakes


def _arr(i, shape, dtype):
    return DeviceArray.from_pointer(BASE + i * STEP, tuple(shape), None, dtype, device=0)


def python_lines(b, sq, sk, hq, hkv, d, causal, dtype, sms) -> list[str]:
    from cubinforge.runtime.attention import choose_attention_variant

    from cubinforge.runtime import driver

    mock = _Recording()
    mock.install()
    driver._sm_cache.clear()     # this problem's SM count, not the last one's
    try:
        orig = mock.d.cuDeviceGetAttribute

        def attr(a, dev):
            ok, v = orig(a, dev)
            return ok, sms if a == mock.d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT else v
        mock.d.cuDeviceGetAttribute = attr
        kvcache.clear_cache()
        q, k, v = _arr(0, (b, sq, hq, d), dtype), _arr(1, (b, sk, hkv, d), dtype), _arr(2, (b, sk, hkv, d), dtype)
        o, lse = _arr(3, (b, sq, hq, d), dtype), _arr(4, (b, hq, sq), "f32")
        attention.flash_attn_func(q, k, v, causal=bool(causal), out=o, lse=lse, source=SRC)
        (ent,) = attention._calls.values()
        choice = choose_attention_variant(dtype, d, bool(causal), arch="sm_90a", source=SRC, head_dim_v=d,
                                          sizes=dict(batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                                                     sm_count=sms))
        decode = isinstance(ent, attention._CachedDecode)
        launches = [(kern, plan) for kern, plan, _ in ent.launches] if decode else [(ent.kernel, ent.plan)]
        split = decode and bool(launches[0][0].manifest.axes.get("split_kv"))
        lines = [f"choice {choice.best.variant} {choice.params.get('num_splits', 1) if split else 1} {int(decode)}"]
        lines += [f"memset {p} {val} {n}" for p, val, n in mock.memsets]
        for kern, plan in launches:
            lines.append(f"launch {kern.variant} grid {' '.join(map(str, plan.grid))} params "
                         + b"".join(bytes(x) for x in plan.buffers).hex())
        lines.append(f"run {mock.counts['cuLaunchKernelEx']} 0")
        return lines
    finally:
        mock.uninstall()
        kvcache.clear_cache()
        driver._sm_cache.clear()


@pytest.fixture(scope="module")
def cpp_lines(tmp_path_factory):
    from cubinforge.generator.cpp_bundle import load_home, render_cpp_bundle

    tmp = tmp_path_factory.mktemp("dense_route")
    ms, blobs = load_home(SRC.home)
    render_cpp_bundle(ms, blobs, tmp / "bundle")
    exe = tmp / "dense_route"
    # No -lcuda: the program defines the driver entry points itself.
    harness.run([shutil.which("g++"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-pedantic", "-Werror",
                 f"-I{harness.INCLUDE}", f"-I{tmp / 'bundle'}", f"-I{harness.cuda_include()}",
                 harness.CPP / "tests" / "dense_route.cpp", "-o", exe])
    text = "".join(" ".join(map(str, p)) + "\n" for p in PROBLEMS)
    out = subprocess.run([str(exe), str(tmp / "bundle")], input=text, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    blocks, cur = [], None
    for line in out.stdout.splitlines():
        if line.startswith(("choice ", "error ")):
            cur = [line]
            blocks.append(cur)
        else:
            cur.append(line)
    assert len(blocks) == len(PROBLEMS), out.stdout[-2000:]
    return blocks


@pytest.fixture(scope="module")
def parsed_once():
    """The registry's manifests parsed once for the whole grid (the runtime parses them on
    every first call of a shape, 0.3 s here; what it chooses from them is unchanged)."""
    from cubinforge.runtime import registry_source

    real = registry_source.manifests
    memo: dict = {}

    def manifests(source=None, family=None):
        key = (id(source), family)
        if key not in memo:
            memo[key] = (source, real(source, family))
        return memo[key][1]
    registry_source.manifests = kvcache.manifests = manifests
    yield
    registry_source.manifests = kvcache.manifests = real


def test_cpp_dense_plans_launch_what_flash_attn_func_launches(cpp_lines, parsed_once):
    bad = []
    for p, cpp in zip(PROBLEMS, cpp_lines):
        py = python_lines(*p)
        if cpp != py:
            diff = next(i for i, (a, b) in enumerate(zip(cpp + [""], py + [""])) if a != b)
            bad.append(f"{p} line {diff}:\n  C++    {cpp[diff][:200] if diff < len(cpp) else '-'}\n"
                       f"  Python {py[diff][:200] if diff < len(py) else '-'}")
    assert not bad, f"{len(bad)} of {len(PROBLEMS)} differ:\n" + "\n".join(bad[:8])


def test_the_grid_reaches_every_route(cpp_lines):
    """The comparison means something: split + combine, the unsplit pack-GQA form (hd64, and
    GQA at every head dim: rules decode-pack-hd64 / decode-pack-gqa) and the plain kernel all
    occur, with several split counts, and run() is launches only."""
    chosen = [(p, b[0].split()) for p, b in zip(PROBLEMS, cpp_lines)]
    split = [(p, c) for p, c in chosen if c[3] == "1" and int(c[2]) > 1]
    packed = [(p, c) for p, c in chosen if c[3] == "1" and c[2] == "1"]
    plain = [(p, c) for p, c in chosen if c[3] == "0"]
    assert len({c[2] for _, c in split}) >= 4 and {p[5] for p, _ in split} == {64, 128, 256}
    # decode-pack-hd128: MHA with 1-16 query tokens at hd128 takes the form too.
    assert packed and all(p[5] == 64 or p[3] > p[4] or (p[5] == 128 and p[1] <= 16) for p, _ in packed)
    assert {p[5] for p, _ in packed if p[3] > p[4]} == {64, 128, 256}
    assert any(p[5] == 128 and p[3] == p[4] for p, _ in packed)
    # MHA decode that fills the SMs keeps the plain kernel at hd256, and at hd128 from 64 tokens.
    assert any(p[1] <= 64 and p[3] == p[4] and p[5] == 256 for p, _ in plain)
    assert any(p[1] == 64 and p[3] == p[4] and p[5] == 128 for p, _ in plain)
    assert any(p[1] == 512 for p, _ in plain) and any(p[1] <= 64 for p, _ in plain)
    for p, block in zip(PROBLEMS, cpp_lines):
        launches = [line for line in block if line.startswith("launch ")]
        assert block[-1] == f"run {len(launches)} 0", (p, block[-1])
        if block[0].split()[3] == "1" and int(block[0].split()[2]) > 1:
            assert len(launches) == 2 and launches[1].split()[1].startswith("attn-combine")
            assert [line for line in block if line.startswith("memset ")]    # the key counts, at prepare
