"""torch tensors read by attribute (runtime/producers.py), with a stand-in torch module and
tensor class where torch is not installed: the same DeviceArray DLPack would give, the
stream ordering DLPack's stream= asks for, and the protocol path for what it does not take."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")
if importlib.util.find_spec("torch") is not None:
    pytest.skip("torch is installed: tests/gpu covers real tensors", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, manifest, registry_source  # noqa: E402

from cubinforge.bench.host_overhead import FakeTorchTensor, fake_torch_module  # noqa: E402
from cubinforge.runtime import InputError, as_device_array, flash_attn_func, plan_attention  # noqa: E402
from cubinforge.runtime.arrays import parse_dlpack_capsule  # noqa: E402

CUBIN = b"\x7fELF not really"
GB = 1 << 30


@pytest.fixture
def torch_mod():
    with fake_torch_module() as t:
        yield t


@pytest.fixture
def source(tmp_path):
    with registry_source(tmp_path, [manifest(dtype="bf16", hd=128, cubin=CUBIN)], [CUBIN]) as src:
        yield src


def tensors(**kw):
    return {"q": FakeTorchTensor(BASE, (2, 300, 8, 128), "bf16", **kw),
            "k": FakeTorchTensor(BASE + GB, (2, 500, 2, 128), "bf16", **kw),
            "v": FakeTorchTensor(BASE + 2 * GB, (2, 500, 2, 128), "bf16", **kw),
            "o": FakeTorchTensor(BASE + 3 * GB, (2, 300, 8, 128), "bf16", **kw),
            "lse": FakeTorchTensor(BASE + 4 * GB, (2, 8, 300), "f32", **kw)}


def test_same_array_as_the_dlpack_path_without_exporting(mock, torch_mod):
    t = FakeTorchTensor(BASE + 64, (2, 3, 4, 128), "bf16", device=0, strides=(4096, 1024, 256, 1))
    a = as_device_array(t, stream=0)
    via = parse_dlpack_capsule(t.__dlpack__(), producer=t)
    assert t.exports == 1                                   # only the explicit one above
    assert (a.ptr, a.shape, a.strides, a.dtype, a.device, a.readonly) == \
           (via.ptr, via.shape, via.strides, via.dtype, via.device, via.readonly)
    assert a._owner is t                                     # the tensor keeps its memory alive


def test_stream_ordering_as_dlpack_asks(mock, torch_mod):
    t = FakeTorchTensor(BASE, (1, 4, 1, 128), "bf16")
    as_device_array(t, stream=0)                             # torch on the legacy stream too: nothing
    torch_mod.current[0] = 0x77
    as_device_array(t, stream=0x77)                          # the consumer is torch's current stream
    assert mock.counts["cuStreamWaitEvent"] == 0
    as_device_array(t, stream=0x99)                          # another stream waits for torch's
    assert mock.counts["cuEventRecord"] == 1 and mock.counts["cuStreamWaitEvent"] == 1
    as_device_array(t, stream=-1)                            # -1: the caller orders it
    assert mock.counts["cuStreamWaitEvent"] == 1 and t.exports == 0


def test_what_it_does_not_take_goes_through_dlpack(mock, torch_mod):
    g = FakeTorchTensor(BASE, (1, 4, 1, 128), "bf16", requires_grad=True)
    with pytest.raises(RuntimeError, match="require gradient"):      # torch's own error
        as_device_array(g)
    assert g.exports == 1
    cpu = FakeTorchTensor(BASE, (1, 4, 1, 128), "bf16", device=-1)
    with pytest.raises(InputError, match="kDLCPU"):
        as_device_array(cpu)

    class Sub(FakeTorchTensor):                              # a subclass is not torch.Tensor
        pass
    s = Sub(BASE, (1, 4, 1, 128), "bf16")
    as_device_array(s)
    assert s.exports == 1


def test_dtype_override_by_width(mock, torch_mod):
    t = FakeTorchTensor(BASE, (1, 4, 1, 128), "fp16")
    assert as_device_array(t, dtype="bf16").dtype == "bf16" and t.exports == 0
    with pytest.raises(InputError, match="override needs 32-bit"):
        as_device_array(t, dtype="f32")                      # the protocol path says why


def test_flash_attn_func_with_torch_tensors_exports_nothing(mock, torch_mod, source):
    t = tensors()
    for _ in range(3):
        flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    assert all(x.exports == 0 for x in t.values())
    mock.counts.clear()
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    assert dict(mock.counts) == {"cuCtxGetCurrent": 1, "cuLaunchKernelEx": 1}


def test_plan_run_with_torch_tensors(mock, torch_mod, source):
    t = tensors()
    plan = plan_attention(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    q2 = FakeTorchTensor(BASE + 9 * GB, (2, 300, 8, 128), "bf16")
    plan.run(q2)
    assert int.from_bytes(bytes(plan._plan.buffers[2])[:8], "little") == BASE + 9 * GB


def test_one_call_orders_its_stream_once(mock, torch_mod, source):
    t = tensors()
    torch_mod.current[0] = 0x77
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    assert torch_mod.asked == 1                               # one question for five tensors
    assert mock.counts["cuStreamWaitEvent"] == 1
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    assert torch_mod.asked == 2 and mock.counts["cuStreamWaitEvent"] == 2   # and again next call


def test_repeated_torch_call_takes_the_field_path(mock, torch_mod, source, monkeypatch):
    """A repeated plain call with torch tensors launches the cached entry straight from the
    tensors' fields (attention._torch_hit, no DeviceArray made); new buffers of the layout are
    rewritten there; the stream is still ordered once per call; anything it cannot read falls
    back to the full path, whose checks still speak."""
    from cubinforge.runtime import arrays, attention, last_launch
    t = tensors()
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    made = []
    real = arrays.DeviceArray._trusted.__func__
    monkeypatch.setattr(arrays.DeviceArray, "_trusted", classmethod(lambda cls, *a: made.append(a) or real(cls, *a)))
    mock.counts.clear()
    torch_mod.current[0] = 0x77
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    assert not made and mock.counts["cuLaunchKernelEx"] == 1 and mock.counts["cuStreamWaitEvent"] == 1
    assert last_launch().stream == 0x99
    # Another q of the layout: rewritten (its descriptor), launched, and remembered.
    q2 = FakeTorchTensor(BASE + 9 * GB, (2, 300, 8, 128), "bf16")
    flash_attn_func(q2, t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    (ent,) = attention._calls.values()
    assert ent.ptrs[0] == BASE + 9 * GB and mock.counts["cuTensorMapReplaceAddress"] == 1
    made.clear()
    flash_attn_func(q2, t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    assert not made and mock.counts["cuLaunchKernelEx"] == 3
    # A tensor that requires grad is not read by attribute: the full path says what is wrong.
    g = FakeTorchTensor(BASE, (2, 300, 8, 128), "bf16", requires_grad=True)
    with pytest.raises(RuntimeError, match="gradient"):     # torch's own DLPack refusal
        flash_attn_func(g, t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    # A misaligned new buffer is refused by the full path, not launched.
    bad = FakeTorchTensor(BASE + 9 * GB + 2, (2, 300, 8, 128), "bf16")
    n = mock.counts["cuLaunchKernelEx"]
    try:
        flash_attn_func(bad, t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x99)
    except InputError:
        pass
    assert last_launch().copies == ("q",) or mock.counts["cuLaunchKernelEx"] == n
