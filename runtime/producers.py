"""Known DLPack producers read by attribute: a torch tensor without a capsule per call.

torch's ``Tensor.__dlpack__`` is Python: it builds stream objects, compares them, and makes a
new capsule; measured on the H200 host that is most of the 228 us a five-tensor
``flash_attn_func`` call cost. For exactly ``torch.Tensor`` (subclasses take the DLPack path)
the facts the capsule would carry are read from the tensor instead: ``data_ptr()``, ``shape``,
``stride()``, ``dtype``, ``get_device()``. What the protocol's ``stream=`` asks of the producer
is done here too, as torch's ``__dlpack__`` does it: unless the consumer stream is torch's
current stream on that device, the consumer waits for it (an event; no host sync).

torch is never imported: the tensor's own module (already loaded, or there would be no
tensor) answers the current-stream question. Anything this path does not handle exactly
(CPU tensors, tensors requiring grad, negative-bit views, sparse layouts, other dtypes)
returns None, and the caller falls back to ``__dlpack__``, whose errors say what is wrong.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from . import driver
from .arrays import DTYPE_BYTES, DeviceArray

_TORCH_DTYPE_NAMES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "f32",
                      "torch.float8_e4m3fn": "e4m3"}
_torch_dtypes: dict = {}            # torch dtype object -> our dtype name (or None)
_current_stream: list = [None]      # torch's "current raw stream of device i", resolved once


def reader_for(tp: type) -> Callable | None:
    """The attribute reader for instances of exactly ``tp``, or None (use the protocol)."""
    if tp.__module__ == "torch" and tp.__qualname__ == "Tensor":
        return torch_array
    return None


def _torch_stream_of(dev: int) -> int:
    fn = _current_stream[0]
    if fn is None:
        torch = sys.modules["torch"]
        raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        # The private call is what torch's own generated code uses (one C call); the public
        # one builds a Stream object first.
        fn = raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)
        _current_stream[0] = fn
    return int(fn(dev))


def torch_fields(t: Any, dtype: str | None = None) -> tuple | None:
    """(ptr, shape, strides, dtype, device) of ``t`` (a torch.Tensor), or None where only the
    DLPack path can answer (requires grad, negative bit, CPU, another dtype, no strides)."""
    if t.requires_grad or t.is_neg():
        return None
    dev = t.get_device()
    if dev < 0:
        return None
    tdt = t.dtype
    got = _torch_dtypes.get(tdt, False)
    if got is False:
        got = _torch_dtypes[tdt] = _TORCH_DTYPE_NAMES.get(str(tdt))
    if dtype is not None:
        if got is None or DTYPE_BYTES.get(dtype) != DTYPE_BYTES[got]:
            return None
        got = dtype
    elif got is None:
        return None
    try:
        ptr = t.data_ptr()
        strides = t.stride()
    except (RuntimeError, NotImplementedError):     # no storage / no strides (sparse, ...)
        return None
    # stride() is a tuple already; torch.Size becomes a plain tuple (messages, keys).
    return ptr, tuple(t.shape), strides, got, dev


def order_for(stream: int | None, dev: int, ordered: set | None) -> None:
    """What DLPack's ``stream=`` asks of torch, once per call and device: unless ``stream`` is
    torch's current stream on ``dev``, it waits for that stream (an event, no host sync)."""
    if stream != -1 and (ordered is None or dev not in ordered):
        consumer = 0 if stream is None else stream
        producer = _torch_stream_of(dev)
        if consumer != producer:
            driver.order_streams(consumer=consumer, producer=producer, device=dev)
        if ordered is not None:
            ordered.add(dev)


def torch_array(t: Any, dtype: str | None, stream: int | None, what: str,
                ordered: set | None = None) -> DeviceArray | None:
    """``t`` (a torch.Tensor) as a DeviceArray, ordered for ``stream`` as DLPack would be, or
    None where only the DLPack path can answer. ``ordered`` (one set per call) holds the
    devices whose ordering this call already did: torch's current stream is one per device."""
    f = torch_fields(t, dtype)
    if f is None:
        return None
    ptr, shape, strides, got, dev = f
    order_for(stream, dev, ordered)
    return _trusted(ptr, shape, strides, got, dev, t)


_trusted = DeviceArray._trusted
