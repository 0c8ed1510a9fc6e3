"""Empty and degenerate inputs (issue 12) under the mocked driver: none reaches a kernel.

batch, seqlen_q or heads_q = 0 give empty outputs and touch no memory; seqlen_k = 0 gives
O = 0 and LSE = -inf, written by driver memsets over exactly the outputs' elements."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, manifest, registry_source  # noqa: E402

from cubinforge.bench.host_overhead import FakeDLPackArray  # noqa: E402
from cubinforge.runtime import (InputError, VariantNotFound, flash_attn_func,  # noqa: E402
                                last_launch, launch_count, plan_attention)
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.fill import levels  # noqa: E402

CUBIN = b"\x7fELF not really"
GB = 1 << 30
ZERO16, NEG_INF32 = 0, 0xFF800000


@pytest.fixture
def source(tmp_path):
    ms = [manifest(dtype=dt, hd=128, causal=c, cubin=CUBIN) for dt in ("bf16", "fp16") for c in (False, True)]
    with registry_source(tmp_path, ms, [CUBIN]) as src:
        yield src


def arrays(b=2, sq=300, sk=500, hq=8, hkv=2, d=128, dtype="bf16"):
    return {"q": arr((b, sq, hq, d), dtype), "k": arr((b, sk, hkv, d), dtype, base=BASE + GB),
            "v": arr((b, sk, hkv, d), dtype, base=BASE + 2 * GB),
            "o": arr((b, sq, hq, d), dtype, base=BASE + 3 * GB), "lse": arr((b, hq, sq), "f32", base=BASE + 4 * GB)}


@pytest.mark.parametrize("dims", [dict(b=0), dict(sq=0), dict(hq=0, hkv=0), dict(b=0, sk=0), dict(sq=0, sk=0)])
@pytest.mark.parametrize("given", [True, False])
def test_empty_outputs_launch_nothing(mock, source, dims, given):
    t = arrays(**dims)
    before = launch_count()
    kw = dict(out=t["o"], lse=t["lse"]) if given else {}
    out, lse = flash_attn_func(t["q"], t["k"], t["v"], causal=True, source=source, **kw)
    assert launch_count() == before and mock.counts["cuLaunchKernelEx"] == 0
    assert mock.memsets == [] and mock.counts["cuMemAllocAsync"] == 0        # nothing to write, no bytes
    assert out.shape == t["q"].shape and lse.shape == t["lse"].shape and lse.dtype == "f32"
    if given:
        assert out is t["o"] and lse is t["lse"]
    rec = last_launch()
    assert rec.launched is False and rec.variant is None and "no kernel" in rec.note


@pytest.mark.parametrize("given", [True, False])
def test_seqlen_k_zero_fills_o_with_zero_and_lse_with_minus_inf(mock, source, given):
    t = arrays(sk=0)
    before = launch_count()
    kw = dict(out=t["o"], lse=t["lse"]) if given else {}
    out, lse = flash_attn_func(t["q"], t["k"], t["v"], source=source, stream=0x42, **kw)
    assert launch_count() == before and mock.counts["cuLaunchKernelEx"] == 0
    o_ptr, l_ptr = (t["o"].ptr, t["lse"].ptr) if given else (out.ptr, lse.ptr)
    # one memset each, over exactly their elements: (ptr, value, count)
    assert mock.memsets == [(o_ptr, ZERO16, 2 * 300 * 8 * 128), (l_ptr, NEG_INF32, 2 * 8 * 300)]
    assert mock.counts["cuMemsetD16Async"] == 1 and mock.counts["cuMemsetD32Async"] == 1
    assert last_launch().note.startswith("seqlen_k = 0") and last_launch().stream == 0x42


def test_seqlen_k_zero_never_writes_padding(mock, source):
    # out is a slice of a (2, 300, 8, 256) buffer: rows of 128 elements every 256.
    t = arrays(sk=0)
    o = arr((2, 300, 8, 128), strides=(300 * 8 * 256, 8 * 256, 256, 1), base=BASE + 3 * GB)
    flash_attn_func(t["q"], t["k"], t["v"], out=o, lse=t["lse"], source=source)
    assert mock.memsets[0] == (o.ptr, ZERO16, 256 * 2, 128, 2 * 300 * 8)      # D2D: pitch B, width, height
    assert mock.counts["cuMemsetD2D16Async"] == 1


def test_fill_levels_merge_only_nested_dimensions():
    a = DeviceArray(BASE, (2, 3, 4, 8), (3 * 4 * 16, 4 * 16, 16, 1), "bf16")      # padded rows
    assert levels(a) == [(8, 1), (24, 16)]
    b = DeviceArray(BASE, (2, 3, 4, 8), (1000, 4 * 16, 16, 1), "bf16")           # batch stride apart
    assert levels(b) == [(8, 1), (12, 16), (2, 1000)]
    c = DeviceArray(BASE, (1, 5, 1, 8), None, "bf16")
    assert levels(c) == [(40, 1)]


def test_seqlen_k_zero_with_odd_batch_stride(mock, source):
    t = arrays(b=3, sk=0)
    bs = 300 * 8 * 128 + 64                     # batches apart, each one dense: one 2-D memset
    o = arr((3, 300, 8, 128), strides=(bs, 8 * 128, 128, 1), base=BASE + 3 * GB)
    flash_attn_func(t["q"], t["k"], t["v"], out=o, lse=t["lse"], source=source)
    assert mock.memsets[0] == (o.ptr, ZERO16, bs * 2, 300 * 8 * 128, 3)
    mock.memsets.clear()
    bs = 300 * 8 * 256 + 64                     # and padded rows in each: a loop over batches
    o = arr((3, 300, 8, 128), strides=(bs, 8 * 256, 256, 1), base=BASE + 3 * GB)
    flash_attn_func(t["q"], t["k"], t["v"], out=o, lse=t["lse"], source=source)
    d2d = [m for m in mock.memsets if m[1] == ZERO16]
    assert d2d == [(o.ptr + i * bs * 2, ZERO16, 512, 128, 300 * 8) for i in range(3)]


def test_empty_inputs_are_still_checked(mock, source):
    t = arrays(sk=0)
    with pytest.raises(InputError, match=r"k and v must agree in \(batch, seqlen_k, heads_kv\)"):
        flash_attn_func(t["q"], t["k"], arr((2, 1, 2, 128)), source=source)
    with pytest.raises(InputError, match=r"heads_q \(8\) must be a multiple of heads_kv \(0\)"):
        flash_attn_func(t["q"], arr((2, 0, 0, 128)), arr((2, 0, 0, 128)), source=source)
    with pytest.raises(VariantNotFound):                       # no hd64 variant in this registry
        flash_attn_func(arr((2, 3, 8, 64)), arr((2, 0, 2, 64)), arr((2, 0, 2, 64)), source=source)
    ro = DeviceArray(t["o"].ptr, t["o"].shape, None, "bf16", 0, readonly=True)
    with pytest.raises(InputError, match="o is read-only"):
        flash_attn_func(t["q"], t["k"], t["v"], out=ro, lse=t["lse"], source=source)
    assert mock.memsets == [] and mock.counts["cuLaunchKernelEx"] == 0


def test_empty_arrays_with_null_pointers_and_no_device(mock, source):
    # CAI-style empty arrays: null pointers, no device: the current context's device is used.
    q = DeviceArray(0, (0, 16, 8, 128), None, "bf16")
    k = DeviceArray(0, (0, 16, 2, 128), None, "bf16")
    out, lse = flash_attn_func(q, k, k, source=source)
    assert out.shape == (0, 16, 8, 128) and out.device == 0 and lse.shape == (0, 8, 16)


def test_dlpack_empty_tensor(mock, source):
    q = FakeDLPackArray(0, (2, 0, 8, 128), "bf16")
    k = FakeDLPackArray(BASE + GB, (2, 500, 2, 128), "bf16")
    out, lse = flash_attn_func(q, k, k, source=source)
    assert out.shape == (2, 0, 8, 128) and mock.counts["cuLaunchKernelEx"] == 0


def test_empty_plan_replays_its_fills(mock, source):
    t = arrays(sk=0)
    before = launch_count()
    plan = plan_attention(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    assert plan.variant is None and mock.memsets == []          # planning writes nothing
    for _ in range(3):
        out, lse = plan.launch()
    assert out is t["o"] and len(mock.memsets) == 6 and launch_count() == before
    o2 = arr(t["o"].shape, base=BASE + 5 * GB)
    plan.run(out=o2)
    assert mock.memsets[-2][0] == o2.ptr and mock.memsets[-1][0] == t["lse"].ptr
