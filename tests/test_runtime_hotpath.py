"""The launch hot path under a mocked ``cuda.bindings.driver`` (bench/host_overhead.py's
fakes): a repeated identical call launches its checked plan at once, with one driver call
besides the launch; new pointers of the same layout are checked and rewritten in place;
anything else new (shape, stride, device, scalar, causal) is checked and encoded again;
wrong inputs are still refused after a cached call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, fa_arrays, manifest, registry_source  # noqa: E402

from cubinforge.bench.host_overhead import (FakeCAIArray, FakeDLPackArray,  # noqa: E402
                                            main as bench_main)
from cubinforge.runtime import (CudaError, DeviceArray, InputError, Kernel, LocalSource, launch_count,  # noqa: E402
                                flash_attn_func, last_launch, select_attention_variant)

CUBIN = b"\x7fELF not really"
GB = 1 << 30


@pytest.fixture
def source(tmp_path):
    ms = [manifest(dtype=dt, hd=hd, causal=c, cubin=CUBIN) for dt in ("bf16", "fp16") for hd in (64, 128)
          for c in (False, True)]
    with registry_source(tmp_path, ms, [CUBIN]) as src:
        yield src


def call(t, source, **kw):
    return flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, **kw)


def as_kind(t, kind):
    """The same buffers as DeviceArrays, CAI objects or DLPack producers."""
    if kind == "prewrapped":
        return t
    cls = FakeCAIArray if kind == "cai" else FakeDLPackArray
    return {n: cls(a.ptr, a.shape, a.dtype) for n, a in t.items()}


@pytest.mark.parametrize("kind", ["prewrapped", "cai", "dlpack"])
def test_repeated_call_takes_the_cached_path(mock, source, kind):
    t = as_kind(fa_arrays(), kind)
    call(t, source, causal=True, stream=0x77)
    first = dict(mock.counts)
    assert first["cuTensorMapEncodeTiled"] == 1 and first["cuModuleLoadData"] == 1
    assert first["cuFuncSetAttribute"] == 1 and first["cuLaunchKernelEx"] == 1
    cfg = mock.last_launch[0]
    mock.counts.clear()
    for _ in range(5):
        call(t, source, causal=True, stream=0x77)
    # Per call: find the current context, launch; CAI arrays are located again (no device).
    want = {"cuCtxGetCurrent": 5, "cuLaunchKernelEx": 5}
    if kind == "cai":
        want["cuPointerGetAttribute"] = 25
    assert dict(mock.counts) == want
    assert mock.last_launch[0] is cfg                       # the launch config is reused
    rec = last_launch()
    assert rec.stream == 0x77 and rec.grid == (3, 8, 2) and rec.variant.endswith("-causal")


def test_stream_changes_only_the_launch_config(mock, source):
    t = fa_arrays()
    call(t, source, stream=0x10)
    cfg10, params10 = mock.last_launch[0], mock.last_launch[2]
    call(t, source, stream=0x20)
    assert mock.counts["cuTensorMapEncodeTiled"] == 1        # same parameters...
    assert mock.last_launch[2] == params10
    assert mock.last_launch[0] is not cfg10 and int(mock.last_launch[0].hStream) == 0x20   # ...new config
    call(t, source, stream=0x10)
    assert mock.last_launch[0] is cfg10 and last_launch().stream == 0x10


@pytest.mark.parametrize("name,base", [("q", BASE + 16 * GB), ("o", BASE + 3 * GB + 256),
                                       ("lse", BASE + 4 * GB + 64)])
def test_new_pointers_are_rewritten_not_encoded(mock, source, name, base):
    from cubinforge.runtime import attention
    t = fa_arrays()
    call(t, source)
    moved = dict(t, **{name: arr(t[name].shape, t[name].dtype, base=base)})
    call(moved, source)
    assert mock.counts["cuTensorMapEncodeTiled"] == 1 and mock.counts["cuLaunchKernelEx"] == 2
    # The fixture maps q with TMA (its descriptor's fake bytes hold the address) and holds
    # lse's pointer in a struct; o is in no parameter.
    assert mock.counts["cuTensorMapReplaceAddress"] == (1 if name == "q" else 0)
    (ent,) = attention._calls.values()
    raw = b"".join(bytes(b) for b in ent.plan.buffers)
    fresh = Kernel.from_manifest(select_attention_variant("bf16", 128, False, arch="sm_90a", source=source),
                                 source).build_plan(moved, {}, 0)
    assert raw == b"".join(bytes(b) for b in fresh.buffers)
    call(t, source)                                            # and back
    assert int.from_bytes(bytes(ent.plan.buffers[2])[:8], "little") == t["q"].ptr
    assert mock.counts["cuTensorMapEncodeTiled"] == 2            # (the fresh plan above)


def test_misaligned_pointer_after_a_cached_call_is_refused(mock, source):
    t = fa_arrays()
    call(t, source)
    with pytest.raises(InputError, match=r"lse's base pointer 0x[0-9a-f]+ is not 4-byte aligned"):
        call(dict(t, lse=arr(t["lse"].shape, "f32", base=BASE + 4 * GB + 2)), source)
    assert mock.counts["cuLaunchKernelEx"] == 1


@pytest.mark.parametrize("change", [
    lambda t: dict(t, k=arr((2, 400, 2, 128), base=BASE + GB),                        # shape
                   v=arr((2, 400, 2, 128), base=BASE + 2 * GB)),
    lambda t: dict(t, q=arr(t["q"].shape, strides=(300 * 8 * 256, 8 * 256, 256, 1))),  # strides
])
def test_new_arrays_are_checked_and_encoded_again(mock, source, change):
    t = fa_arrays()
    call(t, source)
    call(change(t), source)
    assert mock.counts["cuTensorMapEncodeTiled"] == 2 and mock.counts["cuLaunchKernelEx"] == 2
    call(t, source)                                            # the first is still cached
    assert mock.counts["cuTensorMapEncodeTiled"] == 2


def test_new_scalars_and_causal_are_new_plans(mock, source):
    t = fa_arrays()
    call(t, source)
    call(t, source, softmax_scale=0.25)
    call(t, source, softmax_scale=0.25)
    assert mock.counts["cuTensorMapEncodeTiled"] == 2
    call(t, source, softmax_scale=0.25, causal=True)            # another variant
    assert mock.counts["cuTensorMapEncodeTiled"] == 3 and last_launch().variant.endswith("-causal")
    assert mock.counts["cuModuleLoadData"] == 1                  # (the fixture variants share a cubin)


def test_bad_inputs_after_a_cached_call_are_still_refused(mock, source):
    t = fa_arrays()
    call(t, source)
    with pytest.raises(InputError, match=r"heads_q \(8\) must be a multiple of heads_kv \(3\)"):
        call(dict(t, k=arr((2, 500, 3, 128), base=BASE + GB), v=arr((2, 500, 3, 128), base=BASE + 2 * GB)),
             source)
    with pytest.raises(InputError, match="not 16-byte aligned"):
        call(dict(t, o=arr(t["o"].shape, offset=8, base=BASE + 3 * GB)), source)
    ro = DeviceArray(t["o"].ptr, t["o"].shape, None, "bf16", 0, readonly=True)   # same buffer, read-only
    with pytest.raises(InputError, match="o is read-only"):
        call(dict(t, o=ro), source)
    with pytest.raises(InputError, match="scalar softmax_scale must be a finite number"):
        call(t, source, softmax_scale=float("nan"))
    assert mock.counts["cuLaunchKernelEx"] == 1


def test_cai_arrays_are_located_on_every_call(mock, source):
    t = as_kind(fa_arrays(), "cai")
    call(t, source)
    mock.pointer_devices[BASE + 2 * GB] = 1                   # v's address now says device 1
    with pytest.raises(InputError, match=r"different devices \(q on device 0, v on device 1\)"):
        call(t, source)
    mock.pointer_device = 1                                   # all on device 1: a new plan there
    mock.pointer_devices.clear()
    call(t, source)
    assert last_launch().device == 1 and mock.counts["cuTensorMapEncodeTiled"] == 2


def test_dlpack_device_is_part_of_the_key(mock, source):
    t = as_kind(fa_arrays(), "dlpack")
    call(t, source)
    t["v"] = FakeDLPackArray(BASE + 2 * GB, (2, 500, 2, 128), "bf16", device=1)
    with pytest.raises(InputError, match="different devices"):
        call(t, source)


def test_nothing_allocates_or_synchronises_with_outputs_given(mock, source):
    for kind in ("prewrapped", "cai", "dlpack"):
        t = as_kind(fa_arrays(), kind)
        call(t, source, stream=0x55)
        call(t, source, stream=0x55)
    for name in ("cuMemAllocAsync", "cuEventCreate", "cuStreamWaitEvent", "cuCtxSynchronize"):
        assert mock.counts[name] == 0, name


def test_kernel_launch_scalars_are_type_exact(mock, source):
    k = Kernel.from_manifest(select_attention_variant("bf16", 128, False, arch="sm_90a", source=source), source)
    t = fa_arrays()
    k.launch(t, {"softmax_scale": 1})
    with pytest.raises(InputError, match="must be a finite number, got True"):
        k.launch(t, {"softmax_scale": True})                  # equal to 1, but not a number here
    k.launch(t, {"softmax_scale": 1})
    assert mock.counts["cuTensorMapEncodeTiled"] == 1 and mock.counts["cuLaunchKernelEx"] == 2


def test_failed_launch_says_what_and_forgets_the_context(mock, source):
    t = fa_arrays()
    call(t, source)
    mock.launch_error = mock.d.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(CudaError, match=r"cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE.*"
                                        r"kernel_fa3_fwd grid=\(3, 8, 2\) block=\(384, 1, 1\)"):
        call(t, source, stream=0x9)
    mock.launch_error = None
    mock.counts.clear()
    call(t, source)
    assert mock.counts["cuCtxGetDevice"] == 1 and mock.counts["cuLaunchKernelEx"] == 1


def test_bench_runs_mocked(capsys):
    home = Path(__file__).resolve().parents[1] / ".cubinforge"
    try:
        select_attention_variant("fp16", 128, True, arch="sm_90a", source=LocalSource(home))
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"the built registry (.cubinforge) has no fp16 hd128 causal variant: {e}")
    assert bench_main(["--mock", "--iters", "20", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    for kind in ("prewrapped", "cai", "dlpack", "torch", "torch-swap", "plan", "plan-run", "plan-swap",
                 "miss", "parse", "producer"):
        assert f"  {kind} " in out, kind
    assert "cudnn        skipped: GPU only" in out


def test_allocating_calls_reuse_the_checked_layout(mock, source):
    from cubinforge.runtime import attention
    t = fa_arrays()
    o1, l1 = flash_attn_func(t["q"], t["k"], t["v"], source=source)
    o2, l2 = flash_attn_func(t["q"], t["k"], t["v"], source=source)
    assert mock.counts["cuTensorMapEncodeTiled"] == 1 and mock.counts["cuMemAllocAsync"] == 4
    assert o2.ptr != o1.ptr and (o2.shape, o2.strides) == (o1.shape, o1.strides) and l2.shape == l1.shape
    (ent,) = attention._calls.values()
    assert int.from_bytes(bytes(ent.plan.buffers[1])[:8], "little") == l2.ptr     # lse's pointer field
    flash_attn_func(t["q"], t["k"], t["v"], out=o2, source=source)               # out given, lse not: a new key
    assert len(attention._calls) == 2 and mock.counts["cuLaunchKernelEx"] == 3


def test_the_call_cache_keeps_no_caller_buffer_alive(mock, source):
    import gc
    import weakref

    from cubinforge.runtime import attention
    t = as_kind(fa_arrays(), "dlpack")
    refs = [weakref.ref(x) for x in t.values()]
    call(t, source)
    call(t, source)
    assert len(attention._calls) == 1
    del t
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_failing_launch_on_the_one_call_path_says_what_failed(mock, source):
    t = fa_arrays()
    for _ in range(3):                                       # the third takes the one-call path
        call(t, source, stream=0x9)
    mock.counts.clear()
    call(t, source, stream=0x9)
    assert dict(mock.counts) == {"cuCtxGetCurrent": 1, "cuLaunchKernelEx": 1}
    mock.launch_error = mock.d.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    n = launch_count()
    with pytest.raises(CudaError, match=r"cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.*grid=\(3, 8, 2\)"):
        call(t, source, stream=0x9)
    assert launch_count() == n
    mock.launch_error = None
    call(t, source, stream=0x9)
    assert launch_count() == n + 1
