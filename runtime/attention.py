"""``flash_attn_func``: FlashAttention forward over the registry's ``fa3_fwd`` variants.

Layout as FlashAttention's: q (batch, seqlen_q, heads_q, head_dim), k and v (batch, seqlen_k,
heads_kv, head_dim); o like q; lse float32 (batch, heads_q, seqlen_q), natural log. The
inputs are checked here, before any variant is chosen, so errors speak of attention, not of
kernel parameters; the chosen variant's contract then checks what it alone requires.
"""

from __future__ import annotations

import threading
from typing import Any

from . import driver
from .arrays import DTYPE_BYTES, DeviceArray, OwnedDeviceArray, as_device_array
from .errors import InputError
from .launcher import Kernel, resolve_devices
from .registry_source import Manifest, Source, default_source, select
from .variants import VariantArgs, resolve as resolve_variant

FAMILY = "fa3_fwd"
# The forward family per arch: sm_100a's (fa4_fwd) has never run, so the launcher refuses it
# unless CUBINFORGE_ALLOW_UNVERIFIED=1 (registry_source.check_verified).
FAMILY_BY_ARCH = {"sm_90a": FAMILY, "sm_100a": "fa4_fwd"}
_kernels: dict[tuple, tuple] = {}    # (id(source), variant) -> (source, Kernel)
_chosen: dict[tuple, tuple] = {}     # (id(source), arch, dtype, head_dim, causal, sizes) -> (source, Kernel)
_kernels_lock = threading.Lock()
_MAX_CHOSEN = 1024


def select_attention_variant(dtype: str, head_dim: int, causal: bool = False, *, arch: str | None = None,
                             device: int = 0, source: Source | None = None,
                             sizes: dict | None = None, local: bool = False, softcap: bool = False,
                             learnable_sink: bool = False, head_dim_v: int | None = None) -> Manifest:
    """The manifest ``flash_attn_func`` would launch for these inputs (no launch, no GPU needed
    when ``arch`` is given). ``sizes`` (batch, seqlen_q, seqlen_k, heads_q, heads_kv) let the
    dispatcher's preferences choose among the variants that fit (runtime/dispatch.py).
    ``local``, ``softcap``, ``learnable_sink`` are the variant axes (runtime.variants.resolve
    derives them from flash_attn_func's arguments); ``head_dim_v`` is v's head dim (default:
    ``head_dim``)."""
    arch = arch or driver.device_arch(device)
    axes = {"arch": arch, "dtype": dtype, "head_dim": int(head_dim), "causal": bool(causal),
            "local": bool(local), "softcap": bool(softcap), "learnable_sink": bool(learnable_sink)}
    if head_dim_v is not None:
        axes["head_dim_v"] = int(head_dim_v)
    return select(FAMILY_BY_ARCH.get(arch, FAMILY), axes, source=source, sizes=sizes)


def _kernel(arch: str, dtype: str, head_dim: int, head_dim_v: int, va: VariantArgs, source: Source | None,
            sizes: tuple = ()) -> Kernel:
    # Keyed by the source's id; the entry holds the source, so the id cannot be reused by
    # another source while the entry exists. One Kernel (one loaded module) per variant,
    # however many problem shapes choose it.
    key = (id(source), arch, dtype, head_dim, head_dim_v, va.causal, va.local, va.softcap, va.learnable_sink, sizes)
    ent = _chosen.get(key)
    if ent is None or ent[0] is not source:
        with _kernels_lock:
            ent = _chosen.get(key)
            if ent is None or ent[0] is not source:
                m = select_attention_variant(dtype, head_dim, arch=arch, source=source, head_dim_v=head_dim_v,
                                             sizes=dict(zip(("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv"), sizes)),
                                             **va.axes)
                kent = _kernels.get((id(source), m.variant))
                if kent is None or kent[0] is not source:
                    kent = _kernels[(id(source), m.variant)] = (source, Kernel.from_manifest(m, source or default_source()))
                if len(_chosen) >= _MAX_CHOSEN:
                    _chosen.pop(next(iter(_chosen)))
                ent = _chosen[key] = (source, kent[1])
    return ent[1]


# Repeated flash_attn_func calls with out= and lse= given: (source, kernel, plan) by everything
# the call's checks and parameter bytes depend on (see flash_attn_func).
_calls: dict[tuple, tuple] = {}
_MAX_CALLS = 256


def clear_cache() -> None:
    """Forget chosen variants (e.g. after the registry changed) and checked calls."""
    with _kernels_lock:
        _kernels.clear()
        _chosen.clear()
        _calls.clear()


def _check_layout(name: str, a: DeviceArray, inner_contiguous: bool = True, align: int = 16) -> None:
    if inner_contiguous and a.strides[-1] != 1 and a.shape[-1] != 1:
        raise InputError(f"{name}: the last dimension (head_dim) must be contiguous (stride 1); "
                         f"strides are {a.strides} elements - call .contiguous() on it")
    if a.ptr % align:
        raise InputError(f"{name}: base pointer 0x{a.ptr:x} is not {align}-byte aligned "
                         f"(offset {a.ptr % align}); slice at a {align}-byte boundary or copy it")
    for i, s in enumerate(a.strides[:-1]):
        if (s * a.itemsize) % align:
            raise InputError(f"{name}: stride[{i}] is {s} elements = {s * a.itemsize} B, not a multiple "
                             f"of {align} B; pad that dimension or copy the tensor")


def _check_inputs(q: DeviceArray, k: DeviceArray, v: DeviceArray) -> None:
    for n, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 4:
            raise InputError(f"{n} must be (batch, seqlen, heads, head_dim); got {a.ndim} dims {a.shape}")
    if not q.dtype == k.dtype == v.dtype:
        raise InputError(f"q, k, v must share one dtype; got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if k.shape[:3] != v.shape[:3]:
        raise InputError(f"k and v must agree in (batch, seqlen_k, heads_kv); got k {k.shape}, v {v.shape} "
                         f"(v's head dim may differ: head_dim_v)")
    if q.shape[0] != k.shape[0]:
        raise InputError(f"batch differs: q.shape[0] = {q.shape[0]}, k.shape[0] = {k.shape[0]}")
    if q.shape[3] != k.shape[3]:
        raise InputError(f"head_dim differs: q.shape[3] = {q.shape[3]}, k.shape[3] = {k.shape[3]}")
    hq, hkv = q.shape[2], k.shape[2]
    if hkv == 0 or hq % hkv:
        raise InputError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv}) (GQA/MQA)")
    for n, a in (("q", q), ("k", k), ("v", v)):
        _check_layout(n, a)


def _padded_strides(shape, row_align_elems: int) -> tuple:
    """Row-major strides whose non-innermost entries are multiples of ``row_align_elems``."""
    strides, acc = [], 1
    for i, n in enumerate(reversed(shape)):
        if i > 0:
            acc = -(-acc // row_align_elems) * row_align_elems
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def flash_attn_func(q: Any, k: Any, v: Any, softmax_scale: float | None = None, causal: bool = False,
                    out: Any = None, lse: Any = None, stream: Any = None, window_size: Any = (-1, -1),
                    softcap: float = 0.0, learnable_sink: Any = None, *, source: Source | None = None,
                    q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
                    v_layout: str = "rowmajor"):
    """Attention forward: returns (out, lse).

    Arrays may be anything exporting ``__dlpack__`` or ``__cuda_array_interface__``, or
    DeviceArrays. Without ``out``/``lse``, they are allocated stream-ordered on ``stream`` and
    returned as arrays exporting both protocols; with them given, nothing is allocated and
    nothing synchronises (the call can be captured in a CUDA graph). ``causal`` masks are
    aligned bottom-right when seqlen_q != seqlen_k, and so is ``window_size=(left, right)``
    (-1 unbounded; causal is (-1, 0)). ``softcap`` > 0 computes softcap * tanh(s / softcap) on
    the scaled scores; ``learnable_sink`` (heads_q,) float32 adds one logit per head to each
    row's denominator and to LSE, as FA4 (O = 0, LSE = sink for a row that sees no key).

    With ``out`` and ``lse`` given, a call whose arrays (pointers, shapes, strides, dtypes,
    devices, read-only flags), ``causal``, ``softmax_scale``, ``window_size``, ``softcap``,
    ``learnable_sink`` and ``source`` equal an earlier
    call's launches that call's checked parameters at once; anything new is checked in full.

    FP8: e4m3 q/k/v (or any descale, or v_layout="colmajor") go to runtime/fp8.py
    ``flash_attn_fp8``: descales float32 (batch, heads_kv) or None, out bf16; FP8 takes none
    of window_size, softcap, learnable_sink yet."""
    if type(stream) is int:
        handle = stream
    else:
        handle, _keep = driver.resolve_stream(stream)
    # Wrap each array once (a DLPack capsule can be consumed only once).
    qa = q if isinstance(q, DeviceArray) else as_device_array(q, stream=handle, what="q")
    ka = k if isinstance(k, DeviceArray) else as_device_array(k, stream=handle, what="k")
    va = v if isinstance(v, DeviceArray) else as_device_array(v, stream=handle, what="v")
    oa = None if out is None else out if isinstance(out, DeviceArray) else as_device_array(out, stream=handle, what="o")
    la = None if lse is None else lse if isinstance(lse, DeviceArray) else as_device_array(lse, stream=handle, what="lse")
    if qa.dtype == "e4m3" or _fp8_args(q_descale, k_descale, v_descale, v_layout):
        if tuple(window_size) != (-1, -1) or softcap or learnable_sink is not None:
            raise InputError("FP8 (e4m3) attention does not take window_size, softcap or learnable_sink yet; "
                             "call it with their defaults, or use bf16/fp16 inputs for those variants")
        from .fp8 import flash_attn_fp8
        o8, l8 = flash_attn_fp8(qa, ka, va, softmax_scale, causal, oa, la, handle, q_descale=q_descale,
                                k_descale=k_descale, v_descale=v_descale, v_layout=v_layout, source=source)
        return (o8 if out is None else out), (l8 if lse is None else lse)
    sa = (None if learnable_sink is None else learnable_sink if isinstance(learnable_sink, DeviceArray)
          else as_device_array(learnable_sink, stream=handle, what="learnable_sink"))
    va_args = resolve_variant(causal, window_size, softcap, sa is not None)
    key = None
    if oa is not None and la is not None:
        try:
            scale = None if softmax_scale is None else float(softmax_scale)
        except (TypeError, ValueError, OverflowError):
            pass                 # the full path below says what is wrong
        else:
            key = (qa.ptr, qa.shape, qa.strides, qa.dtype, qa.device,
                   ka.ptr, ka.shape, ka.strides, ka.dtype, ka.device,
                   va.ptr, va.shape, va.strides, va.dtype, va.device,
                   oa.ptr, oa.shape, oa.strides, oa.dtype, oa.device, oa.readonly,
                   la.ptr, la.shape, la.strides, la.dtype, la.device, la.readonly,
                   bool(causal), scale, id(source), va_args.key,
                   None if sa is None else (sa.ptr, sa.shape, sa.strides, sa.dtype, sa.device))
            hit = _calls.get(key)
            if hit is not None and hit[0] is source:
                plan = hit[2]
                # Arrays that carry no device (__cuda_array_interface__, raw pointers) are
                # located again: the same address may now be memory of another device.
                if ((qa.device is not None or _on(qa, plan.device)) and (ka.device is not None or _on(ka, plan.device))
                        and (va.device is not None or _on(va, plan.device))
                        and (oa.device is not None or _on(oa, plan.device))
                        and (la.device is not None or _on(la, plan.device))
                        and (sa is None or sa.device is not None or _on(sa, plan.device))):
                    hit[1].run(plan, handle)
                    return out, lse
    arrays = {"q": qa, "k": ka, "v": va}
    if oa is not None:
        arrays["o"] = oa
    if la is not None:
        arrays["lse"] = la
    _check_inputs(qa, ka, va)
    b, sq, hq, d = qa.shape
    dv = va.shape[3]
    o_shape = (b, sq, hq, dv)
    if sa is not None:
        if sa.dtype != "f32" or sa.shape != (hq,):
            raise InputError(f"learnable_sink must be float32 (heads_q,) = ({hq},); got {sa.dtype} {sa.shape}")
        arrays["learnable_sink"] = sa
    if "o" in arrays:
        o = arrays["o"]
        if o.shape != o_shape or o.dtype != qa.dtype:
            raise InputError(f"out must be {o_shape} {qa.dtype} (q's shape with v's head dim); "
                             f"got {o.shape} {o.dtype}")
        _check_layout("out", o)
    if "lse" in arrays:
        la = arrays["lse"]
        if la.shape != (b, hq, sq) or la.dtype != "f32":
            raise InputError(f"lse must be float32 (batch, heads_q, seqlen_q) = {(b, hq, sq)}; "
                             f"got {la.dtype} {la.shape}")
    arrays, device = resolve_devices(arrays)

    kernel = _kernel(driver.device_arch(device), qa.dtype, d, dv, va_args, source, (b, sq, ka.shape[1], hq, ka.shape[2]))
    specs = kernel.contract.tensors
    if "o" not in arrays:
        align = specs["o"].align_bytes if "o" in specs else 16
        arrays["o"] = OwnedDeviceArray.empty(o_shape, qa.dtype, device, stream,
                                             _padded_strides(o_shape, max(1, align // qa.itemsize)))
        out = arrays["o"]
    if "lse" not in arrays and "lse" in specs:
        align = specs["lse"].align_bytes
        arrays["lse"] = OwnedDeviceArray.empty((b, hq, sq), "f32", device, stream,
                                               _padded_strides((b, hq, sq), max(1, align // DTYPE_BYTES["f32"])))
        lse = arrays["lse"]
    if "lse" in arrays and "lse" not in specs:
        raise InputError(f"{kernel.variant} does not write lse; call without lse=")
    arrays = {n: a for n, a in arrays.items() if n in specs}
    scalars = dict(va_args.scalars)
    if softmax_scale is not None:
        scalars["softmax_scale"] = float(softmax_scale)
    plan = kernel.plan(arrays, scalars, handle)
    kernel.run(plan, handle)
    if key is not None and len(arrays) == 5 + (sa is not None):
        with _kernels_lock:
            if len(_calls) >= _MAX_CALLS:
                _calls.pop(next(iter(_calls)))
            _calls[key] = (source, kernel, plan)
    return out, lse


def _fp8_args(q_descale, k_descale, v_descale, v_layout) -> bool:
    return q_descale is not None or k_descale is not None or v_descale is not None or v_layout != "rowmajor"


def _on(a: DeviceArray, device: int) -> bool:
    return not a.ptr or driver.pointer_device(a.ptr) == device
