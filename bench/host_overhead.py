"""Host-side cost of one attention call, per input kind, ours beside cuDNN and FA4.

    python -m cubinforge.bench.host_overhead --mock     # any machine: fake driver, fake arrays
    python -m cubinforge.bench.host_overhead            # a GPU: torch tensors (else CuPy)

With ``--mock`` the ``cuda.bindings.driver`` functions the launch path calls are replaced by
fakes that return CUDA_SUCCESS at once, the arrays are fakes over made-up pointers, and the
registry is a temporary CUBINFORGE_HOME holding the one real manifest and cubin the call
selects: what is measured is the runtime's own Python cost. On a GPU the same loops run
against the real driver with torch tensors on torch's current stream, and cuDNN SDPA and FA4
(where importable) are timed on the same tensors in the same process.

Kinds (ours, out= and lse= given unless said): ``prewrapped`` (DeviceArrays, wrapped once),
``cai`` (objects with only ``__cuda_array_interface__``), ``dlpack`` (objects with only
``__dlpack__`` / ``__dlpack_device__``: the capsule path; on a GPU they forward to torch
tensors), ``torch`` (torch tensors: read by attribute, runtime/producers.py; --mock uses a
stand-in tensor class), ``torch-alloc`` (torch tensors, no out/lse: outputs allocated per
call), ``plan`` (``plan_attention`` once, then ``plan.launch()``), ``plan-run``
(``plan.run(q, k, v, out=, lse=)`` with the same torch tensors: the rebind check),
``torch-swap`` / ``plan-swap`` (two sets of torch tensors of one layout in turn, so every
call has new pointers: flash_attn_func / plan.run rewriting them),
``miss`` (mock only: a new seqlen_q every call, each checked and encoded in full),
``parse`` / ``smv`` (no launch: our DLPack parser / cuda.core's StridedMemoryView reading
the five capsules, where cuda.core is importable), ``cudnn`` and ``fa4`` (GPU only: torch
SDPA on cuDNN, and flash_attn.cute's flash_attn_func, output allocated per call as they do).
``producer`` is what the DLPack producers alone spend exporting five capsules. Two rows tell
a slower host from slower code (issue 10: a run where torch's own export cost 1.7x the last
run's moved every row of ours with it): ``floor`` (GPU, or --mock --fake-libcuda) is the
plan's prebuilt ``cuLaunchKernelEx`` through ctypes alone, the driver's own cost per launch
and the bound under ``plan``; ``pyref`` is a fixed pure-Python loop that touches no code of
ours, the interpreter's speed on this host.

On a GPU the device is synchronised every ``SYNC_EVERY`` calls, outside the timed spans, so
the launch queue never fills: the figures are host time per call, not kernel time.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import ctypes
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

KINDS = ("prewrapped", "cai", "dlpack", "torch", "torch-swap", "torch-alloc", "plan", "plan-run", "plan-swap",
         "miss", "parse", "smv", "cudnn", "fa4", "floor", "pyref")
SWAP = {"torch-swap", "plan-swap"}
MOCK_ONLY, GPU_ONLY = {"miss"}, {"cudnn", "fa4"}
SYNC_EVERY = 64


# --------------------------------------------------------------------------- mocked driver

class MockDriver:
    """Fast fakes for the driver calls on the launch path; counts calls by name."""

    def __init__(self, arch=(9, 0), real=()):
        from cuda.bindings import driver as d
        self.d = d
        self.real = tuple(real)    # calls left to the bindings (bench --fake-libcuda)
        self.counts: collections.Counter = collections.Counter()
        self.saved: dict = {}
        self.arch = arch
        self.last_launch = None
        self.launch_error = None   # a CUresult for cuLaunchKernelEx to fail with
        self.pointer_device = 0    # what cuPointerGetAttribute(s) say a pointer's device is...
        self.pointer_devices: dict[int, int] = {}   # ...unless listed here by address
        self._next = 0x7000_0000_0000
        self.memsets: list = []    # (ptr, value, count) or (ptr, value, pitch B, width, height)
        self.copies: list = []     # (src, dst, bytes) or (src, dst, src pitch, dst pitch, width B, height)

    def _fakes(self):
        d, counts = self.d, self.counts
        OK = d.CUresult.CUDA_SUCCESS
        ctx, dev = d.CUcontext(0xC0C0), d.CUdevice(0)
        A = d.CUdevice_attribute
        P = d.CUpointer_attribute
        cc = {A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.arch[0],
              A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.arch[1],
              A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132}   # an H200's (split-KV plans read it)
        me = self

        def counted(name, fn):
            def f(*args):
                counts[name] += 1
                return fn(*args)
            f.__name__ = name
            return f

        def ptr_device(ptr):
            return me.pointer_devices.get(int(ptr), me.pointer_device)

        def ptr_attrs(n, attrs, ptr):
            vals = []
            for a in attrs:
                if a == P.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                    vals.append(ptr_device(ptr))
                elif a == P.CU_POINTER_ATTRIBUTE_CONTEXT:
                    vals.append(ctx)
                else:
                    vals.append(0)
            return OK, vals

        def launch(cfg, fn, params, extra):
            me.last_launch = (cfg, fn, params)
            return (me.launch_error or OK,)

        def alloc(nbytes, stream):
            me._next += (int(nbytes) + 0xFFFF) & ~0xFFFF
            return OK, d.CUdeviceptr(me._next)

        def encode(*args):
            # The fake descriptor holds the global address in its first 8 bytes (the real
            # layout is opaque), so tests can see which address a parameter points at.
            tm = d.CUtensorMap()
            ctypes.memmove(tm.getPtr(), ctypes.byref(ctypes.c_uint64(int(args[2]))), 8)
            return OK, tm

        def replace_address(tm, address):
            ctypes.memmove(tm.getPtr(), ctypes.byref(ctypes.c_uint64(int(address))), 8)
            return (OK,)

        def memset(ptr, value, n, stream):
            me.memsets.append((int(ptr), int(value), int(n)))
            return (OK,)

        def copy1d(dst, src, nbytes, stream):
            me.copies.append((int(src), int(dst), int(nbytes)))
            return (OK,)

        def copy2d(cp, stream):
            me.copies.append((int(cp.srcDevice), int(cp.dstDevice), int(cp.srcPitch), int(cp.dstPitch),
                              int(cp.WidthInBytes), int(cp.Height)))
            return (OK,)

        def memset2d(ptr, pitch, value, width, height, stream):
            me.memsets.append((int(ptr), int(value), int(pitch), int(width), int(height)))
            return (OK,)

        fakes = {
            "cuGetErrorName": lambda err: (OK, getattr(err, "name", str(err)).encode()),
            "cuInit": lambda flags: (OK,),
            "cuDeviceGetCount": lambda: (OK, 1),
            "cuDeviceGet": lambda i: (OK, d.CUdevice(i)),
            "cuDeviceGetAttribute": lambda attr, dv: (OK, cc.get(attr, 0)),
            "cuDevicePrimaryCtxRetain": lambda dv: (OK, ctx),
            "cuCtxGetCurrent": lambda: (OK, ctx),
            "cuCtxGetDevice": lambda: (OK, dev),
            "cuCtxSetCurrent": lambda c: (OK,),
            "cuCtxPushCurrent": lambda c: (OK,),
            "cuCtxPopCurrent": lambda: (OK, ctx),
            "cuCtxSynchronize": lambda: (OK,),
            "cuPointerGetAttribute": lambda attr, ptr: (OK, ptr_device(ptr)),
            "cuPointerGetAttributes": ptr_attrs,
            "cuModuleLoadData": lambda image: (OK, d.CUmodule(0x1000)),
            "cuModuleGetFunction": lambda mod, name: (OK, d.CUfunction(0x2000)),
            "cuFuncSetAttribute": lambda fn, attr, val: (OK,),
            "cuLaunchKernelEx": launch,
            "cuTensorMapEncodeTiled": encode,
            "cuTensorMapReplaceAddress": replace_address,
            "cuMemsetD8Async": memset, "cuMemsetD16Async": memset, "cuMemsetD32Async": memset,
            "cuMemcpyDtoDAsync": copy1d, "cuMemcpy2DAsync": copy2d,
            "cuMemsetD2D8Async": memset2d, "cuMemsetD2D16Async": memset2d, "cuMemsetD2D32Async": memset2d,
            "cuEventCreate": lambda flags: (OK, d.CUevent(0x3000)),
            "cuEventRecord": lambda ev, s: (OK,),
            "cuStreamWaitEvent": lambda s, ev, flags: (OK,),
            "cuEventDestroy": lambda ev: (OK,),
            "cuMemAllocAsync": alloc,
            "cuMemFreeAsync": lambda p, s: (OK,),
        }
        return {name: counted(name, fn) for name, fn in fakes.items()}

    def install(self) -> "MockDriver":
        reset_runtime_caches()
        for name, fn in self._fakes().items():
            if name in self.real:
                continue
            self.saved[name] = getattr(self.d, name)
            setattr(self.d, name, fn)
        return self

    def uninstall(self) -> None:
        for name, fn in self.saved.items():
            setattr(self.d, name, fn)
        self.saved.clear()
        reset_runtime_caches()

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()


def reset_runtime_caches() -> None:
    """Forget everything the runtime cached about devices, contexts and modules (so a real
    driver is not handed a fake's handles, and the other way round)."""
    from cubinforge.runtime import attention, driver
    attention.clear_cache()
    for name in ("_arch_cache", "_primary", "_modules", "_ctx_devices"):
        cache = getattr(driver, name, None)
        if cache is not None:
            cache.clear()
    driver._initialized = False


# --------------------------------------------------------------------------- fake arrays

_CAI_TYPESTR = {"fp16": ("<f2", None), "f32": ("<f4", None),
                "bf16": ("<V2", [("bf16", "<V2")])}
_ITEMSIZE = {"fp16": 2, "bf16": 2, "f32": 4}


def _compact(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


class FakeCAIArray:
    """Exports only ``__cuda_array_interface__`` (a new dict on each access, as CuPy does)."""

    def __init__(self, ptr, shape, dtype):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), dtype
        self._typestr, self._descr = _CAI_TYPESTR[dtype]
        self._strides = tuple(s * _ITEMSIZE[dtype] for s in _compact(self.shape))

    @property
    def __cuda_array_interface__(self):
        d = {"version": 3, "shape": self.shape, "typestr": self._typestr, "strides": self._strides,
             "data": (self.ptr, False), "stream": None}
        if self._descr is not None:
            d["descr"] = self._descr
        return d


class FakeDLPackArray:
    """Exports a fresh kDLCUDA DLPack 1.0 capsule per ``__dlpack__`` call over a made-up
    pointer, as cheaply as a C producer would: the DLManagedTensorVersioned is built once,
    with no deleter, and each call wraps it in a new capsule without a destructor."""

    def __init__(self, ptr, shape, dtype, device=0, strides=None):
        from cubinforge.runtime import arrays as A
        self.device = device
        n = len(shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = (ctypes.c_int64 * max(n, 1))(*(strides if strides is not None else _compact(shape)))
        mt = self._mt = A._DLManagedTensorVersioned()
        mt.version.major, mt.version.minor = 1, 0
        t = mt.dl_tensor
        t.data, t.device.device_type, t.device.device_id, t.ndim = ptr, A.KDL_CUDA, device, n
        t.dtype.code, t.dtype.bits = A._DTYPE_TO_DL[dtype]
        t.dtype.lanes = 1
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        self._addr = ctypes.addressof(mt)
        self._new = A._New

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._new(self._addr, b"dltensor_versioned", None)


class FakeTorchDtype:
    """Stands for a torch dtype: only its str() is read (as 'torch.bfloat16')."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


FAKE_TORCH_DTYPES = {"bf16": FakeTorchDtype("bfloat16"), "fp16": FakeTorchDtype("float16"),
                     "f32": FakeTorchDtype("float32")}


class FakeTorchTensor:
    """The attributes of a CUDA torch.Tensor the runtime reads (its class is named
    torch.Tensor, so the runtime takes its attribute path); ``__dlpack__`` (counted in
    ``exports``) exports a real capsule for the fallback path."""

    def __init__(self, ptr, shape, dtype, device=0, strides=None, requires_grad=False):
        self._ptr, self.shape, self._dt = ptr, tuple(shape), dtype
        self._strides = tuple(strides) if strides is not None else _compact(self.shape)
        self.dtype = FAKE_TORCH_DTYPES[dtype]
        self._device = device
        self.requires_grad = requires_grad
        self.exports = 0
        self._dl = None

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides

    def get_device(self):
        return self._device

    def is_neg(self):
        return False

    def __dlpack_device__(self):
        return (2, self._device) if self._device >= 0 else (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.exports += 1
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        if self._dl is None:    # the capsule points into it: it must live as long as the tensor
            self._dl = FakeDLPackArray(self._ptr, self.shape, self._dt, max(self._device, 0), self._strides)
        return self._dl.__dlpack__()


FakeTorchTensor.__module__, FakeTorchTensor.__qualname__ = "torch", "Tensor"


class fake_torch_module:
    """Context: a stand-in ``torch`` in sys.modules answering the current-stream question
    (``current`` maps device -> raw stream handle), for machines without torch."""

    def __init__(self, current=None):
        import types
        self.current = dict(current or {})
        self.asked = 0
        me = self

        def raw_stream(i):
            me.asked += 1
            return me.current.get(i, 0)
        self.module = types.ModuleType("torch")
        self.module._C = types.SimpleNamespace(_cuda_getCurrentRawStream=raw_stream)

    def __enter__(self):
        from cubinforge.runtime import producers
        if "torch" in sys.modules:
            raise RuntimeError("the real torch is loaded: use real tensors, not the fake module")
        sys.modules["torch"] = self.module
        producers._current_stream[0] = None
        return self

    def __exit__(self, *exc):
        from cubinforge.runtime import producers
        sys.modules.pop("torch", None)
        producers._current_stream[0] = None


def problem_shapes(b=1, sq=128, sk=128, hq=4, hkv=4, d=128):
    return {"q": (b, sq, hq, d), "k": (b, sk, hkv, d), "v": (b, sk, hkv, d),
            "o": (b, sq, hq, d), "lse": (b, hq, sq)}


def mock_inputs(kind: str, dtype: str = "fp16", shapes=None, base: int = 0x7F00_0000_0000):
    """q, k, v, o, lse of ``kind`` over made-up, well aligned pointers from ``base``."""
    from cubinforge.runtime import as_device_array
    shapes = shapes or problem_shapes()
    out = {}
    for i, (name, shape) in enumerate(shapes.items()):
        dt = "f32" if name == "lse" else dtype
        ptr = base + (i << 30)
        if kind == "cai":
            out[name] = FakeCAIArray(ptr, shape, dt)
        elif kind == "dlpack":
            out[name] = FakeDLPackArray(ptr, shape, dt)
        elif kind == "torch":
            out[name] = FakeTorchTensor(ptr, shape, dt)
        elif kind == "prewrapped":
            out[name] = as_device_array(FakeDLPackArray(ptr, shape, dt), what=name)
        else:
            raise ValueError(kind)
    return out


def temp_registry(src_home: Path, dtype: str, head_dim: int, causal: bool) -> Path:
    """A temporary CUBINFORGE_HOME holding the one fa3_fwd sm_90a variant flash_attn_func
    would pick for these axes in ``src_home`` (chosen by axes: names carry schedule suffixes)."""
    from cubinforge.runtime import LocalSource, select_attention_variant
    m = select_attention_variant(dtype, head_dim, causal, arch="sm_90a", source=LocalSource(src_home))
    src = src_home / "manifests" / f"{m.variant}.json"
    sha = m.cubin_sha256
    home = Path(tempfile.mkdtemp(prefix="cf-host-overhead-"))
    (home / "manifests").mkdir()
    shutil.copy(src, home / "manifests" / src.name)
    blob_dir = home / "blobs" / "sha256" / sha[:2]
    blob_dir.mkdir(parents=True)
    shutil.copy(src_home / "blobs" / "sha256" / sha[:2] / sha, blob_dir / sha)
    return home


# --------------------------------------------------------------------------- GPU inputs

class DLPackOnly:
    """Only the DLPack protocol of a framework tensor: the capsule path, not the attribute one."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, **kw):
        return self._t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


class CAIOnly:
    def __init__(self, t):
        self._t = t

    @property
    def __cuda_array_interface__(self):
        return self._t.__cuda_array_interface__


def gpu_tensors(dtype: str = "fp16", shapes=None):
    """Framework tensors (torch if importable, else CuPy), their current stream, the backend."""
    shapes = shapes or problem_shapes()
    try:
        import torch
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
        ts = {n: torch.randn(s, device="cuda").to(tdt["f32" if n == "lse" else dtype]) for n, s in shapes.items()}
        return ts, torch.cuda.current_stream().cuda_stream, "torch"
    except ImportError:
        import cupy
        cdt = {"fp16": cupy.float16, "f32": cupy.float32}
        ts = {n: cupy.zeros(s, dtype=cdt["f32" if n == "lse" else dtype]) for n, s in shapes.items()}
        return ts, cupy.cuda.get_current_stream().ptr, "cupy"


def gpu_inputs(kind: str, dtype: str = "fp16", shapes=None):
    """(inputs of ``kind``, stream, backend, the framework tensors behind them)."""
    from cubinforge.runtime import as_device_array
    ts, stream, backend = gpu_tensors(dtype, shapes)
    if kind in ("torch", "torch-alloc", "plan", "floor", "plan-run", "torch-swap", "plan-swap"):
        out = ts
    elif kind in ("dlpack", "parse", "smv"):
        out = {n: DLPackOnly(t) for n, t in ts.items()}
    elif kind == "cai":
        out = {n: CAIOnly(t) for n, t in ts.items()}
    elif kind == "prewrapped":
        out = {n: as_device_array(t, stream=stream, what=n) for n, t in ts.items()}
    else:
        raise ValueError(kind)
    return out, stream, backend, ts


def gpu_sync(backend: str) -> None:
    if backend == "torch":
        import torch
        torch.cuda.synchronize()
    else:
        import cupy
        cupy.cuda.Device().synchronize()


# --------------------------------------------------------------------------- timing

def time_calls(fn, iters: int, repeats: int, sync=None) -> dict:
    """µs per call: the median over ``repeats`` loops of ``iters`` calls, and the best loop.
    With ``sync``, it is called every SYNC_EVERY calls outside the timed spans."""
    per = []
    chunk = SYNC_EVERY if sync is not None else iters
    for _ in range(repeats):
        total, done = 0, 0
        while done < iters:
            n = min(chunk, iters - done)
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            total += time.perf_counter_ns() - t0
            done += n
            if sync is not None:
                sync()
        per.append(total / iters / 1e3)
    return {"median_us": statistics.median(per), "min_us": min(per)}


def _call(inputs, stream, causal, given=True):
    from cubinforge.runtime import flash_attn_func
    q, k, v, o, lse = (inputs[n] for n in ("q", "k", "v", "o", "lse"))
    if not given:
        def go():
            flash_attn_func(q, k, v, causal=causal, stream=stream)
        return go

    def go():
        flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, stream=stream)
    return go


def _plan_call(inputs, stream, causal, rebind: bool):
    from cubinforge.runtime import plan_attention
    q, k, v, o, lse = (inputs[n] for n in ("q", "k", "v", "o", "lse"))
    plan = plan_attention(q, k, v, causal=causal, out=o, lse=lse, stream=stream)
    if rebind:
        def go():
            plan.run(q, k, v, out=o, lse=lse)
        return go
    return plan.launch


def _swap_call(pair, stream, causal, plan: bool):
    """Two sets of buffers of one layout, taken in turn: every call gets new pointers."""
    from cubinforge.runtime import flash_attn_func, plan_attention
    sets = [tuple(t[n] for n in ("q", "k", "v", "o", "lse")) for t in pair]
    it = [0]
    if plan:
        p = plan_attention(*sets[0][:3], causal=causal, out=sets[0][3], lse=sets[0][4], stream=stream)

        def go():
            q, k, v, o, lse = sets[it[0] & 1]
            it[0] += 1
            p.run(q, k, v, out=o, lse=lse)
        return go

    def go():
        q, k, v, o, lse = sets[it[0] & 1]
        it[0] += 1
        flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, stream=stream)
    return go


def _parse_call(inputs, stream, smv: bool):
    """Read the five capsules, no launch: ours or cuda.core's StridedMemoryView."""
    objs = [inputs[n] for n in ("q", "k", "v", "o", "lse")]
    s = stream or 1
    if smv:
        try:
            from cuda.core.utils import StridedMemoryView
        except ImportError:
            from cuda.core.experimental.utils import StridedMemoryView

        def go():
            for x in objs:
                m = StridedMemoryView.from_dlpack(x, stream_ptr=s)
                m.ptr, m.shape, m.strides, m.device_id   # what the launch would need
        return go
    from cubinforge.runtime import as_device_array

    def go():
        for x in objs:
            as_device_array(x, stream=s)
    return go


def _miss_calls(dtype, head_dim, causal, n_shapes=300):
    """Pre-wrapped arrays whose seqlen_q changes on every call (more shapes than the caches
    hold): every call is checked and encoded in full (mock only)."""
    from cubinforge.runtime import flash_attn_func
    sets = [mock_inputs("prewrapped", dtype, problem_shapes(sq=64 + i, d=head_dim)) for i in range(n_shapes)]
    it = [0]

    def go():
        t = sets[it[0] % n_shapes]
        it[0] += 1
        flash_attn_func(t["q"], t["k"], t["v"], causal=causal, out=t["o"], lse=t["lse"], stream=0x5000)
    return go


def _anchor_call(kind: str, ts: dict, causal: bool):
    """cuDNN SDPA or FA4 on the same torch tensors (GPU only): (fn, context) as bench/anchors.py
    prepares them for the grid."""
    import contextlib
    import types

    from . import anchors
    q, k, v = ts["q"], ts["k"], ts["v"]
    cell = types.SimpleNamespace(causal=causal, seqlen_q=q.shape[1], seqlen_k=k.shape[1],
                                 heads=q.shape[2], heads_kv=k.shape[2])
    be = anchors.Sdpa("cudnn") if kind == "cudnn" else anchors.Fa4()
    with be.context():
        fn, _box = be.prepare(cell, q, k, v)
    ctx = be.context()
    stack = contextlib.ExitStack()
    stack.enter_context(ctx)
    return fn, stack


def _floor_call(inputs, stream, causal):
    """The plan's launch replay alone: its prebuilt cuLaunchKernelEx arguments through ctypes
    (runtime/rawlaunch.py), no context query, no Python of ours; or why it cannot run here."""
    go = _plan_call(inputs, stream, causal, False)
    go()
    go()                         # the second launch is the replay: the plan now holds its arguments
    fast = go.__self__._plan.fast
    if fast is None or fast[6] is None:
        return "needs the ctypes launch replay (--raw auto; with --mock, --fake-libcuda too)"
    launch, args = fast[6].launch, fast[7]
    plan = go.__self__

    def floor():
        # `args` are raw addresses into the plan (its launch config's C struct, its kernelParams
        # array): floor.plan holds the plan so they stay valid. Without it the plan was freed
        # on return and every launch read freed memory (check7/i2's and check6/h1's illegal
        # instruction: a garbage tensor map).
        if launch(*args):
            raise RuntimeError("cuLaunchKernelEx failed in the floor replay")
    floor.plan = plan
    return floor


_PYREF_KEYS = tuple(range(64))


def _pyref() -> None:
    """A fixed pure-Python workload (tuples, a dict, attribute calls): no code of ours."""
    d = {}
    for i in _PYREF_KEYS:
        d[(i, i + 1)] = str(i)
    sum(len(v) for v in d.values())


def _smv_available() -> str | None:
    try:
        try:
            from cuda.core.utils import StridedMemoryView  # noqa: F401
        except ImportError:
            from cuda.core.experimental.utils import StridedMemoryView  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "not here"
        return f"cuda.core not importable ({type(e).__name__}: {e})"
    return None


def _make(kind, mock, dtype, head_dim, causal, shapes, stack):
    """(go, sync, backend) for one kind, or a string saying why it cannot run here."""
    if kind in MOCK_ONLY and not mock:
        return "mock only"
    if kind in GPU_ONLY and mock:
        return "GPU only"
    if kind == "smv" and _smv_available():
        return _smv_available()
    if kind == "miss":
        return _miss_calls(dtype, head_dim, causal), None, "mock"
    if kind == "pyref":
        return _pyref, None, "none"
    if mock:
        src_kind = {"torch-alloc": "torch", "plan": "prewrapped", "floor": "prewrapped", "plan-run": "torch",
                    "torch-swap": "torch",
                    "plan-swap": "torch", "parse": "dlpack", "smv": "dlpack"}.get(kind, kind)
        if src_kind == "torch":
            if "torch" in sys.modules:
                return "the real torch is loaded: the stand-in tensors cannot run beside it"
            stack.enter_context(fake_torch_module(current={0: 0x5000}))   # launches on torch's stream
        inputs, stream, backend, ts = mock_inputs(src_kind, dtype, shapes), 0x5000, "mock", None
        if kind in SWAP:
            inputs = (inputs, mock_inputs(src_kind, dtype, shapes, base=0x7E00_0000_0000))
        sync = None
    else:
        if kind in ("cudnn", "fa4"):
            try:
                _i, stream, backend, ts = gpu_inputs("torch", dtype, shapes)
                if backend != "torch":
                    return "needs torch"
                fn, ctx = _anchor_call(kind, ts, causal)
            except Exception as e:  # noqa: BLE001 - an anchor that cannot run here is reported, not fatal
                return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            stack.enter_context(ctx)
            stack.callback(lambda keep=ts: None)
            return fn, (lambda: gpu_sync(backend)), backend
        inputs, stream, backend, ts = gpu_inputs(kind, dtype, shapes)
        if kind in ("torch", "torch-alloc", "plan", "floor", "plan-run", "torch-swap", "plan-swap") and backend != "torch":
            return "needs torch"
        if kind in SWAP:
            inputs = (inputs, gpu_inputs(kind, dtype, shapes)[0])
        sync = (lambda b=backend: gpu_sync(b))
    stack.callback(lambda keep=(inputs, ts): None)
    if kind in SWAP:
        return _swap_call(inputs, stream, causal, kind == "plan-swap"), sync, backend
    if kind in ("plan", "plan-run"):
        return _plan_call(inputs, stream, causal, kind == "plan-run"), sync, backend
    if kind == "floor":
        made = _floor_call(inputs, stream, causal)
        return made if isinstance(made, str) else (made, sync, backend)
    if kind in ("parse", "smv"):
        return _parse_call(inputs, stream, kind == "smv"), sync, backend
    return _call(inputs, stream, causal, given=kind != "torch-alloc"), sync, backend


# A libcuda.so.1 for --fake-libcuda: cuda-bindings resolves its entry points through
# cuGetProcAddress, and the launch replay's two (cuCtxGetCurrent, cuLaunchKernelEx) succeed at
# once, the context being the mock's (0xC0C0). With it the real cuda-bindings wrappers (and
# runtime/rawlaunch.py's ctypes calls) run on a CPU, against a driver that costs nothing.
_FAKE_LIBCUDA_C = r"""
#include <stddef.h>
#include <string.h>
typedef int CUresult;
typedef unsigned long long cuuint64_t;
CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = (void *)0xC0C0; return 0; }
CUresult cuLaunchKernelEx(const void *cfg, void *f, void **p, void **e) { (void)cfg; (void)f; (void)p; (void)e; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_UNKNOWN"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "unknown"; return 0; }
static const struct { const char *name; void *fn; } table[] = {
  {"cuInit", (void *)cuInit}, {"cuDriverGetVersion", (void *)cuDriverGetVersion},
  {"cuCtxGetCurrent", (void *)cuCtxGetCurrent}, {"cuLaunchKernelEx", (void *)cuLaunchKernelEx},
  {"cuGetErrorName", (void *)cuGetErrorName}, {"cuGetErrorString", (void *)cuGetErrorString}};
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status) {
  (void)ver; (void)flags;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (!strcmp(sym, table[i].name)) { *pfn = table[i].fn; if (status) *status = 0; return 0; }
  *pfn = NULL; if (status) *status = 1; return 500;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags) {
  return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
"""
REAL_UNDER_FAKE = ("cuCtxGetCurrent", "cuLaunchKernelEx")   # left to the bindings with --fake-libcuda


def load_fake_libcuda(out_dir: Path) -> None:
    """Build the fake libcuda.so.1 and load it before cuda-bindings opens the driver (dlopen
    then finds it by its soname). Refuses where a libcuda is already loaded."""
    import subprocess
    try:
        ctypes.CDLL("libcuda.so.1", mode=getattr(os, "RTLD_NOLOAD", 0))
        raise RuntimeError("--fake-libcuda: a libcuda.so.1 is already loaded in this process (a real driver?)")
    except OSError:
        pass
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("--fake-libcuda needs a C compiler (cc)")
    src, lib = out_dir / "fake_libcuda.c", out_dir / "libcuda.so.1"
    src.write_text(_FAKE_LIBCUDA_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", str(src), "-o", str(lib), "-Wl,-soname,libcuda.so.1"], check=True)
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)


def run(mock: bool, iters: int, repeats: int, dtype: str, causal: bool, head_dim: int,
        registry: Path, profile: str | None = None, kinds=KINDS, shapes=None, raw: str = "auto",
        fake_libcuda: bool = False) -> dict:
    """``raw``: the launch replay through libcuda by ctypes where the runtime would use it
    ("auto"), or never ("off": the cuda-bindings path, as before runtime/rawlaunch.py).
    ``fake_libcuda`` (with ``mock``): the replay's two driver calls go through the real
    cuda-bindings (or ctypes) into a fake libcuda that returns at once, not to Python fakes."""
    import contextlib
    from cubinforge.runtime import rawlaunch
    results = {}
    skipped = {}
    mockdrv = None
    home = None
    saved_env = {k: os.environ.get(k) for k in ("CUBINFORGE_HOME", "CUBINFORGE_REGISTRY_URL")}
    shapes = shapes or problem_shapes(d=head_dim)
    try:
        if mock:
            home = temp_registry(registry, dtype, head_dim, causal)
            os.environ["CUBINFORGE_HOME"] = str(home)
            os.environ.pop("CUBINFORGE_REGISTRY_URL", None)
            reset_runtime_caches()
            if fake_libcuda:
                load_fake_libcuda(home)
            mockdrv = MockDriver(real=REAL_UNDER_FAKE if fake_libcuda else ()).install()
        elif fake_libcuda:
            raise ValueError("--fake-libcuda is for --mock: on a GPU the real driver is used")
        if raw == "off":
            rawlaunch.use_library(None)
        if not mock and registry is not None and "CUBINFORGE_HOME" not in os.environ:
            os.environ["CUBINFORGE_HOME"] = str(registry)
        for kind in kinds:
            with contextlib.ExitStack() as stack:
                made = _make(kind, mock, dtype, head_dim, causal, shapes, stack)
                if isinstance(made, str):
                    skipped[kind] = made
                    continue
                go, sync, backend = made
                go()                                  # first call: select, load, build the plan
                if sync is not None:
                    sync()
                if mockdrv is not None:
                    mockdrv.counts.clear()
                n = min(iters, 200)
                for _ in range(n):
                    go()
                if sync is not None:
                    sync()
                if mockdrv is not None:
                    results[f"{kind}:driver_calls_per_call"] = {k: v / n for k, v in sorted(mockdrv.counts.items())}
                r = time_calls(go, iters, repeats, sync)
                r["backend"] = backend
                results[kind] = r
                if profile == kind:
                    pr = cProfile.Profile()
                    pr.enable()
                    for _ in range(iters):
                        go()
                    pr.disable()
                    if sync is not None:
                        sync()
                    pstats.Stats(pr, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        if "dlpack" in kinds:
            # What the producers alone spend: five __dlpack_device__ + __dlpack__ calls (the
            # capsules are dropped unconsumed), on the stream the launches use.
            if mock:
                prods, s = [FakeDLPackArray(0x7F00_0000_0000 + (i << 30), sh, "f32" if n == "lse" else dtype)
                            for i, (n, sh) in enumerate(shapes.items())], 0x5000
            else:
                prods, s, _b, _k = gpu_inputs("dlpack", dtype, shapes)
                prods = list(prods.values())

            def export():
                for p in prods:
                    p.__dlpack_device__()
                    # DLPack forbids stream 0: the legacy default stream is 1 (as the runtime sends).
                    try:
                        p.__dlpack__(stream=s or 1, max_version=(1, 0))
                    except TypeError:
                        p.__dlpack__(stream=s or 1)
            results["producer"] = time_calls(export, iters, repeats)
    finally:
        rawlaunch.use_library("auto")
        if mockdrv is not None:
            mockdrv.uninstall()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
    if skipped:
        results["skipped"] = skipped
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cubinforge.bench.host_overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mock", action="store_true", help="fake driver and arrays (no GPU needed)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--noncausal", action="store_true")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--registry", type=Path, default=REPO_ROOT / ".cubinforge",
                    help="CUBINFORGE_HOME to copy the manifest from (--mock) or to use")
    ap.add_argument("--profile", choices=KINDS, help="cProfile one kind's loop (to stderr)")
    ap.add_argument("--raw", default="auto", choices=("auto", "off"),
                    help="launch replay through libcuda by ctypes where it applies (auto), or never (off: "
                         "cuda-bindings, the path before runtime/rawlaunch.py)")
    ap.add_argument("--fake-libcuda", action="store_true",
                    help="with --mock: the replay's cuCtxGetCurrent / cuLaunchKernelEx run through the real "
                         "cuda-bindings (or ctypes) into a fake libcuda.so.1 built here")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--out", type=Path, help="also write the results, with commit and versions, to this JSON file")
    a = ap.parse_args(argv)
    kinds = tuple(k for k in a.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        ap.error(f"unknown kinds {unknown}; choose from {','.join(KINDS)}")
    res = run(a.mock, a.iters, a.repeats, a.dtype, not a.noncausal, a.head_dim, a.registry,
              a.profile, kinds, raw=a.raw, fake_libcuda=a.fake_libcuda)
    if a.out is not None:
        from . import env as E
        meta = {"command": " ".join(sys.argv), "commit": E.commit(), "versions": E.versions(),
                "mock": a.mock, "raw": a.raw, "fake_libcuda": a.fake_libcuda, "dtype": a.dtype, "head_dim": a.head_dim, "causal": not a.noncausal,
                "shapes": problem_shapes(d=a.head_dim), "sync_every": SYNC_EVERY}
        if not a.mock:
            meta["gpu"], meta["driver"] = E.gpu_and_driver()
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"meta": meta, "results": res}, indent=1) + "\n")
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    mode = ("mocked driver" + (" + fake libcuda" if a.fake_libcuda else "") if a.mock else "real driver") \
        + f", raw launch {a.raw}"
    print(f"host cost per attention call ({mode}, {a.dtype} hd{a.head_dim}, "
          f"{'noncausal' if a.noncausal else 'causal'}, shapes {problem_shapes(d=a.head_dim)['q']}):")
    for k in (*kinds, "producer"):
        if k in res:
            r = res[k]
            print(f"  {k:<12} {r['median_us']:8.2f} us/call  (best loop {r['min_us']:.2f})")
        calls = res.get(f"{k}:driver_calls_per_call")
        if calls:
            print("               driver calls per call: "
                  + ", ".join(f"{n} {c:g}" for n, c in calls.items()))
    for k, why in res.get("skipped", {}).items():
        print(f"  {k:<12} skipped: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
