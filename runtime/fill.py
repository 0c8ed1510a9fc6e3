"""Fill a strided device array with one value using driver memsets (no kernel of ours).

Used where attention needs no kernel: seqlen_k = 0 gives O = 0 and LSE = -inf. Only the
array's own elements are written, never the padding between its rows (which may belong to
another tensor): dimensions that nest contiguously are merged, the innermost two levels go
to one cuMemsetD2D*Async, and any outer levels loop over it.
"""

from __future__ import annotations

import itertools

from . import driver
from .arrays import DeviceArray
from .errors import InputError

# element bytes -> (1-D memset, 2-D memset)
_MEMSETS = {1: ("cuMemsetD8Async", "cuMemsetD2D8Async"), 2: ("cuMemsetD16Async", "cuMemsetD2D16Async"),
            4: ("cuMemsetD32Async", "cuMemsetD2D32Async")}


def levels(a: DeviceArray) -> list[tuple[int, int]]:
    """(extent, stride in elements) per level, innermost first, with size-1 dimensions dropped
    and contiguously nested ones merged; the innermost level has stride 1."""
    dims = [(n, s) for n, s in zip(a.shape, a.strides) if n != 1]
    if not dims:
        return [(1, 1)]
    out = []
    for n, s in reversed(dims):
        if not out:
            if s != 1:
                raise InputError(f"cannot fill an array whose innermost dimension has stride {s}")
            out.append((n, 1))
        elif s == out[-1][0] * out[-1][1]:
            out[-1] = (out[-1][0] * n, out[-1][1])
        else:
            out.append((n, s))
    return out


def fill(a: DeviceArray, bits: int, stream: int) -> int:
    """Set every element of ``a`` to the bit pattern ``bits`` (an int of the element's width),
    stream-ordered on ``stream``. Returns the number of memset calls made (0 for no elements)."""
    if a.size == 0:
        return 0
    one, two = _MEMSETS[a.itemsize]
    d = driver.drv()
    lv = levels(a)
    s = d.CUstream(stream)
    calls = 0
    with driver.device_context(a.device if a.device is not None else driver.pointer_device(a.ptr)):
        if len(lv) == 1:
            driver.call(one, d.CUdeviceptr(a.ptr), bits, lv[0][0], s)
            return 1
        (width, _), (height, pitch) = lv[0], lv[1]
        outer = lv[2:]
        for idx in itertools.product(*(range(n) for n, _ in outer)):
            off = sum(i * st for i, (_, st) in zip(idx, outer))
            driver.call(two, d.CUdeviceptr(a.ptr + off * a.itemsize), pitch * a.itemsize, bits, width, height, s)
            calls += 1
    return calls


NEG_INF_F32 = 0xFF800000
ZERO = 0
