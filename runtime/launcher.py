"""``Kernel``: one variant (manifest + cubin) launched from its contract, for any arrays.

``Kernel.launch`` is the doc's four launch steps and nothing else: no allocation, no
synchronisation, so it can be captured in a CUDA graph. Which variant ran, with which grid,
is kept per thread for ``last_launch()``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping

from . import driver
from .arrays import DeviceArray, as_device_array
from .contract import Bound, Contract, bind
from .errors import InputError
from .params import build_params
from .registry_source import Manifest, Source, default_source, fetch_cubin


@dataclass(frozen=True)
class LaunchRecord:
    variant: str
    grid: tuple
    block: tuple
    cluster: tuple
    dynamic_smem_bytes: int
    stream: int
    device: int


_local = threading.local()


def last_launch() -> LaunchRecord | None:
    """What the calling thread launched last (None before its first launch)."""
    return getattr(_local, "record", None)


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


class Kernel:
    """A registry variant ready to launch: its manifest and cubin bytes (verified)."""

    def __init__(self, manifest: Manifest, cubin: bytes):
        self.manifest = manifest
        self.cubin = cubin
        self._plans: dict[tuple, _Plan] = {}

    @classmethod
    def from_manifest(cls, manifest: Manifest, source: Source | None = None) -> "Kernel":
        return cls(manifest, fetch_cubin(manifest, source or default_source()))

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
        return bind(self.contract, arrays, scalars), device

    def launch(self, tensors: Mapping[str, Any], scalars: Mapping[str, Any] | None = None,
               stream=None) -> LaunchRecord:
        """Launch on ``stream`` (None = legacy default stream). ``tensors`` maps the contract's
        tensor names to DeviceArrays or DLPack / __cuda_array_interface__ objects."""
        c = self.contract
        handle, _keep = driver.resolve_stream(stream)
        arrays = {n: as_device_array(t, stream=handle, what=n) for n, t in tensors.items() if t is not None}
        scalars = dict(scalars or {})
        # Everything a launch needs follows from the arrays' (ptr, shape, strides, dtype) and the
        # scalars, so a repeated call (same buffers, as in a training loop) reuses its checked
        # parameter bytes instead of re-validating and re-encoding tensor maps.
        key = (tuple((n, a.ptr, a.shape, a.strides, a.dtype, a.device, a.readonly)
                     for n, a in sorted(arrays.items())), tuple(sorted(scalars.items())))
        try:
            plan = self._plans.get(key)
        except TypeError:            # an unhashable scalar: bind() will say what is wrong
            key, plan = None, None
        if plan is None:
            bound, device = self.bind(arrays, scalars, handle)
            arch = driver.device_arch(device)
            if arch != c.arch:
                raise InputError(f"{self.variant} is built for {c.arch}; device {device} is {arch}")
            with driver.device_context(device):
                buffers = build_params(bound)   # tensor maps need a current context
            plan = _Plan(bound.grid, device, buffers, driver.param_pointers(buffers))
            if key is not None:
                if len(self._plans) >= _MAX_PLANS:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[key] = plan
        with driver.device_context(plan.device):
            fn = driver.load_module(self.cubin, self.manifest.cubin_sha256).function(c.entry)
            fn.require_dynamic_smem(c.dynamic_smem_bytes)
            driver.launch(fn, plan.grid, c.block, c.cluster, c.dynamic_smem_bytes, handle, plan.pointers)
        rec = LaunchRecord(self.variant, plan.grid, c.block, c.cluster, c.dynamic_smem_bytes, handle, plan.device)
        _local.record = rec
        return rec


_MAX_PLANS = 256


@dataclass
class _Plan:
    """One checked launch: grid, device and the parameter bytes (the driver copies them at
    each launch, so they can be reused)."""
    grid: tuple
    device: int
    buffers: list
    pointers: Any
