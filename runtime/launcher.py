"""``Kernel``: one variant (manifest + cubin) launched from its contract, for any arrays.

``Kernel.launch`` is the doc's four launch steps and nothing else: no allocation, no
synchronisation, so it can be captured in a CUDA graph. Which variant ran, with which grid,
is kept per thread for ``last_launch()``.
"""

from __future__ import annotations

import copy
import ctypes
import struct
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from . import driver, rawlaunch
from .arrays import DeviceArray, as_device_array
from .contract import Bound, Contract, bind
from .errors import CudaError, InputError
from .params import _aligned_buffer, build_params, param_bytes, replace_tensormap_address
from .registry_source import Manifest, Source, check_verified, default_source, fetch_cubin


@dataclass(frozen=True)
class LaunchRecord:
    """What one call ran. ``launched`` is False for a call that needed no kernel (empty or
    seqlen_k = 0 inputs: ``variant`` is None, ``note`` says what was done instead);
    ``copies`` names the inputs copied into aligned buffers first (docs/runtime-host-path.md)."""
    variant: str | None
    grid: tuple
    block: tuple
    cluster: tuple
    dynamic_smem_bytes: int
    stream: int
    device: int | None
    launched: bool = True
    note: str = ""
    copies: tuple = ()


_local = threading.local()
_launches = [0]     # kernels launched by this process (a list: one mutable cell, no global stmt)


def last_launch() -> LaunchRecord | None:
    """What the calling thread ran last (None before its first call)."""
    return getattr(_local, "record", None)


def launch_count() -> int:
    """How many kernels this process has launched through the runtime (successful
    cuLaunchKernelEx calls): tests assert that empty inputs launch none."""
    return _launches[0]


def record_no_launch(note: str, stream: int, device: int | None) -> LaunchRecord:
    """Record, for last_launch(), a call that ran no kernel."""
    rec = LaunchRecord(None, (0, 0, 0), (0, 0, 0), (0, 0, 0), 0, stream, device, launched=False, note=note)
    _local.record = rec
    return rec


def record_as_last(rec: LaunchRecord) -> LaunchRecord:
    """Make ``rec`` what last_launch() says (a call of several launches names its main one)."""
    _local.record = rec
    return rec


def record_copies(rec: LaunchRecord, copies: tuple) -> LaunchRecord:
    """``rec`` with the names of the inputs that were copied before the launch."""
    if copies:
        rec = replace(rec, copies=tuple(copies))
        _local.record = rec
    return rec


def resolve_devices(arrays: Mapping[str, DeviceArray]) -> tuple[dict, int]:
    """Fill in device ordinals the arrays did not carry, and check they are all one device."""
    out, seen = {}, {}
    for name, a in arrays.items():
        if a.device is None:
            a = a.with_device(driver.pointer_device(a.ptr)) if a.ptr else a
        out[name] = a
        if a.device is not None:
            seen.setdefault(a.device, name)
    if len(seen) > 1:
        where = ", ".join(f"{n} on device {d}" for d, n in seen.items())
        raise InputError(f"tensors are on different devices ({where}); all must be on one device")
    if not seen:
        raise InputError("cannot tell which device the tensors are on (all pointers are null)")
    return out, next(iter(seen))


def locate(a: DeviceArray) -> DeviceArray:
    """``a`` with its device filled in from the driver when it did not carry one (asked on
    every call: a pointer's device is never cached)."""
    if a.device is None and a.ptr:
        return a.with_device(driver.pointer_device(a.ptr))
    return a


def _scalars_key(scalars) -> tuple | None:
    """Hashable, type-exact form of the scalars (1, 1.0 and True differ), or None."""
    if not scalars:
        return ()
    try:
        key = tuple((n, type(v), v) for n, v in scalars.items())
        hash(key)
    except TypeError:        # an unhashable scalar: bind() will say what is wrong
        return None
    return key


class Kernel:
    """A registry variant ready to launch: its manifest and cubin bytes (verified)."""

    def __init__(self, manifest: Manifest, cubin: bytes, allow_unverified: bool | None = None):
        # Refuse a variant never checked on a GPU of its arch unless the caller opts in
        # (None: CUBINFORGE_ALLOW_UNVERIFIED decides).
        check_verified(manifest, allow_unverified)
        self.manifest = manifest
        self.cubin = cubin
        self._plans: dict[tuple, _Plan] = {}
        self._plans_lock = threading.Lock()
        self._functions: dict[Any, driver.Function] = {}   # context handle -> loaded function
        self._names = tuple(manifest.contract.tensors)
        self._ptr_params: dict[str, tuple] = {}     # tensor name -> pointer_params(name)

    @classmethod
    def from_manifest(cls, manifest: Manifest, source: Source | None = None,
                      allow_unverified: bool | None = None) -> "Kernel":
        check_verified(manifest, allow_unverified)  # before fetching the cubin
        return cls(manifest, fetch_cubin(manifest, source or default_source()), allow_unverified)

    @property
    def contract(self) -> Contract:
        return self.manifest.contract

    @property
    def variant(self) -> str:
        return self.manifest.variant

    def __repr__(self) -> str:
        return f"Kernel({self.variant!r})"

    def bind(self, tensors: Mapping[str, Any], scalars: Mapping[str, Any] | None = None,
             stream: int | None = None) -> tuple[Bound, int]:
        """Steps 1-2 without launching: wrap, locate and check the arrays; (bound, device)."""
        arrays = {n: as_device_array(t, stream=stream, what=n) for n, t in tensors.items() if t is not None}
        arrays, device = resolve_devices(arrays)
        for name, spec in self.contract.tensors.items():
            if spec.role == "output" and name in arrays and arrays[name].readonly:
                raise InputError(f"{name} is read-only; {self.variant} writes it")
        return bind(self.contract, arrays, scalars, {"sm_count": driver.sm_count(device)}), device

    def launch(self, tensors: Mapping[str, Any], scalars: Mapping[str, Any] | None = None,
               stream=None) -> LaunchRecord:
        """Launch on ``stream`` (None = legacy default stream). ``tensors`` maps the contract's
        tensor names to DeviceArrays or DLPack / __cuda_array_interface__ objects."""
        if type(stream) is int:
            handle = stream
        else:
            handle, _keep = driver.resolve_stream(stream)
        arrays = {}
        for n, t in tensors.items():
            if t is not None:
                arrays[n] = locate(t if isinstance(t, DeviceArray) else as_device_array(t, stream=handle, what=n))
        return self.run(self.plan(arrays, scalars, handle), handle)

    def plan(self, arrays: Mapping[str, DeviceArray], scalars: Mapping[str, Any] | None,
             stream: int = 0) -> "_Plan":
        """The checked launch for these DeviceArrays and scalars: steps 1-3, done once per
        distinct (pointers, shapes, strides, dtypes, devices, read-only flags, scalars); a
        repeated call (same buffers, as in a training loop or a serving step) reuses its
        parameter bytes instead of re-validating and re-encoding tensor maps."""
        key = self._key(arrays, scalars)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._build_plan(arrays, scalars, stream)
            if key is not None:
                with self._plans_lock:
                    if len(self._plans) >= _MAX_PLANS:
                        self._plans.pop(next(iter(self._plans)))
                    self._plans[key] = plan
        return plan

    def _key(self, arrays: Mapping[str, DeviceArray], scalars) -> tuple | None:
        # Everything the parameter bytes and the checks depend on, as a flat tuple; None
        # (no caching) unless the arrays are exactly the contract's tensors.
        names = self._names
        if len(arrays) != len(names):
            return None
        parts = []
        for n in names:
            a = arrays.get(n)
            if a is None:
                return None
            parts += (a.ptr, a.shape, a.strides, a.dtype, a.device, a.readonly)
        sk = _scalars_key(scalars)
        if sk is None:
            return None
        parts.append(sk)
        return tuple(parts)

    def _build_plan(self, arrays, scalars, stream: int) -> "_Plan":
        c = self.contract
        bound, device = self.bind(arrays, dict(scalars or {}), stream)
        arch = driver.device_arch(device)
        if arch != c.arch:
            raise InputError(f"{self.variant} is built for {c.arch}; device {device} is {arch}")
        with driver.device_context(device):
            buffers = build_params(bound)   # tensor maps need a current context
        return _Plan(bound.grid, device, buffers, driver.param_pointers(buffers))

    def build_plan(self, arrays: Mapping[str, DeviceArray], scalars: Mapping[str, Any] | None,
                   stream: int = 0, keep_arrays: bool = True) -> "_Plan":
        """A checked launch of its own (not shared through the plan cache), for a caller
        that rewrites its pointers later with ``rewrite_pointers``. With ``keep_arrays``
        False the plan remembers the arrays' layout and pointers but not the arrays (so a
        cache of plans never keeps a caller's buffers alive)."""
        c = self.contract
        bound, device = self.bind(arrays, dict(scalars or {}), stream)
        arch = driver.device_arch(device)
        if arch != c.arch:
            raise InputError(f"{self.variant} is built for {c.arch}; device {device} is {arch}")
        with driver.device_context(device):
            buffers = build_params(bound)
        if not keep_arrays:
            bound.tensors = {n: _view(a) for n, a in bound.tensors.items()}
        return _Plan(bound.grid, device, buffers, driver.param_pointers(buffers), bound=bound,
                     keep_arrays=keep_arrays)

    def clone_plan(self, plan: "_Plan") -> "_Plan":
        """A copy of ``plan`` (one from ``build_plan``) with parameter bytes of its own, for
        ``rewrite_pointers`` to point elsewhere while ``plan`` keeps its pointers."""
        buffers = [_aligned_buffer(bytes(b), p.align) for b, p in zip(plan.buffers, self.contract.params)]
        return _Plan(plan.grid, plan.device, buffers, driver.param_pointers(buffers), bound=copy.copy(plan.bound),
                     keep_arrays=plan.keep_arrays)

    def pointer_params(self, name: str) -> tuple:
        """How tensor ``name``'s pointer reaches the parameters: (ordinal, how, offset) with
        how = 'tensormap' (its descriptor), 'ptr' (a field or scalar that is the pointer
        itself, at byte offset) or 'repack' (an expression using it: the param is re-packed)."""
        hit = self._ptr_params.get(name)
        if hit is None:
            ref = f"{name}.ptr"
            hit = []
            for p in self.contract.params:
                if p.kind == "tensormap":
                    if p.spec.get("tensor") == name:
                        # A ragged map's address is the pointer moved back (tensormap.ragged_shift):
                        # encoded afresh rather than given the bare pointer.
                        ragged = p.spec.get("ragged_dim") is not None
                        hit.append((p.ordinal, "repack" if ragged else "tensormap", 0))
                    continue
                fields = p.spec.get("fields", []) if p.kind == "struct" else [
                    {"value": p.spec.get("value", ()), "type": p.spec.get("type"), "offset": 0}]
                uses = [f for f in fields if ref in f.get("value", ())]
                if uses and all(f["value"] == [ref] and f["type"] in ("ptr", "u64", "i64") for f in uses):
                    hit += [(p.ordinal, "ptr", f["offset"]) for f in uses]
                elif uses:
                    hit.append((p.ordinal, "repack", 0))
            hit = self._ptr_params[name] = tuple(hit)
        return hit

    def rewrite_pointers(self, plan: "_Plan", arrays: Mapping[str, DeviceArray]) -> None:
        """Point ``plan`` (one from ``build_plan``) at ``arrays``: DeviceArrays laid out as the
        ones it was built for (the caller checked shapes, strides, dtypes, device and
        alignment). Only what holds a changed pointer is rewritten: a pointer field in place,
        a tensor map by cuTensorMapReplaceAddress, a param whose expression uses it re-packed."""
        bound = plan.bound          # the plan's own (build_plan): updated in place
        tensors = bound.tensors
        changed = [n for n, a in arrays.items() if a.ptr != tensors[n].ptr]
        if not plan.keep_arrays:
            arrays = {n: _view(a) for n, a in arrays.items()}
        bound.tensors = tensors = {**tensors, **arrays}
        if changed:
            with driver.device_context(plan.device):
                for n in changed:
                    ptr = tensors[n].ptr
                    for i, how, off in self.pointer_params(n):
                        buf = plan.buffers[i]
                        if how == "ptr":
                            _U64.pack_into(buf, off, ptr)
                        elif how == "tensormap":
                            replace_tensormap_address(buf, ptr)
                        else:
                            data = param_bytes(self.contract.params[i], bound)
                            ctypes.memmove(buf, data, len(data))

    def run(self, plan: "_Plan", stream: int) -> LaunchRecord:
        """Step 4 for a checked plan: load the module (once per context), set the dynamic
        smem limit (once per function) and launch on ``stream`` (an int handle)."""
        fast = plan.fast
        if fast is not None and fast[1] == stream:
            # The plan's last launch was in this context on this stream: the same function,
            # config and parameter array, so one context query and one launch.
            raw = fast[6]
            if raw is not None:      # libcuda through ctypes, arguments prebuilt (rawlaunch.py)
                # raw.current() inlined (one frame less per launch): 0 is success, the slot
                # then holds the context (None for none, never equal to the plan's).
                if (raw.get_current(raw.slot_ref) == 0 and raw.slot.value == fast[0]
                        and raw.launch(*fast[7]) == 0):
                    _launches[0] += 1
                    _local.record = fast[5]
                    return fast[5]
            elif _current_context() == fast[0]:
                res = driver._drv.cuLaunchKernelEx(fast[2], fast[3], fast[4], 0)
                if (res[0] if type(res) is tuple else res) == driver._SUCCESS:
                    _launches[0] += 1
                    _local.record = fast[5]
                    return fast[5]
            plan.fast = None         # the full path below launches again and says what failed
        ctx = _current_context()
        c = self.contract
        fn = self._functions.get(ctx) if ctx else None
        if fn is not None and driver._ctx_devices.get(ctx) == plan.device:
            # The usual case: the thread's current context is one of the plan's device that
            # this kernel already ran in; device_context() would neither push nor load.
            try:
                driver.launch(fn, plan.grid, c.block, c.cluster, c.dynamic_smem_bytes, stream, plan.pointers)
            except CudaError:
                self._functions.pop(ctx, None)
                driver.forget_context(ctx)
                raise
        else:
            self._run_in_context(plan, stream)
            fn = None
        _launches[0] += 1
        rec = plan.records.get(stream)
        if rec is None:
            rec = LaunchRecord(self.variant, plan.grid, c.block, c.cluster, c.dynamic_smem_bytes, stream,
                               plan.device)
            if len(plan.records) >= 8:
                plan.records.clear()
            plan.records[stream] = rec
        _local.record = rec
        cfg = plan.pointers._configs.get(stream) if hasattr(plan.pointers, "_configs") else None
        if fn is not None and cfg is not None:
            raw = rawlaunch.available(driver._drv)
            args = rawlaunch.launch_args(cfg[0], fn.handle, plan.pointers._addr) if raw is not None else None
            plan.fast = (ctx, stream, cfg[0], fn.handle, plan.pointers._addr, rec, raw, args)
        return rec

    def _run_in_context(self, plan: "_Plan", stream: int) -> None:
        c = self.contract
        with driver.device_context(plan.device) as ctx:
            fkey = int(ctx) if ctx is not None else None
            fn = self._functions.get(fkey)
            if fn is None:
                fn = driver.load_module(self.cubin, self.manifest.cubin_sha256).function(c.entry)
                fn.require_dynamic_smem(c.dynamic_smem_bytes)
                if c.smem_carveout_percent is not None:
                    fn.prefer_smem_carveout(c.smem_carveout_percent)
                self._functions[fkey] = fn
            try:
                driver.launch(fn, plan.grid, c.block, c.cluster, c.dynamic_smem_bytes, stream, plan.pointers)
            except CudaError:
                # Start afresh next time (e.g. the context was destroyed and its handle reused).
                self._functions.pop(fkey, None)
                driver.forget_context(fkey)
                raise


def _current_context() -> int:
    """The calling thread's current context as an int (0 for none): one cuCtxGetCurrent."""
    d = driver._drv
    if d is None or not driver._initialized:
        driver.init()
        d = driver._drv
    res = d.cuCtxGetCurrent()
    if res[0] != driver._SUCCESS:
        raise CudaError("cuCtxGetCurrent", int(res[0]), driver.error_name(res[0]))
    return int(res[1]) if res[1] is not None else 0


_MAX_PLANS = 256
_U64 = struct.Struct("<Q")


@dataclass
class _Plan:
    """One checked launch: grid, device and the parameter bytes (the driver copies them at
    each launch, so they can be reused), and the LaunchRecord of each stream it ran on."""
    grid: tuple
    device: int
    buffers: list
    pointers: Any
    records: dict = field(default_factory=dict)
    bound: Any = None        # build_plan's: the Bound it was packed from (rewrite_pointers uses it)
    keep_arrays: bool = True
    fast: Any = None         # (context, stream, config, function, params, record, raw, raw args) of the last launch


def _view(a: DeviceArray) -> DeviceArray:
    """``a``'s pointer and layout without its owner (keeps nothing alive)."""
    return DeviceArray._checked(a.ptr, a.shape, a.strides, a.dtype, a.device, None, a.readonly)
