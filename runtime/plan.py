"""``AttentionPlan``: one flash_attn_func call bound once, replayed per step.

``plan_attention`` (attention.py) checks the call, picks the variant, allocates missing
outputs and packs the kernel parameters. The plan owns those bytes (they are not shared
through the launcher's plan cache, so rewriting them never changes another call):

- ``launch(stream)`` launches them as they are: no checks, no allocation, no
  synchronisation, so a CUDA graph can capture it;
- ``run(q, k, v, out=, lse=)`` first points the plan at other buffers laid out exactly like
  the bound ones (same shapes, strides, dtypes, device), rewriting only the parameters that
  hold a pointer that changed, then launches.

A plan of empty inputs (no kernel) replays what flash_attn_func does for them: nothing, or
O = 0 and LSE = -inf by memset.
"""

from __future__ import annotations

from typing import Any

from . import driver, restage
from .arrays import DeviceArray, as_device_array
from .errors import InputError
from .launcher import record_copies

_NAMES = ("q", "k", "v", "o", "lse")


class AttentionPlan:
    """A bound attention call (see the module doc). ``out`` and ``lse`` are the outputs it
    writes (the caller's objects when given, else arrays allocated at planning)."""

    __slots__ = ("kernel", "device", "stream", "out", "lse", "_call", "_plan", "_arrays", "_tma_align", "_keep",
                 "_copies", "_run")

    def __init__(self, call, stream: int, keep: Any = None):
        self._keep = keep                         # the caller's stream object, if one was given
        self._call = call
        self.kernel = call.kernel
        self.device = call.device
        self.stream = stream
        self.out, self.lse = call.out, call.lse
        self._arrays = dict(call.arrays)          # keeps the bound buffers alive
        self._plan = None
        self._tma_align = {}
        self._copies = tuple(call.copies.values())   # (src, dst) pairs: read per launch, so kept flat
        self._run = None
        if self.kernel is not None:
            self._plan = self.kernel.build_plan(call.arrays, call.scalars, stream)
            self._run = self.kernel.run
            specs = self.kernel.contract.tensors
            tma = {p.spec.get("tensor") for p in self.kernel.contract.params if p.kind == "tensormap"}
            self._tma_align = {n: max(specs[n].align_bytes, 16 if n in tma else 1) for n in specs}

    @property
    def variant(self) -> str | None:
        """The variant it launches (None for inputs that need no kernel)."""
        return None if self.kernel is None else self.kernel.variant

    def launch(self, stream: Any = None):
        """Launch the bound call on ``stream`` (None: the stream it was planned on). Returns
        (out, lse)."""
        if stream is None:
            handle = self.stream
        elif type(stream) is int:
            handle = stream
        else:
            handle = driver.resolve_stream(stream)[0]
        run = self._run
        if run is not None:
            copies = self._copies
            if copies:
                for src, dst in copies:                     # inputs TMA cannot read in place
                    restage.copy_into(src, dst, handle)
                record_copies(run(self._plan, handle), tuple(self._call.copies))
            else:
                run(self._plan, handle)
        else:
            from .attention import run_without_kernel
            run_without_kernel(self._call, handle)
        return self.out, self.lse

    def run(self, q: Any = None, k: Any = None, v: Any = None, out: Any = None, lse: Any = None,
            stream: Any = None):
        """Point the plan at these buffers (None keeps the bound one) and launch. Each must
        be laid out as the bound one; the outputs returned are the ones now bound."""
        handle = self.stream if stream is None else stream if type(stream) is int else driver.resolve_stream(stream)[0]
        given = {n: x for n, x in zip(_NAMES, (q, k, v, out, lse)) if x is not None}
        if given:
            self._rebind(given, handle)
        if out is not None:
            self.out = out
        if lse is not None:
            self.lse = lse
        return self.launch(handle)

    def _rebind(self, given: dict, handle: int) -> None:
        new = {}
        od: set = set()
        for n, x in given.items():
            old = self._call.copies[n][0] if n in self._call.copies else self._arrays.get(n)
            if old is None:
                raise InputError(f"this plan has no {n} to replace ({self.variant} does not take it)")
            a = as_device_array(x, stream=handle, what=n, ordered=od)
            if (a.shape, a.strides, a.dtype) != (old.shape, old.strides, old.dtype):
                raise InputError(f"{n} must be laid out as the planned one: shape {old.shape}, strides "
                                 f"{old.strides}, {old.dtype}; got shape {a.shape}, strides {a.strides}, "
                                 f"{a.dtype} (plan again for a new layout)")
            if n in ("o", "lse") and a.readonly:
                raise InputError(f"{n} is read-only; the plan writes it")
            dev = a.device if a.device is not None else (driver.pointer_device(a.ptr) if a.ptr else self.device)
            if dev != self.device:
                raise InputError(f"{n} is on device {dev}; the plan was made on device {self.device}")
            align = 1 if n in self._call.copies else self._tma_align.get(n, 1)
            if a.size and a.ptr % align:
                raise InputError(f"{n}: base pointer 0x{a.ptr:x} is not {align}-byte aligned "
                                 f"(offset {a.ptr % align}); {self.variant} needs {align} B")
            new[n] = a if a.device is not None else a.with_device(dev)
        if self._plan is not None:
            copies = self._call.copies
            for n in [n for n in new if n in copies]:      # a copied input: copy from the new one
                copies[n] = (new.pop(n), copies[n][1])
            self._copies = tuple(copies.values())
            self.kernel.rewrite_pointers(self._plan, {n: a for n, a in new.items() if n in self._call.arrays})
        else:
            self._call.fills = [(new.get(_key_of(self._call, a), a), bits) for a, bits in self._call.fills]
        self._arrays.update(new)
        self._call.arrays.update(new)

    def __repr__(self) -> str:
        return f"AttentionPlan({self.variant!r}, device={self.device}, stream={self.stream:#x})"


def _key_of(call, array: DeviceArray) -> str | None:
    for n, a in call.arrays.items():
        if a is array:
            return n
    return None
