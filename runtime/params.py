"""Kernel parameter bytes from a bound contract (launch step 3).

Each parameter becomes one ctypes buffer holding exactly ``size`` bytes: structs are packed
little-endian at their field offsets over zeros, scalars are packed by type, tensor maps come
from tensormap.py. The launcher passes an array of pointers to these buffers.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Callable

from . import driver, tensormap
from .contract import FIELD_TYPES, Bound, ParamSpec
from .errors import ContractError, CudaError, InputError

_FORMATS = {"i32": "<i", "i64": "<q", "u64": "<Q", "ptr": "<Q", "f32": "<f"}
_RANGES = {"i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1),
           "u64": (0, (1 << 64) - 1), "ptr": (0, (1 << 64) - 1)}


def pack_value(typ: str, value, where: str) -> bytes:
    """Pack one value; an integer type refuses reals and values that do not fit."""
    if typ == "f32":
        return struct.pack("<f", float(value))
    if isinstance(value, float):
        raise ContractError(f"{where}: {typ} field got the real {value}")
    lo, hi = _RANGES[typ]
    if not lo <= value <= hi:
        raise InputError(f"{where}: {value} does not fit in {typ} (the problem is too large for "
                         f"this kernel's {typ} index)")
    return struct.pack(_FORMATS[typ], value)


def struct_bytes(p: ParamSpec, bound: Bound) -> bytes:
    buf = bytearray(p.size)
    for j, f in enumerate(p.spec.get("fields", [])):
        typ, off = f["type"], f["offset"]
        where = f"param {p.ordinal} ({p.name}) field {j} at +{off}"
        buf[off:off + FIELD_TYPES[typ]] = pack_value(typ, bound.eval(f["value"]), where)
    return bytes(buf)


def param_bytes(p: ParamSpec, bound: Bound, encode: Callable = tensormap.encode_tensormap) -> bytes:
    if p.kind == "struct":
        data = struct_bytes(p, bound)
    elif p.kind == "scalar":
        data = pack_value(p.spec["type"], bound.eval(p.spec["value"]), f"param {p.ordinal} ({p.name})")
    elif p.kind == "tensormap":
        tname = p.spec["tensor"]
        data = encode(p.spec, bound.tensors[tname], tname)
    else:  # load_contract admits only the three kinds
        raise ContractError(f"param {p.ordinal}: unknown kind {p.kind!r}")
    if len(data) != p.size:
        raise ContractError(f"param {p.ordinal} ({p.name}): built {len(data)} bytes, contract says {p.size}")
    return data


def _aligned_buffer(data: bytes, align: int):
    """A ctypes char array holding ``data`` at an address aligned to ``align`` (the view keeps
    its backing store alive)."""
    if align <= 16:
        return ctypes.create_string_buffer(data, len(data))
    raw = ctypes.create_string_buffer(len(data) + align)
    off = (-ctypes.addressof(raw)) % align
    view = (ctypes.c_char * len(data)).from_buffer(raw, off)
    ctypes.memmove(view, data, len(data))
    return view


def build_params(bound: Bound, encode: Callable = tensormap.encode_tensormap) -> list:
    """One ctypes buffer per parameter, in ordinal order."""
    return [_aligned_buffer(param_bytes(p, bound, encode), p.align) for p in bound.contract.params]


def replace_tensormap_address(buf, address: int) -> None:
    """Point the 128-byte tensor map held in ``buf`` (a parameter buffer) at ``address``, all
    else kept: cuTensorMapReplaceAddress (needs a current context)."""
    if address % 16:
        raise InputError(f"tensor map address 0x{address:x} is not 16-byte aligned, as TMA requires")
    tm = getattr(_scratch, "tm", None)
    if tm is None:          # one CUtensorMap per thread carries the bytes through the call
        tm = _scratch.tm = driver.drv().CUtensorMap()
        _scratch.ptr = tm.getPtr()
    p, b = _scratch.ptr, ctypes.addressof(buf)
    ctypes.memmove(p, b, 128)
    res = driver._drv.cuTensorMapReplaceAddress(tm, address)
    err = res[0] if type(res) is tuple else res
    if err != driver._SUCCESS:
        raise CudaError("cuTensorMapReplaceAddress", int(err), driver.error_name(err), f"address 0x{address:x}")
    ctypes.memmove(b, p, 128)


_scratch = threading.local()
