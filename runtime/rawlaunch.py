"""libcuda's ``cuCtxGetCurrent`` and ``cuLaunchKernelEx`` called through ctypes, for the
replay of a launch whose parameters and config are already built (``Kernel.run``'s fast path).

The cuda-bindings wrappers cost more than the driver's own work at this size: a CUresult and
a CUcontext object built per query, and the launch's arguments converted per call. Here the
arguments are ctypes values built once per (plan, stream) (the CUlaunchConfig's own C struct
from ``getPtr()``, the function handle, the kernelParams array, NULL), the context is read
into one preallocated slot, and a call allocates nothing.

Used only where it is the same library and the same entry points the bindings use:
- libcuda.so.1 already loaded by the bindings (RTLD_NOLOAD: never a library of its own);
- the legacy default stream semantics (with ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM``
  the bindings call the ``_ptsz`` variants: then this stays off);
- the bindings' functions not replaced (a test's fake driver): ``available`` says no, and
  the bindings path runs as before.
``use_library(path)`` points it at another library with these two symbols (the CPU bench's
fake driver, bench/host_overhead.py --mock-raw) or turns it off (None).
"""

from __future__ import annotations

import ctypes
import os
import types

_VP = ctypes.c_void_p
_state: dict = {}       # "raw": _Raw | None once resolved; "forced": a use_library() choice


class _Raw:
    __slots__ = ("launch", "get_current", "slot", "slot_ref", "originals")

    def __init__(self, lib: ctypes.CDLL, originals: tuple):
        # No argtypes: every argument is passed as a ready ctypes object (c_void_p, byref,
        # None), which skips the per-call from_param conversion; both return CUresult (int).
        self.launch = lib.cuLaunchKernelEx
        self.get_current = lib.cuCtxGetCurrent
        self.slot = _VP()
        self.slot_ref = ctypes.byref(self.slot)
        self.originals = originals   # the bindings' functions when resolved (None: forced)

    def current(self) -> int:
        """The calling thread's current context as an int (0: none, or the query failed)."""
        if self.get_current(self.slot_ref):
            return 0
        return self.slot.value or 0


def _bindings_functions(d) -> tuple:
    return (getattr(d, "cuLaunchKernelEx", None), getattr(d, "cuCtxGetCurrent", None))


def available(d) -> _Raw | None:
    """The raw entry points, or None where the bindings path must run (see the module doc).
    ``d`` is the cuda.bindings.driver module in use."""
    if "forced" in _state:
        return _state["forced"]
    raw = _state.get("raw", False)
    if raw is False:
        raw = _state["raw"] = _resolve(d)
    if raw is not None and _bindings_functions(d) != raw.originals:
        return None          # replaced since (a fake driver): not the library they call
    return raw


def _resolve(d) -> _Raw | None:
    if os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0"):
        return None
    originals = _bindings_functions(d)
    if not all(f is not None and not isinstance(f, types.FunctionType) for f in originals):
        return None          # not the compiled bindings: a fake driver written in Python
    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
        return _Raw(lib, originals)
    except (OSError, AttributeError):
        return None


def use_library(path: str | None) -> None:
    """Use this library's two entry points (``path``), none at all (None), or the default
    resolution again (``"auto"``). For benches and tests."""
    _state.pop("forced", None)
    _state.pop("raw", None)
    if path == "auto":
        return
    _state["forced"] = None if path is None else _Raw(ctypes.CDLL(path), (None, None))


def launch_args(config, function_handle, params_addr) -> tuple:
    """cuLaunchKernelEx's four arguments as ctypes values (``config`` a cuda-bindings
    CUlaunchConfig, kept alive by the caller; its C struct is what the driver reads)."""
    return (_VP(int(config.getPtr())), _VP(int(function_handle)), _VP(params_addr), None)
