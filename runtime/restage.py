"""Copies of inputs a kernel cannot read where they are (docs/runtime-host-path.md).

TMA needs a 16-byte-aligned base and 16-byte-multiple strides. An input whose head dim is
contiguous but whose base or another stride is not aligned is copied, stream-ordered on the
call's stream, into a compact buffer of its own (cuMemAllocAsync): one cuMemcpyDtoDAsync when
its elements are dense, else one cuMemcpy2DAsync per outer block (fill.levels merges the
dimensions that nest). The copy is named in ``last_launch().copies``.
"""

from __future__ import annotations

import itertools

from . import driver
from .arrays import DeviceArray, OwnedDeviceArray
from .fill import levels


def needs_copy(a: DeviceArray, align: int = 16) -> bool:
    """Whether ``a`` (head dim contiguous) has a base or a stride TMA cannot take."""
    if a.size == 0:
        return False
    return bool(a.ptr % align) or any((s * a.itemsize) % align for s, n in zip(a.strides[:-1], a.shape) if n != 1)


def compact_copy(a: DeviceArray, device: int, stream, handle: int) -> OwnedDeviceArray:
    """A compact copy of ``a`` in a new stream-ordered allocation (copied on ``handle``)."""
    dst = OwnedDeviceArray.empty(a.shape, a.dtype, device, stream)
    copy_into(a, dst, handle)
    return dst


def copy_into(src: DeviceArray, dst: DeviceArray, handle: int) -> int:
    """Copy ``src``'s elements into the compact ``dst`` on stream ``handle``; the number of
    driver copies made."""
    if src.size == 0:
        return 0
    d = driver.drv()
    es = src.itemsize
    lv = levels(src)
    s = d.CUstream(handle)
    with driver.device_context(dst.device):
        if len(lv) == 1:
            driver.call("cuMemcpyDtoDAsync", d.CUdeviceptr(dst.ptr), d.CUdeviceptr(src.ptr), src.size * es, s)
            return 1
        (width, _), (height, pitch) = lv[0], lv[1]
        outer = lv[2:]
        block = width * height
        calls = 0
        for idx in itertools.product(*(range(n) for n, _ in outer)):
            src_off = sum(i * st for i, (_, st) in zip(idx, outer))
            flat, mul = 0, 1
            for i, (n, _) in zip(idx, outer):
                flat += i * mul
                mul *= n
            cp = d.CUDA_MEMCPY2D()
            cp.srcMemoryType = cp.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_DEVICE
            cp.srcDevice = d.CUdeviceptr(src.ptr + src_off * es)
            cp.srcPitch = pitch * es
            cp.dstDevice = d.CUdeviceptr(dst.ptr + flat * block * es)
            cp.dstPitch = width * es
            cp.WidthInBytes = width * es
            cp.Height = height
            driver.call("cuMemcpy2DAsync", cp, s, detail=f"{width * es} B rows, pitch {pitch * es} B")
            calls += 1
        return calls
