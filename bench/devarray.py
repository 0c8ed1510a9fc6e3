"""Torch-free device arrays for the cold-start child: cuMemAlloc plus the DLPack protocol.

Stdlib (ctypes), numpy and cuda.bindings only, so timing our first launch does not include
importing an array library. `__dlpack__` returns a legacy "dltensor" capsule (allowed for
any consumer); `__cuda_array_interface__` exists only for dtypes it can name (not bf16).
"""

from __future__ import annotations

import ctypes

# The DLPack structs are the runtime's (one definition); the producer side here is our own.
from cubinforge.runtime.arrays import _DLDataType, _DLDevice, _DLTensor  # noqa: F401

_KDL_CUDA = 2
_DTYPES = {  # name: (DLPack code, bits, numpy host dtype for the raw bits, CAI typestr)
    "bf16": (4, 16, "uint16", None),
    "fp16": (2, 16, "float16", "<f2"),
    "f32": (2, 32, "float32", "<f4"),
}


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _check(result, call):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise RuntimeError(f"{call} failed: {err!r}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def bf16_bits(x):
    """float32 numpy array -> uint16 bf16 bits, round to nearest even."""
    import numpy as np

    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    import numpy as np

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class DeviceArray:
    """A contiguous device allocation with a shape and dtype ('bf16', 'fp16', 'f32')."""

    def __init__(self, shape, dtype: str):
        from cuda.bindings import driver as cu

        self._cu = cu
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        code, bits, _, _ = _DTYPES[dtype]
        self.itemsize = bits // 8
        n = 1
        for s in self.shape:
            n *= s
        self.size = n
        self.nbytes = n * self.itemsize
        self.ptr = int(_check(cu.cuMemAlloc(max(self.nbytes, 1)), "cuMemAlloc"))
        strides, acc = [], 1
        for s in reversed(self.shape):
            strides.append(acc)
            acc *= s
        self.strides_elems = tuple(reversed(strides))
        self._keep = []  # ctypes objects a capsule points into

    # -- host transfers -------------------------------------------------------------
    def upload(self, host) -> "DeviceArray":
        import numpy as np

        h = np.ascontiguousarray(host)
        if h.nbytes != self.nbytes:
            raise ValueError(f"upload of {h.nbytes} B into {self.nbytes} B")
        _check(self._cu.cuMemcpyHtoD(self.ptr, h.ctypes.data, self.nbytes), "cuMemcpyHtoD")
        return self

    def download(self):
        import numpy as np

        h = np.empty(self.shape, dtype=_DTYPES[self.dtype][2])
        _check(self._cu.cuMemcpyDtoH(h.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return h

    def fill_bytes(self, byte: int) -> "DeviceArray":
        _check(self._cu.cuMemsetD8(self.ptr, byte, self.nbytes), "cuMemsetD8")
        return self

    # -- array protocols -------------------------------------------------------------
    @property
    def __cuda_array_interface__(self):
        typestr = _DTYPES[self.dtype][3]
        if typestr is None:
            raise AttributeError(f"__cuda_array_interface__ cannot describe {self.dtype}")
        return {"shape": self.shape, "typestr": typestr, "data": (self.ptr, False),
                "strides": None, "version": 3, "stream": None}

    def __dlpack_device__(self):
        from cuda.bindings import driver as cu

        dev = _check(cu.cuCtxGetDevice(), "cuCtxGetDevice")
        return (_KDL_CUDA, int(dev))

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        code, bits, _, _ = _DTYPES[self.dtype]
        nd = len(self.shape)
        shape = (ctypes.c_int64 * nd)(*self.shape)
        strides = (ctypes.c_int64 * nd)(*self.strides_elems)
        mt = _DLManagedTensor()
        mt.dl_tensor = _DLTensor(self.ptr, _DLDevice(_KDL_CUDA, self.__dlpack_device__()[1]),
                                 nd, _DLDataType(code, bits, 1), shape, strides, 0)
        mt.manager_ctx = None
        mt.deleter = _DELETER()  # NULL: the array owns the memory, nothing to free
        self._keep.append((mt, shape, strides))
        return _capsule_new(ctypes.addressof(mt), b"dltensor", None)

    def free(self):
        if self.ptr:
            self._cu.cuMemFree(self.ptr)
            self.ptr = 0
