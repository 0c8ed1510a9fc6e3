"""Thin wrappers over ``cuda.bindings.driver``: errors, contexts, modules, launches.

cuda-bindings is imported on first use, so ``import cubinforge.runtime`` works without it
(and the first driver call says what to install). Every failing call raises ``CudaError``
with the driver's own CUresult name and the name of the call that failed.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from .errors import CudaError, DriverUnavailable, InputError

_drv = None
_SUCCESS = None      # CUresult.CUDA_SUCCESS, once the bindings are loaded
_lock = threading.RLock()
_initialized = False


def drv():
    """The ``cuda.bindings.driver`` module, imported on first use."""
    global _drv, _SUCCESS
    if _drv is None:
        try:
            from cuda.bindings import driver
        except ImportError as e:
            raise DriverUnavailable(
                "cubinforge.runtime needs the CUDA driver bindings: pip install 'cuda-bindings>=12.8' "
                "(or 'cubinforge[runtime]')") from e
        _SUCCESS = driver.CUresult.CUDA_SUCCESS
        _drv = driver
    return _drv


def error_name(err) -> str:
    d = drv()
    try:
        res, name = d.cuGetErrorName(err)
        if res == d.CUresult.CUDA_SUCCESS and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        pass
    return getattr(err, "name", str(err))


def call(name: str, *args, detail=""):
    """Call ``cuda.bindings.driver.<name>(*args)``; raise CudaError unless CUDA_SUCCESS.
    Returns the call's outputs: None, one value, or a tuple. ``detail`` (a string, or a
    callable returning one, built only on failure) is added to the error message."""
    d = _drv or drv()
    try:
        res = getattr(d, name)(*args)
    except (CudaError, InputError):
        raise
    except Exception as e:
        _unavailable(name, e)
        raise
    if type(res) is tuple:
        err = res[0]
        if err != _SUCCESS:
            raise CudaError(name, int(err), error_name(err), detail() if callable(detail) else detail)
        n = len(res)
        return None if n == 1 else res[1] if n == 2 else res[1:]
    if res != _SUCCESS:
        raise CudaError(name, int(res), error_name(res), detail() if callable(detail) else detail)
    return None


def _unavailable(name: str, e: Exception) -> None:
    # e.g. libcuda.so not found: cuda-pathfinder raises before any CUresult exists.
    if "cuda" in type(e).__module__ or "DynamicLib" in type(e).__name__:
        raise DriverUnavailable(f"{name}: the CUDA driver could not be loaded: {e}") from e


def init() -> None:
    """cuInit once per process."""
    global _initialized
    if not _initialized:
        with _lock:
            if not _initialized:
                call("cuInit", 0)
                _initialized = True


def device_count() -> int:
    init()
    return int(call("cuDeviceGetCount"))


_arch_cache: dict[int, str] = {}


def compute_capability(ordinal: int) -> tuple[int, int]:
    init()
    d = drv()
    dev = call("cuDeviceGet", ordinal)
    A = d.CUdevice_attribute
    major = call("cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    minor = call("cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    return int(major), int(minor)


_sm_cache: dict[int, int] = {}


def sm_count(ordinal: int) -> int:
    """Multiprocessors on the device: the `sm_count` symbol of launch contracts."""
    if ordinal not in _sm_cache:
        init()
        dev = call("cuDeviceGet", ordinal)
        _sm_cache[ordinal] = int(call("cuDeviceGetAttribute",
                                      drv().CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    return _sm_cache[ordinal]


def arch_name(major: int, minor: int) -> str:
    """9.0 -> 'sm_90a', 10.0 -> 'sm_100a': the arch-specific targets the cubins are built for
    (any cc >= 9 gets the 'a' suffix; older parts have no arch-specific features)."""
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def device_arch(ordinal: int) -> str:
    if ordinal not in _arch_cache:
        _arch_cache[ordinal] = arch_name(*compute_capability(ordinal))
    return _arch_cache[ordinal]


# --------------------------------------------------------------------------- contexts

_primary: dict[int, Any] = {}


def primary_context(ordinal: int):
    """The device's primary context, retained once and kept for the process (as the runtime
    API does), so torch/CuPy/JAX code on the same device shares it."""
    init()
    with _lock:
        if ordinal not in _primary:
            dev = call("cuDeviceGet", ordinal)
            _primary[ordinal] = call("cuDevicePrimaryCtxRetain", dev)
        return _primary[ordinal]


def current_context():
    """The calling thread's current context, or None."""
    if not _initialized:
        init()
    ctx = call("cuCtxGetCurrent")
    return ctx if ctx is not None and int(ctx) != 0 else None


# Device ordinal of each context seen current, by handle. A context's device never changes;
# like the module cache below, this assumes a live context's handle is not recycled for
# another context (forget_context() drops an entry, e.g. after a failed launch).
_ctx_devices: dict[int, int] = {}


def context_device(ctx) -> int:
    """Device ordinal of ``ctx``, which must be the current context (cuCtxGetDevice, cached)."""
    key = int(ctx)
    dev = _ctx_devices.get(key)
    if dev is None:
        dev = _ctx_devices[key] = int(call("cuCtxGetDevice"))
    return dev


def forget_context(ctx) -> None:
    """Drop the cached device of ``ctx`` (a handle or int): it is asked again next time."""
    _ctx_devices.pop(int(ctx) if ctx is not None else 0, None)


class device_context:
    """Make a context of device ``ordinal`` current for the block and yield it.

    The current context is reused when it belongs to that device; with none current the
    primary context is made current and left so (what cudaSetDevice would do); a context
    of another device is pushed over and popped afterwards. (A class rather than a
    generator: it sits on every launch.)"""

    __slots__ = ("ordinal", "_pushed")

    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self._pushed = False

    def __enter__(self):
        cur = current_context()
        if cur is not None and context_device(cur) == self.ordinal:
            return cur
        ctx = primary_context(self.ordinal)
        if cur is None:
            call("cuCtxSetCurrent", ctx)
            return ctx
        call("cuCtxPushCurrent", ctx)
        self._pushed = True
        return ctx

    def __exit__(self, *exc) -> None:
        if self._pushed:
            self._pushed = False
            call("cuCtxPopCurrent")


_ORDINAL_ATTR = None


def pointer_device(ptr: int) -> int:
    """Device ordinal of a device pointer (for arrays that did not say). One driver query
    per call: a pointer's device is never cached, since freed memory may come back at the
    same address on another device."""
    global _ORDINAL_ATTR
    if not _initialized:
        init()
    if _ORDINAL_ATTR is None:
        _ORDINAL_ATTR = drv().CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    try:
        res = _drv.cuPointerGetAttribute(_ORDINAL_ATTR, ptr)
    except Exception as e:
        _unavailable("cuPointerGetAttribute", e)
        raise
    if res[0] == _SUCCESS:
        return int(res[1])
    if current_context() is None:   # the query wants some context; take device 0's
        call("cuCtxSetCurrent", primary_context(0))
    try:
        return int(call("cuPointerGetAttribute", _ORDINAL_ATTR, ptr))
    except CudaError as e:
        raise InputError(f"0x{ptr:x} is not a CUDA device pointer ({e.name} from "
                         f"cuPointerGetAttribute)") from e


# --------------------------------------------------------------------------- streams

def resolve_stream(stream) -> tuple[int, Any]:
    """Return (CUstream handle as int, object to keep alive) for what callers pass as a stream:
    None (legacy default stream, 0), an int handle, a cuda-bindings CUstream, an object
    with ``__cuda_stream__`` (returns (version, handle)), torch's ``.cuda_stream``,
    CuPy's ``.ptr`` or cuda.core's ``.handle``."""
    if stream is None:
        return 0, None
    if isinstance(stream, bool):
        raise InputError(f"stream must be a stream object or handle, got {stream!r}")
    if isinstance(stream, int):
        return int(stream), None
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        val = proto() if callable(proto) else proto
        return int(val[1]), stream
    if type(stream).__name__ in ("CUstream", "cudaStream_t"):
        return int(stream), stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if h is not None and not callable(h):
            return resolve_stream(h)[0], stream
    raise InputError(f"cannot read a CUDA stream handle from {type(stream).__name__}: pass an int "
                     f"handle, a CUstream, or an object with __cuda_stream__, .cuda_stream, .ptr or .handle")


def order_streams(consumer: int, producer: int, device: int | None) -> None:
    """Make ``consumer`` wait for work already queued on ``producer`` (an event, no host sync)."""
    same_legacy = consumer in (0, 1) and producer in (0, 1)
    if consumer == producer or same_legacy:
        return
    d = drv()
    with device_context(device if device is not None else 0):
        ev = call("cuEventCreate", d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        try:
            call("cuEventRecord", ev, d.CUstream(producer))
            call("cuStreamWaitEvent", d.CUstream(consumer), ev, 0)
        finally:
            call("cuEventDestroy", ev)


# --------------------------------------------------------------------------- memory

class DeviceAllocation:
    """Owns one stream-ordered allocation (cuMemAllocAsync), freed on the same stream."""

    def __init__(self, nbytes: int, device: int, stream: int, stream_owner: Any = None):
        self.ptr, self.nbytes, self.device = 0, int(nbytes), device
        self._stream = stream
        self._stream_owner = stream_owner   # a stream object must outlive our free on it
        self._ctx = None
        if self.nbytes == 0:
            return
        with device_context(device) as ctx:
            self._ctx = ctx
            self.ptr = int(call("cuMemAllocAsync", self.nbytes, drv().CUstream(stream)))

    def close(self) -> None:
        if not self.ptr:
            return
        ptr, self.ptr = self.ptr, 0
        d = drv()
        # The caller's thread may have another (or no) context current: push ours.
        call("cuCtxPushCurrent", self._ctx)
        try:
            call("cuMemFreeAsync", d.CUdeviceptr(ptr), d.CUstream(self._stream))
        finally:
            call("cuCtxPopCurrent")

    def __del__(self):
        try:
            self.close()
        except Exception:   # interpreter shutdown or a destroyed context: nothing to free into
            pass


# --------------------------------------------------------------------------- modules

class Module:
    """Owns one CUmodule loaded from a cubin image into the current context."""

    def __init__(self, image: bytes, sha256: str):
        self.sha256 = sha256
        self.handle = call("cuModuleLoadData", image, detail=f"cubin {sha256[:12]}")
        self._functions: dict[str, Function] = {}

    def function(self, entry: str) -> "Function":
        f = self._functions.get(entry)
        if f is None:
            h = call("cuModuleGetFunction", self.handle, entry.encode(), detail=f"entry {entry!r}")
            f = self._functions[entry] = Function(self, entry, h)
        return f


class Function:
    """A kernel in a loaded module; remembers the dynamic smem limit it was given."""

    def __init__(self, module: Module, entry: str, handle):
        self.module, self.entry, self.handle = module, entry, handle
        self._max_dynamic_smem = -1

    def require_dynamic_smem(self, nbytes: int) -> None:
        # Kernels above 48 KiB must opt in, or the launch fails with CUDA_ERROR_INVALID_VALUE.
        if nbytes > self._max_dynamic_smem:
            d = drv()
            call("cuFuncSetAttribute", self.handle,
                 d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes),
                 detail=f"{self.entry}: {nbytes} B dynamic shared memory")
            self._max_dynamic_smem = nbytes

    def prefer_smem_carveout(self, percent: int) -> None:
        # A hint the driver may round; a kernel built for two CTAs an SM gets them only where
        # the split leaves room for both.
        d = drv()
        call("cuFuncSetAttribute", self.handle,
             d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, int(percent),
             detail=f"{self.entry}: a {percent}% shared-memory carveout")


_modules: dict[tuple[int, str], Module] = {}


def load_module(image: bytes, sha256: str) -> Module:
    """The module for this cubin in the current context, loaded once per (context, sha256)."""
    ctx = current_context()
    if ctx is None:
        raise CudaError("cuModuleLoadData", 201, "CUDA_ERROR_INVALID_CONTEXT", "no current context")
    key = (int(ctx), sha256)
    with _lock:
        m = _modules.get(key)
        if m is None:
            m = _modules[key] = Module(image, sha256)
        return m


# --------------------------------------------------------------------------- launch

def param_pointers(param_buffers) -> ctypes.Array:
    """kernelParams: an array of pointers to each parameter's bytes (which it keeps alive)."""
    ptrs = (ctypes.c_void_p * max(len(param_buffers), 1))(*[ctypes.addressof(b) for b in param_buffers])
    ptrs._buffers = list(param_buffers)
    ptrs._count = len(param_buffers)
    ptrs._addr = ctypes.addressof(ptrs) if param_buffers else None
    ptrs._configs = {}       # stream -> (CUlaunchConfig, grid, block, cluster, smem): see launch()
    return ptrs


def launch_config(grid, block, cluster, smem: int, stream: int):
    """A CUlaunchConfig for cuLaunchKernelEx (with the cluster attribute unless (1, 1, 1))."""
    d = _drv or drv()
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(x) for x in grid)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(x) for x in block)
    cfg.sharedMemBytes = int(smem)
    cfg.hStream = d.CUstream(stream)
    if tuple(cluster) != (1, 1, 1):
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = (int(x) for x in cluster)
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    else:
        cfg.numAttrs = 0
    return cfg


_MAX_CONFIGS = 8     # launch configs kept per parameter array (one per stream it ran on)


def launch(function: Function, grid, block, cluster, smem: int, stream: int, params) -> None:
    """cuLaunchKernelEx. ``params`` is a list of parameter buffers or ``param_pointers(...)``;
    the driver copies the parameter bytes at the call, so they may be reused afterwards.

    For a ``param_pointers`` array the launch config is built once per stream and kept on
    the array (reused while grid, block, cluster and smem are the same objects/values)."""
    ptrs = params if isinstance(params, ctypes.Array) else param_pointers(params)
    configs = getattr(ptrs, "_configs", None)
    ent = configs.get(stream) if configs is not None else None
    if (ent is not None and ent[1] is grid and ent[2] is block and ent[3] is cluster
            and ent[4] == smem):
        cfg = ent[0]
    else:
        cfg = launch_config(grid, block, cluster, smem, stream)
        if configs is not None:
            if len(configs) >= _MAX_CONFIGS:
                configs.clear()
            configs[stream] = (cfg, grid, block, cluster, smem)
    addr = getattr(ptrs, "_addr", 0)
    if addr == 0:            # an array built elsewhere
        addr = ctypes.addressof(ptrs) if ptrs._count else None
    d = _drv or drv()
    try:
        res = d.cuLaunchKernelEx(cfg, function.handle, addr, 0)
    except Exception as e:
        _unavailable("cuLaunchKernelEx", e)
        raise
    err = res[0] if type(res) is tuple else res
    if err != _SUCCESS:
        raise CudaError("cuLaunchKernelEx", int(err), error_name(err),
                        f"{function.entry} grid={tuple(grid)} block={tuple(block)} cluster={tuple(cluster)} "
                        f"smem={smem} stream={int(stream):#x}")
