"""Device arrays: what the runtime needs to know of a caller's tensor, and nothing more.

``DeviceArray`` is a view (pointer, shape, strides in elements, dtype, device) that keeps
its producer alive. It is built from ``__dlpack__`` (preferred: it carries the device and
bf16/fp8 dtypes), from ``__cuda_array_interface__``, or from a raw pointer. Every
DeviceArray exports both protocols again, so results flow back into torch, CuPy or JAX.
``OwnedDeviceArray`` additionally owns a stream-ordered allocation.

Only the stdlib is used here; the driver is touched only to allocate and to order streams.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from .errors import InputError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "e4m3": 1, "f32": 4, "i32": 4}

# DLPack constants (dlpack.h 1.x).
KDL_CUDA = 2
_DL_DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                    8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev",
                    13: "kDLCUDAManaged", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon",
                    17: "kDLMAIA", 18: "kDLTrn"}
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_FLOAT8_E4M3FN = 0, 1, 2, 4, 10
_DL_TO_DTYPE = {(KDL_BFLOAT, 16): "bf16", (KDL_FLOAT, 16): "fp16", (KDL_FLOAT, 32): "f32",
                (KDL_FLOAT8_E4M3FN, 8): "e4m3", (KDL_INT, 32): "i32"}
_DTYPE_TO_DL = {v: k for k, v in _DL_TO_DTYPE.items()}
DLPACK_FLAG_READ_ONLY = 1

# __cuda_array_interface__ typestrs. bf16 and e4m3 have no numpy typestr: they travel as
# opaque 'V' elements tagged with a descr name (readable back here; elsewhere use DLPack).
_CAI_TO_DTYPE = {"<f2": "fp16", "<f4": "f32", "<i4": "i32"}
_DTYPE_TO_CAI = {"fp16": ("<f2", None), "f32": ("<f4", None), "i32": ("<i4", None),
                 "bf16": ("<V2", [("bf16", "<V2")]), "e4m3": ("|V1", [("e4m3", "|V1")])}


def _compact_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


class DeviceArray:
    """A strided view of device memory. Strides are in elements."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "readonly", "_owner", "_stream")

    def __init__(self, ptr: int, shape, strides, dtype: str, device: int | None = None,
                 owner: Any = None, readonly: bool = False):
        if dtype not in DTYPE_BYTES:
            raise InputError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        shape = tuple(map(int, shape))
        strides = _compact_strides(shape) if strides is None else tuple(map(int, strides))
        if len(strides) != len(shape):
            raise InputError(f"shape {shape} and strides {strides} differ in rank")
        if shape and min(shape) < 0:
            raise InputError(f"negative size in shape {shape}")
        if strides and min(strides) < 0:
            raise InputError(f"negative strides {strides} are not supported")
        self.ptr = int(ptr)
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.device = None if device is None else int(device)
        self.readonly = bool(readonly)
        self._owner = owner          # keeps the producer (and its memory) alive
        self._stream = None          # set by OwnedDeviceArray: the stream its data is ordered on

    @classmethod
    def _checked(cls, ptr: int, shape: tuple, strides: tuple | None, dtype: str, device, owner,
                 readonly: bool) -> "DeviceArray":
        """__init__ for values already of the right types (tuples of ints, a known dtype), as
        parsed from DLPack: the same checks, less conversion."""
        if strides is None:
            strides = _compact_strides(shape)
        if shape and min(shape) < 0:
            raise InputError(f"negative size in shape {shape}")
        if strides and min(strides) < 0:
            raise InputError(f"negative strides {strides} are not supported")
        self = object.__new__(cls)
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.device = device
        self.readonly = readonly
        self._owner = owner
        self._stream = None
        return self

    @classmethod
    def _trusted(cls, ptr: int, shape: tuple, strides: tuple, dtype: str, device: int, owner) -> "DeviceArray":
        """__init__ with no checks, for a producer whose shapes and strides are known to be
        tuples of non-negative ints (torch's, read by attribute in producers.py)."""
        self = object.__new__(cls)
        self.ptr, self.shape, self.strides, self.dtype = ptr, shape, strides, dtype
        self.device, self.readonly, self._owner, self._stream = device, False, owner, None
        return self

    @classmethod
    def from_pointer(cls, ptr: int, shape, strides=None, dtype: str = "bf16",
                     device: int | None = None, owner: Any = None) -> "DeviceArray":
        """Wrap a raw device pointer; ``strides`` in elements, None = compact row-major.
        The caller keeps the memory alive (or passes ``owner``)."""
        return cls(ptr, shape, strides, dtype, device, owner)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def span_bytes(self) -> int:
        """Bytes from the base pointer to one past the last element."""
        if self.size == 0:
            return 0
        return (sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1) * self.itemsize

    def with_device(self, device: int) -> "DeviceArray":
        a = DeviceArray(self.ptr, self.shape, self.strides, self.dtype, device, self._owner, self.readonly)
        a._stream = self._stream
        return a

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(ptr=0x{self.ptr:x}, shape={self.shape}, strides={self.strides}, "
                f"dtype={self.dtype!r}, device={self.device})")

    # -- export ---------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict:
        typestr, descr = _DTYPE_TO_CAI[self.dtype]
        d = {"version": 3, "shape": self.shape, "typestr": typestr,
             "strides": tuple(s * self.itemsize for s in self.strides),
             "data": (self.ptr, self.readonly),
             # The data is ordered on the stream of the launch that wrote it; consumers
             # that use another stream must order themselves (DLPack does it for them).
             "stream": None}
        if descr is not None:
            d["descr"] = descr
        return d

    def __dlpack_device__(self) -> tuple:
        if self.device is None:
            raise BufferError("the array's device is unknown (pass device= when wrapping the pointer)")
        return (KDL_CUDA, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("cubinforge arrays cannot be copied through DLPack")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export to device {tuple(dl_device)}; the array is on "
                              f"{self.__dlpack_device__()}")
        if self._stream is not None and stream != -1:
            # DLPack: None means the consumer uses the legacy default stream (handle 1).
            from . import driver
            driver.order_streams(consumer=1 if stream is None else int(stream),
                                 producer=self._stream, device=self.device)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _dlpack_export(self, versioned)


class OwnedDeviceArray(DeviceArray):
    """A DeviceArray owning a stream-ordered allocation (cuMemAllocAsync), freed with
    cuMemFreeAsync on the same stream once nothing (including a DLPack consumer) uses it."""

    __slots__ = ()

    @classmethod
    def empty(cls, shape, dtype: str, device: int, stream=None, strides=None) -> "OwnedDeviceArray":
        from . import driver
        if dtype not in DTYPE_BYTES:
            raise InputError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        shape = tuple(int(n) for n in shape)
        strides = _compact_strides(shape) if strides is None else tuple(strides)
        probe = DeviceArray(0, shape, strides, dtype)
        handle, keep = driver.resolve_stream(stream)
        alloc = driver.DeviceAllocation(probe.span_bytes, device, handle, keep)
        a = cls(alloc.ptr, shape, strides, dtype, device, alloc)
        a._stream = handle
        return a


# --------------------------------------------------------------------------- ctypes / capsules

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


# Names must outlive the capsules that point at them: module-level bytes constants do.
_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"

# Our own handle on the C API, so argtypes set here never clash with another library's.
_api = ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)
_IsValid = _api.PyCapsule_IsValid
_IsValid.argtypes, _IsValid.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
_GetPointer = _api.PyCapsule_GetPointer
_GetPointer.argtypes, _GetPointer.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
_SetName = _api.PyCapsule_SetName
_SetName.argtypes, _SetName.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
_New = _api.PyCapsule_New
_New.argtypes, _New.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.py_object

# Producers' deleters may touch Python objects: call them with the GIL held (PYFUNCTYPE).
_CALL_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


class _DLPackImport:
    """Owns one consumed DLManagedTensor: calls the producer's deleter exactly once, when
    the last DeviceArray using it goes away (never earlier)."""

    __slots__ = ("_managed", "_deleter", "_producer")

    def __init__(self, managed: int, deleter: int | None, producer: Any):
        self._managed, self._deleter, self._producer = managed, deleter, producer

    def __del__(self):
        if self._deleter:
            d, self._deleter = self._deleter, None
            try:
                fn = _deleters.get(d)
                if fn is None:
                    if len(_deleters) >= 64:
                        _deleters.clear()
                    fn = _deleters[d] = _CALL_DELETER(d)
                fn(self._managed)
            except Exception:  # interpreter shutdown: nothing sensible left to do
                pass


# Callable thunks for producers' deleters, by address (a producer uses one or two).
_deleters: dict[int, Any] = {}


# The DLManagedTensor[Versioned] up to the end of its DLTensor, read in one go:
# versioned: version (2 x u32), manager_ctx, deleter, flags (u64), then the DLTensor;
# legacy: the DLTensor, manager_ctx, deleter. DLTensor: data, device (2 x i32), ndim (i32),
# dtype (u8 code, u8 bits, u16 lanes), shape, strides, byte_offset (u64).
_DLTENSOR = "QiiiBBHQQQ"
_MT_VERSIONED = struct.Struct("<IIQQQ" + _DLTENSOR)
_MT_LEGACY = struct.Struct("<" + _DLTENSOR + "QQ")
assert _MT_VERSIONED.size == ctypes.sizeof(_DLManagedTensorVersioned)
assert _MT_LEGACY.size == ctypes.sizeof(_DLManagedTensor)
_I64 = [struct.Struct(f"<{n}q") for n in range(33)]
_MAX_NDIM = 32
# Memory is read in place: a ctypes char array over the address (from_address) is a buffer
# struct.unpack_from reads, half the cost of string_at's copy into bytes (issue 10).
_AT_VERSIONED = ctypes.c_char * _MT_VERSIONED.size
_AT_LEGACY = ctypes.c_char * _MT_LEGACY.size
_AT_I64 = [ctypes.c_char * (8 * n) for n in range(_MAX_NDIM + 1)]


def parse_dlpack_capsule(capsule, producer: Any = None, dtype: str | None = None,
                         what: str = "array") -> DeviceArray:
    """Consume a DLPack capsule (legacy or versioned): rename it 'used_…' as the protocol
    requires and return a DeviceArray that owns the tensor until it is dropped."""
    cap = id(capsule)
    # One C call for the usual case (a versioned capsule); IsValid only for the others.
    try:
        addr = _GetPointer(cap, _NAME_V) if type(capsule).__name__ == "PyCapsule" else None
    except ValueError:           # another name: legacy, used, or not ours
        addr = None
    if addr:
        (major, minor, _ctx, deleter, flags, data, dev_type, dev_id, ndim, code, bits, lanes,
         shape_p, strides_p, byte_offset) = _MT_VERSIONED.unpack_from(_AT_VERSIONED.from_address(addr))
        if major != 1:
            raise InputError(f"{what}: DLPack version {major}.{minor} is not "
                             f"supported (this runtime reads 1.x)")
        used = _USED_V
    elif _IsValid(cap, _NAME):
        addr = _GetPointer(cap, _NAME)
        (data, dev_type, dev_id, ndim, code, bits, lanes, shape_p, strides_p, byte_offset,
         _ctx, deleter) = _MT_LEGACY.unpack_from(_AT_LEGACY.from_address(addr))
        flags, used = 0, _USED
    else:
        raise InputError(f"{what}: not an unconsumed DLPack capsule (expected name 'dltensor' "
                         f"or 'dltensor_versioned')")
    # Until the rename below, an error leaves the capsule owning the tensor (its
    # destructor frees it).
    if dev_type != KDL_CUDA:
        name = _DL_DEVICE_NAMES.get(dev_type, f"device type {dev_type}")
        raise InputError(f"{what} is on {name}:{dev_id}; cubinforge needs CUDA device "
                         f"memory (kDLCUDA)")
    if lanes != 1:
        raise InputError(f"{what}: vector dtype with {lanes} lanes is not supported")
    if dtype is not None:
        if bits != 8 * DTYPE_BYTES.get(dtype, 0):
            raise InputError(f"{what}: dtype={dtype!r} override needs {8 * DTYPE_BYTES.get(dtype, 0)}-bit "
                             f"elements, the array has {bits}-bit ones")
        got = dtype
    else:
        got = _DL_TO_DTYPE.get((code, bits))
        if got is None:
            raise InputError(f"{what}: DLPack dtype (code {code}, {bits} bits) is not one of "
                             f"bf16, fp16, f32, float8_e4m3fn; pass dtype= to reinterpret")
    if not 0 <= ndim <= _MAX_NDIM:
        raise InputError(f"{what}: DLPack ndim {ndim} is outside 0..{_MAX_NDIM}")
    if ndim and not shape_p:
        raise InputError(f"{what}: DLPack tensor of {ndim} dimensions has no shape")
    fmt, at = _I64[ndim], _AT_I64[ndim]
    shape = fmt.unpack_from(at.from_address(shape_p)) if ndim else ()
    strides = (fmt.unpack_from(at.from_address(strides_p)) if ndim else ()) if strides_p else None
    ptr = data + byte_offset
    # Rename first: from here on we, not the capsule's destructor, own the tensor.
    if _SetName(cap, used) != 0:
        raise InputError(f"{what}: could not mark the DLPack capsule as used")
    # Without a deleter there is nothing to free: the producer alone keeps the memory alive.
    holder = _DLPackImport(addr, deleter, producer) if deleter else producer
    return DeviceArray._checked(ptr, shape, strides, got, dev_id, holder,
                                bool(flags & DLPACK_FLAG_READ_ONLY))


# Exported tensors live here until the consumer calls the deleter (or the unconsumed
# capsule is collected): key = address of the DLManagedTensor[Versioned].
_exports: dict[int, tuple] = {}
_exports_lock = threading.Lock()


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _export_deleter(addr):
    with _exports_lock:
        _exports.pop(addr, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(cap):
    # Called when the capsule dies. If nobody consumed it, it still owns the tensor.
    for name in (_NAME, _NAME_V):
        if _IsValid(cap, name):
            addr = _GetPointer(cap, name)
            with _exports_lock:
                _exports.pop(addr, None)


_export_deleter_addr = ctypes.cast(_export_deleter, ctypes.c_void_p).value
_capsule_destructor_addr = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def _dlpack_export(a: DeviceArray, versioned: bool):
    """Build a DLManagedTensor[Versioned] for ``a`` and wrap it in a capsule."""
    n = a.ndim
    shape = (ctypes.c_int64 * max(n, 1))(*a.shape)
    strides = (ctypes.c_int64 * max(n, 1))(*a.strides)
    code, bits = _DTYPE_TO_DL[a.dtype]
    if versioned:
        mt = _DLManagedTensorVersioned()
        mt.version.major, mt.version.minor = 1, 0
        mt.flags = DLPACK_FLAG_READ_ONLY if a.readonly else 0
    else:
        mt = _DLManagedTensor()
    t = mt.dl_tensor
    t.data = a.ptr or None
    t.device.device_type, t.device.device_id = KDL_CUDA, a.device if a.device is not None else 0
    t.ndim = n
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    mt.deleter = _export_deleter_addr
    addr = ctypes.addressof(mt)
    with _exports_lock:
        _exports[addr] = (mt, shape, strides, a)   # `a` keeps the memory alive
    return _New(addr, _NAME_V if versioned else _NAME, _capsule_destructor_addr)


# --------------------------------------------------------------------------- conversion

def _from_cai(obj, dtype: str | None, what: str, cai: dict | None = None) -> DeviceArray:
    if cai is None:
        cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise InputError(f"{what}: masked __cuda_array_interface__ arrays are not supported")
    typestr = cai["typestr"]
    itemsize = _TYPESTR_SIZE.get(typestr)
    if itemsize is None:
        itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    if dtype is not None:
        if itemsize != DTYPE_BYTES.get(dtype, -1):
            raise InputError(f"{what}: dtype={dtype!r} override needs {DTYPE_BYTES.get(dtype)}-byte "
                             f"elements; typestr {typestr!r} has {itemsize}")
        got = dtype
    else:
        got = _CAI_TO_DTYPE.get(typestr)
        if got is None and typestr[1:2] == "V":
            names = [d[0] for d in cai.get("descr") or []]
            got = names[0] if len(names) == 1 and names[0] in DTYPE_BYTES else None
            if got is not None and DTYPE_BYTES[got] != itemsize:
                got = None
        if got is None:
            raise InputError(f"{what}: __cuda_array_interface__ typestr {typestr!r} is not fp16 '<f2' "
                             f"or f32 '<f4'; for bf16/e4m3 pass dtype= or use DLPack")
    ptr, readonly = cai["data"]
    shape = tuple(map(int, cai["shape"]))
    strides = cai.get("strides")
    if strides is not None:
        strides = tuple(map(int, strides))
        elems = _elem_strides.get((strides, itemsize))
        if elems is None:
            elems = tuple(s // itemsize for s in strides) if itemsize else ()
            if not itemsize or any(e * itemsize != s for e, s in zip(elems, strides)):
                raise InputError(f"{what}: byte strides {strides} are not multiples of the "
                                 f"{itemsize}-byte element")
            if len(_elem_strides) >= 1024:
                _elem_strides.clear()
            _elem_strides[(strides, itemsize)] = elems
        if len(elems) != len(shape):
            raise InputError(f"{what}: shape {shape} and strides {elems} differ in rank")
        strides = elems
    # The interface carries no device ordinal: the launcher asks the driver for it.
    return DeviceArray._checked(int(ptr or 0), shape, strides, got, None, obj, bool(readonly))


_TYPESTR_SIZE = {"<f2": 2, "<f4": 4, "<V2": 2, "|V1": 1}
_elem_strides: dict[tuple, tuple] = {}   # (byte strides, itemsize) -> element strides, checked


# Producer types whose __dlpack__ refuses max_version= (asked without it after the first refusal).
_LEGACY_PRODUCERS: set = set()
# Per producer type: its attribute reader (producers.reader_for), or None for the protocol path.
_readers: dict = {}
_UNSEEN = object()


def as_device_array(obj: Any, dtype: str | None = None, stream: int | None = None,
                    what: str = "array", ordered: set | None = None) -> DeviceArray:
    """Wrap ``obj`` (DeviceArray, DLPack producer, or __cuda_array_interface__ object).

    ``stream`` is the integer handle the consumer will use; it is passed to ``__dlpack__``
    so the producer can order its pending work before ours (0 is sent as 1, the legacy
    default stream, as the DLPack protocol requires). ``ordered``, a set shared by the
    arrays of one call, lets a producer read by attribute (producers.py) order the stream
    once per device for all of them."""
    if isinstance(obj, DeviceArray):
        if dtype is not None and dtype != obj.dtype:
            if DTYPE_BYTES.get(dtype) != obj.itemsize:
                raise InputError(f"{what}: cannot view {obj.dtype} as {dtype}")
            obj = DeviceArray(obj.ptr, obj.shape, obj.strides, dtype, obj.device, obj._owner, obj.readonly)
        return obj
    tp = type(obj)
    reader = _readers.get(tp, _UNSEEN)
    if reader is _UNSEEN:
        reader = _readers[tp] = producers.reader_for(tp) if len(_readers) < 256 else None
    if reader is not None:       # a known producer, read by attribute (producers.py)
        a = reader(obj, dtype, stream, what, ordered)
        if a is not None:
            return a
    export = getattr(obj, "__dlpack__", None)
    if export is not None:
        dev = getattr(obj, "__dlpack_device__", None)
        if dev is not None:
            dev_type, dev_id = dev()
            if int(dev_type) != KDL_CUDA:
                name = _DL_DEVICE_NAMES.get(int(dev_type), f"device type {int(dev_type)}")
                raise InputError(f"{what} is on {name}:{dev_id}; cubinforge needs CUDA device memory "
                                 f"(kDLCUDA); move it to the GPU first")
        s = None if stream is None else (1 if stream == 0 else int(stream))
        if tp in _LEGACY_PRODUCERS:
            capsule = export(stream=s)
        else:
            try:
                capsule = export(stream=s, max_version=(1, 0))
            except TypeError:   # a producer that predates DLPack 1.0 keywords
                capsule = export(stream=s)
                if len(_LEGACY_PRODUCERS) < 64:
                    _LEGACY_PRODUCERS.add(tp)   # ask it the old way from now on
        return parse_dlpack_capsule(capsule, producer=obj, dtype=dtype, what=what)
    cai = getattr(obj, "__cuda_array_interface__", None)   # a property: read it once
    if cai is not None:
        return _from_cai(obj, dtype, what, cai)
    raise InputError(f"{what}: {type(obj).__name__} is not a device array (it has neither __dlpack__ "
                     f"nor __cuda_array_interface__); use DeviceArray.from_pointer for raw pointers")


def wrap_arg(obj: Any, stream: int | None, what: str, ordered: set | None) -> DeviceArray:
    """as_device_array(obj, stream=, what=, ordered=) for a call's array arguments that are
    not DeviceArrays already: a producer read by attribute (a torch tensor) goes straight to
    its reader, everything else the full way."""
    reader = _readers.get(type(obj))
    if reader is not None:
        a = reader(obj, None, stream, what, ordered)
        if a is not None:
            return a
    return as_device_array(obj, stream=stream, what=what, ordered=ordered)


from . import producers  # noqa: E402  (it imports DeviceArray from here)
