"""DeviceArray construction and the DLPack / __cuda_array_interface__ round trips (CPU only:
capsules are built and parsed without touching device memory)."""

from __future__ import annotations

import ctypes
import gc
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr  # noqa: E402

from cubinforge.runtime import DeviceArray, InputError, as_device_array  # noqa: E402
from cubinforge.runtime import arrays as A  # noqa: E402


def live_exports() -> int:
    gc.collect()
    return len(A._exports)


def test_from_pointer_defaults_and_validation():
    a = DeviceArray.from_pointer(BASE, (2, 3, 4), dtype="fp16", device=0)
    assert a.strides == (12, 4, 1) and a.itemsize == 2 and a.span_bytes == 48
    with pytest.raises(InputError, match="negative strides"):
        DeviceArray.from_pointer(BASE, (4,), (-1,), "f32")
    with pytest.raises(InputError, match="dtype 'int8'"):
        DeviceArray.from_pointer(BASE, (4,), None, "int8")
    with pytest.raises(InputError, match="differ in rank"):
        DeviceArray.from_pointer(BASE, (4, 4), (1,), "f32")


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "f32", "e4m3"])
@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_round_trip(dtype, versioned):
    base = live_exports()
    src = arr((2, 5, 3, 64), dtype, strides=(5 * 3 * 96, 3 * 96, 96, 1), offset=256, device=3)
    cap = src.__dlpack__(max_version=(1, 0) if versioned else None)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    assert A._IsValid(id(cap), name)
    assert sys.getrefcount(cap) == 2          # no leaked reference from PyCapsule_New
    got = A.parse_dlpack_capsule(cap, producer=src)
    assert A._IsValid(id(cap), b"used_" + name)   # consumed, as the protocol requires
    assert (got.ptr, got.shape, got.strides, got.dtype, got.device) == \
           (src.ptr, src.shape, src.strides, src.dtype, 3)
    del cap
    assert live_exports() == base + 1         # the consumer still holds it: deleter not called yet
    del got
    assert live_exports() == base             # dropping the consumer called the deleter once


def test_unconsumed_capsule_frees_itself():
    base = live_exports()
    cap = arr((4, 64)).__dlpack__()
    assert live_exports() == base + 1
    del cap
    assert live_exports() == base


def test_exported_capsule_keeps_source_alive():
    src = arr((8, 64))
    owner = object()
    src._owner = owner
    cap = src.__dlpack__()
    ref = sys.getrefcount(owner)
    del src
    gc.collect()
    assert sys.getrefcount(owner) == ref      # the export keeps the array (and its owner)
    del cap


def test_read_only_flag_travels_in_versioned_capsules():
    src = arr((4, 64))
    src.readonly = True
    got = A.parse_dlpack_capsule(src.__dlpack__(max_version=(1, 1)))
    assert got.readonly
    got2 = A.parse_dlpack_capsule(src.__dlpack__())   # legacy capsules have no flags
    assert not got2.readonly


def _mutable_tensor(cap, versioned=False):
    name = b"dltensor_versioned" if versioned else b"dltensor"
    addr = A._GetPointer(id(cap), name)
    st = (A._DLManagedTensorVersioned if versioned else A._DLManagedTensor).from_address(addr)
    return st.dl_tensor


def test_byte_offset_and_null_strides():
    src = arr((3, 4, 64), "fp16", strides=(512, 128, 1))
    cap = src.__dlpack__()
    t = _mutable_tensor(cap)
    t.byte_offset = 32
    t.strides = None                          # NULL strides = compact row-major
    got = A.parse_dlpack_capsule(cap)
    assert got.ptr == src.ptr + 32 and got.strides == (256, 64, 1)


def test_dlpack_wrong_device_type_named():
    cap = arr((4, 64)).__dlpack__()
    _mutable_tensor(cap).device.device_type = 1
    with pytest.raises(InputError, match=r"q is on kDLCPU:0; cubinforge needs CUDA device memory"):
        A.parse_dlpack_capsule(cap, what="q")
    assert A._IsValid(id(cap), b"dltensor")   # refused capsules stay owned by their destructor


def test_dlpack_unsupported_dtype_and_override():
    cap = arr((4, 64), "fp16").__dlpack__()
    t = _mutable_tensor(cap)
    t.dtype.code = 1                          # uint16
    with pytest.raises(InputError, match=r"code 1, 16 bits"):
        A.parse_dlpack_capsule(cap)
    got = A.parse_dlpack_capsule(cap, dtype="bf16")   # explicit reinterpretation is allowed
    assert got.dtype == "bf16"
    cap2 = arr((4, 64), "f32").__dlpack__()
    with pytest.raises(InputError, match="needs 16-bit elements"):
        A.parse_dlpack_capsule(cap2, dtype="bf16")


def test_numpy_cpu_array_is_refused_by_device():
    np = pytest.importorskip("numpy")
    with pytest.raises(InputError, match=r"x is on kDLCPU:0; .* move it to the GPU"):
        as_device_array(np.zeros((4, 4), np.float32), what="x")
    cap = np.zeros(4, np.float32).__dlpack__()
    with pytest.raises(InputError, match="kDLCPU"):
        A.parse_dlpack_capsule(cap)


class Producer:
    """A DLPack producer in the style of torch/CuPy, recording the stream it was given."""

    def __init__(self, inner, legacy=False):
        self.inner, self.legacy, self.streams = inner, legacy, []

    def __dlpack_device__(self):
        return (2, self.inner.device)

    def __dlpack__(self, stream=None, max_version=None, **kw):
        if self.legacy and max_version is not None:
            raise TypeError("unexpected keyword max_version")
        self.streams.append(stream)
        return self.inner.__dlpack__(max_version=max_version)


def test_as_device_array_from_producer_passes_stream():
    p = Producer(arr((2, 64), "bf16", device=1))
    got = as_device_array(p, stream=0)
    assert got.dtype == "bf16" and got.device == 1 and p.streams == [1]   # 0 is sent as 1 (legacy)
    as_device_array(p, stream=0x5555)
    as_device_array(p)
    assert p.streams[1:] == [0x5555, None]
    legacy = Producer(arr((2, 64)), legacy=True)
    assert as_device_array(legacy).shape == (2, 64)


class CAI:
    def __init__(self, d):
        self.__cuda_array_interface__ = d


def test_cuda_array_interface_import():
    base = {"shape": (2, 3, 64), "data": (BASE, False), "version": 3}
    a = as_device_array(CAI(dict(base, typestr="<f2", strides=None)))
    assert (a.dtype, a.strides, a.device) == ("fp16", (192, 64, 1), None)
    a = as_device_array(CAI(dict(base, typestr="<f4", strides=(1024, 256, 4))))
    assert (a.dtype, a.strides) == ("f32", (256, 64, 1))
    with pytest.raises(InputError, match=r"typestr '\|u1'.*pass dtype="):
        as_device_array(CAI(dict(base, typestr="|u1")))
    assert as_device_array(CAI(dict(base, typestr="|u1")), dtype="e4m3").dtype == "e4m3"
    assert as_device_array(CAI(dict(base, typestr="<V2", descr=[("bf16", "<V2")]))).dtype == "bf16"
    assert as_device_array(CAI(dict(base, typestr="<f2")), dtype="bf16").dtype == "bf16"
    with pytest.raises(InputError, match="override needs 2-byte"):
        as_device_array(CAI(dict(base, typestr="<f4")), dtype="bf16")
    with pytest.raises(InputError, match="not multiples"):
        as_device_array(CAI(dict(base, typestr="<f4", strides=(1024, 256, 2))))
    ro = as_device_array(CAI(dict(base, typestr="<f2", data=(BASE, True))))
    assert ro.readonly


def test_cuda_array_interface_export_and_reimport():
    for dtype, typestr in (("fp16", "<f2"), ("f32", "<f4"), ("bf16", "<V2"), ("e4m3", "|V1")):
        a = arr((2, 3, 64), dtype, strides=(256, 64, 1))
        cai = a.__cuda_array_interface__
        assert cai["version"] == 3 and cai["typestr"] == typestr and cai["stream"] is None
        assert cai["data"] == (a.ptr, False)
        assert cai["strides"] == tuple(s * a.itemsize for s in (256, 64, 1))
        back = as_device_array(CAI(cai))
        assert (back.dtype, back.shape, back.strides, back.ptr) == (dtype, a.shape, a.strides, a.ptr)


def test_not_an_array():
    with pytest.raises(InputError, match="neither __dlpack__ nor __cuda_array_interface__"):
        as_device_array([1, 2, 3], what="q")


def test_dlpack_export_options():
    a = arr((4,), device=0)
    with pytest.raises(BufferError):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(1, 0))
    assert a.__dlpack_device__() == (2, 0)
    with pytest.raises(BufferError):
        DeviceArray.from_pointer(BASE, (4,), dtype="f32").__dlpack_device__()
