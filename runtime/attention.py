"""``flash_attn_func``: FlashAttention forward over the registry's ``fa3_fwd`` variants.

Layout as FlashAttention's: q (batch, seqlen_q, heads_q, head_dim), k and v (batch, seqlen_k,
heads_kv, head_dim); o like q; lse float32 (batch, heads_q, seqlen_q), natural log. The
inputs are checked here, before any variant is chosen, so errors speak of attention, not of
kernel parameters; the chosen variant's contract then checks what it alone requires.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from . import driver, fill, restage
from .arrays import DTYPE_BYTES, DeviceArray, OwnedDeviceArray, _readers, as_device_array, wrap_arg
from .producers import order_for, torch_array, torch_fields
from .errors import InputError
from .launcher import Kernel, record_copies, record_no_launch, resolve_devices
from .launcher import record_as_last
from .dispatch import Choice, Problem
from .registry_source import Manifest, Source, choose, default_source
from .variants import VariantArgs, resolve as resolve_variant

FAMILY = "fa3_fwd"
# The forward family per arch: sm_100a's (fa4_fwd) has never run, so the launcher refuses it
# unless CUBINFORGE_ALLOW_UNVERIFIED=1 (registry_source.check_verified).
FAMILY_BY_ARCH = {"sm_90a": FAMILY, "sm_100a": "fa4_fwd"}
_NO_WINDOW = (-1, -1)   # flash_attn_func's default window, tested by identity on the hot path
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
    return choose_attention_variant(dtype, head_dim, causal, arch=arch, device=device, source=source, sizes=sizes,
                                    local=local, softcap=softcap, learnable_sink=learnable_sink,
                                    head_dim_v=head_dim_v).best


def choose_attention_variant(dtype: str, head_dim: int, causal: bool = False, *, arch: str | None = None,
                             device: int = 0, source: Source | None = None, sizes: dict | None = None,
                             local: bool = False, softcap: bool = False, learnable_sink: bool = False,
                             head_dim_v: int | None = None, forms: bool = True) -> Choice:
    """select_attention_variant's whole Choice: the variant, its launch parameters (num_splits
    for a split-KV form) and the reasons. With sizes including ``sm_count``, a decode-shaped
    problem may get a split-KV / pack-GQA form (dispatch rule ``decode-split-kv``);
    ``forms=False`` asks for the plain kernel (split_kv = pack_gqa = False)."""
    arch = arch or driver.device_arch(device)
    axes = {"arch": arch, "dtype": dtype, "head_dim": int(head_dim), "causal": bool(causal),
            "local": bool(local), "softcap": bool(softcap), "learnable_sink": bool(learnable_sink)}
    if head_dim_v is not None:
        axes["head_dim_v"] = int(head_dim_v)
    if not forms:
        axes.update(split_kv=False, pack_gqa=False)
    return choose(Problem(FAMILY_BY_ARCH.get(arch, FAMILY), axes, **(sizes or {})), source)


_SIZES = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "sm_count")


def _kernel(arch: str, dtype: str, head_dim: int, head_dim_v: int, va: VariantArgs, source: Source | None,
            sizes: tuple = (), forms: bool = True) -> tuple[Kernel, dict]:
    """(Kernel, launch parameters) the dispatcher chooses; ``sizes`` in _SIZES order."""
    # Keyed by the source's id; the entry holds the source, so the id cannot be reused by
    # another source while the entry exists. One Kernel (one loaded module) per variant,
    # however many problem shapes choose it.
    key = (id(source), arch, dtype, head_dim, head_dim_v, va.causal, va.local, va.softcap, va.learnable_sink, sizes,
           forms)
    ent = _chosen.get(key)
    if ent is None or ent[0] is not source:
        with _kernels_lock:
            ent = _chosen.get(key)
            if ent is None or ent[0] is not source:
                choice = choose_attention_variant(dtype, head_dim, arch=arch, source=source, head_dim_v=head_dim_v,
                                                  sizes=dict(zip(_SIZES, sizes)), forms=forms, **va.axes)
                m = choice.best
                kent = _kernels.get((id(source), m.variant))
                if kent is None or kent[0] is not source:
                    kent = _kernels[(id(source), m.variant)] = (source, Kernel.from_manifest(m, source or default_source()))
                if len(_chosen) >= _MAX_CHOSEN:
                    _chosen.pop(next(iter(_chosen)))
                ent = _chosen[key] = (source, kent[1], dict(choice.params))
    return ent[1], ent[2]


def is_decode_form(kernel: Kernel) -> bool:
    """A split-KV / pack-GQA form (launched through runtime/kvcache.py), not the plain kernel."""
    axes = kernel.manifest.axes
    return bool(axes.get("split_kv") or axes.get("pack_gqa"))


# Repeated flash_attn_func calls: a _Cached entry by everything the call's checks depend on
# but the pointers (see flash_attn_func).
_calls: dict[tuple, tuple] = {}
_MAX_CALLS = 256


def clear_cache() -> None:
    """Forget chosen variants (e.g. after the registry changed) and checked calls."""
    with _kernels_lock:
        _kernels.clear()
        _chosen.clear()
        _calls.clear()
        _torch_memo[0] = None


def _check_layout(name: str, a: DeviceArray, inner_contiguous: bool = True, align: int = 16) -> None:
    if inner_contiguous and a.strides[-1] != 1 and a.shape[-1] != 1:
        raise InputError(f"{name}: the last dimension (head_dim) must be contiguous (stride 1); "
                         f"strides are {a.strides} elements - call .contiguous() on it")
    if align == 1:
        return
    if a.ptr % align:
        raise InputError(f"{name}: base pointer 0x{a.ptr:x} is not {align}-byte aligned "
                         f"(offset {a.ptr % align}); slice at a {align}-byte boundary or copy it")
    for i, s in enumerate(a.strides[:-1]):
        if (s * a.itemsize) % align:
            raise InputError(f"{name}: stride[{i}] is {s} elements = {s * a.itemsize} B, not a multiple "
                             f"of {align} B; pad that dimension or copy the tensor")


def _check_inputs(q: DeviceArray, k: DeviceArray, v: DeviceArray) -> None:
    """Shapes and dtypes of q, k, v; their layouts only where they have elements to read."""
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
    if (hkv == 0 and hq != 0) or (hkv and hq % hkv):
        raise InputError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv}) (GQA/MQA)")
    if empty_reason(q.shape, k.shape) is None:
        for n, a in (("q", q), ("k", k), ("v", v)):
            _check_layout(n, a, align=1)     # alignment: copied if need be (restage.py)


def empty_reason(q_shape: tuple, k_shape: tuple) -> str | None:
    """Why these shapes need no kernel (docs/runtime-host-path.md), or None when they do."""
    b, sq, hq, _ = q_shape
    if b == 0 or sq == 0 or hq == 0:
        zero = [n for n, x in (("batch", b), ("seqlen_q", sq), ("heads_q", hq)) if x == 0]
        return f"{' and '.join(zero)} = 0: empty outputs, no kernel"
    if k_shape[1] == 0:
        return "seqlen_k = 0: O filled with 0 and LSE with -inf by memset, no kernel"
    return None


def _padded_strides(shape, row_align_elems: int) -> tuple:
    """Row-major strides whose non-innermost entries are multiples of ``row_align_elems``."""
    strides, acc = [], 1
    for i, n in enumerate(reversed(shape)):
        if i > 0:
            acc = -(-acc // row_align_elems) * row_align_elems
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


@dataclass
class Call:
    """One checked attention call: the kernel to run (None when the shapes need none), every
    array it touches (allocated outputs included), scalars, the device, what to hand back,
    and for a call with no kernel the fills that stand for it."""
    kernel: Kernel | None
    arrays: dict
    scalars: dict
    device: int
    out: Any
    lse: Any
    fills: list = field(default_factory=list)      # (DeviceArray, bit pattern)
    note: str = ""
    copies: dict = field(default_factory=dict)     # input name -> (the caller's array, our copy)
    # A decode-shaped call the dispatcher routed to the split-KV / pack-GQA forms: their
    # PreparedAttention (runtime/kvcache.py), which launches instead of ``kernel``.
    decode: Any = None


def prepare(qa: DeviceArray, ka: DeviceArray, va: DeviceArray, oa: DeviceArray | None, la: DeviceArray | None,
            out: Any, lse: Any, softmax_scale, causal: bool, stream: Any, source: Source | None,
            handle: int = 0, variant: VariantArgs | None = None, sink: DeviceArray | None = None,
            forms: bool = True) -> Call:
    """Everything of a flash_attn_func call up to the launch: checks, variant, allocations.
    ``variant``: the model-variant axes and scalars (runtime/variants.py); ``sink``: the
    learnable sink logits, (heads_q,) float32. ``forms=False`` keeps to the plain kernel
    (no decode routing)."""
    variant = variant or resolve_variant(causal, (-1, -1), 0.0, sink is not None)
    arrays = {"q": qa, "k": ka, "v": va}
    if oa is not None:
        arrays["o"] = oa
    if la is not None:
        arrays["lse"] = la
    _check_inputs(qa, ka, va)
    b, sq, hq, d = qa.shape
    dv = va.shape[3]
    o_shape = (b, sq, hq, dv)
    why = empty_reason(qa.shape, ka.shape)
    if sink is not None:
        if sink.dtype != "f32" or sink.shape != (hq,):
            raise InputError(f"learnable_sink must be float32 (heads_q,) = ({hq},); got {sink.dtype} {sink.shape}")
        arrays["learnable_sink"] = sink
    if oa is not None:
        if oa.shape != o_shape or oa.dtype != qa.dtype:
            raise InputError(f"out must be {o_shape} {qa.dtype} (q's shape with v's head dim); "
                             f"got {oa.shape} {oa.dtype}")
        if oa.size:
            _check_layout("out", oa)
    if la is not None:
        if la.shape != (b, hq, sq) or la.dtype != "f32":
            raise InputError(f"lse must be float32 (batch, heads_q, seqlen_q) = {(b, hq, sq)}; "
                             f"got {la.dtype} {la.shape}")
    if why is None:
        arrays, device = resolve_devices(arrays)
    else:
        arrays, device = _devices_of_empty(arrays)
    sms = driver.sm_count(device) if why is None and forms else None
    kernel, params = _kernel(driver.device_arch(device), qa.dtype, d, dv, variant, source,
                             (b, sq, ka.shape[1], hq, ka.shape[2], sms), forms)
    if why is None and is_decode_form(kernel):
        return _prepare_decode(kernel, params, arrays, softmax_scale, variant, stream, source, handle, device)
    specs = kernel.contract.tensors
    if "o" not in arrays:
        align = specs["o"].align_bytes if "o" in specs else 16
        arrays["o"] = out = OwnedDeviceArray.empty(o_shape, qa.dtype, device, stream,
                                                   _padded_strides(o_shape, max(1, align // qa.itemsize)))
    if "lse" not in arrays and "lse" in specs:
        align = specs["lse"].align_bytes
        arrays["lse"] = lse = OwnedDeviceArray.empty((b, hq, sq), "f32", device, stream,
                                                     _padded_strides((b, hq, sq), max(1, align // DTYPE_BYTES["f32"])))
    if "lse" in arrays and "lse" not in specs:
        raise InputError(f"{kernel.variant} does not write lse; call without lse=")
    scalars = dict(variant.scalars)
    if softmax_scale is not None:
        scalars["softmax_scale"] = float(softmax_scale)
    if why is None:
        copies = {}
        for n in ("q", "k", "v"):
            if restage.needs_copy(arrays[n], specs[n].align_bytes if n in specs else 16):
                copies[n] = (arrays[n], restage.compact_copy(arrays[n], device, stream, handle))
                arrays[n] = copies[n][1]
        return Call(kernel, {n: a for n, a in arrays.items() if n in specs}, scalars, device, out, lse,
                    copies=copies)
    for n in ("o", "lse"):
        a = arrays.get(n)
        if a is not None and a.readonly and a.size:
            raise InputError(f"{n} is read-only; {kernel.variant} writes it")
    fills = []
    if ka.shape[1] == 0 and arrays["o"].size:
        fills = [(arrays["o"], fill.ZERO)]
        if "lse" in arrays:
            fills.append((arrays["lse"], fill.NEG_INF_F32))
    return Call(None, arrays, scalars, device, out, lse, fills, why)


def _prepare_decode(kernel: Kernel, params: dict, arrays: dict, softmax_scale, variant: VariantArgs, stream: Any,
                    source: Source | None, handle: int, device: int) -> Call:
    """A decode-shaped call through flash_attn_with_kvcache's machinery: the dense k/v are a
    full cache (every sequence sees all seqlen_k keys), split ``params['num_splits']`` ways
    with the combine as the dispatcher chose (num_splits 1: the unsplit form)."""
    from .kvcache import prepare_kvcache

    copies = {}
    for n in ("q", "k", "v"):
        if restage.needs_copy(arrays[n], 16):
            copies[n] = (arrays[n], restage.compact_copy(arrays[n], device, stream, handle))
            arrays[n] = copies[n][1]
    axes = kernel.manifest.axes
    prepared = prepare_kvcache(arrays["q"], arrays["k"], arrays["v"], causal=variant.causal,
                               num_splits=int(params.get("num_splits", 1)) if axes.get("split_kv") else 1,
                               pack_gqa=bool(axes.get("pack_gqa")), out=arrays.get("o"), lse=arrays.get("lse"),
                               softmax_scale=softmax_scale, stream=stream, source=source, own_plans=True,
                               learnable_sink=arrays.get("learnable_sink"), variant=variant)
    return Call(kernel, {**arrays, "o": prepared.out, "lse": prepared.lse}, dict(variant.scalars), device,
                prepared.out, prepared.lse, copies=copies, decode=prepared)


def _devices_of_empty(arrays: dict) -> tuple[dict, int]:
    """resolve_devices for a call with empty arrays: those with no elements and no device say
    nothing (their pointer may be null); with none left, the current context's device."""
    known = {n: a for n, a in arrays.items() if a.size or a.device is not None}
    if known:
        located, device = resolve_devices(known)
        return {n: located.get(n, a) for n, a in arrays.items()}, device
    ctx = driver.current_context()
    return dict(arrays), driver.context_device(ctx) if ctx is not None else 0


def run_without_kernel(call: Call, handle: int) -> None:
    """What a call with no kernel does instead: its fills (stream-ordered), and a record."""
    for a, bits in call.fills:
        fill.fill(a, bits, handle)
    record_no_launch(call.note, handle, call.device)


def flash_attn_func(q: Any, k: Any, v: Any, softmax_scale: float | None = None, causal: bool = False,
                    out: Any = None, lse: Any = None, stream: Any = None, window_size: Any = _NO_WINDOW,
                    softcap: float = 0.0, learnable_sink: Any = None, *, source: Source | None = None,
                    q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
                    v_layout: str = "rowmajor", descale_block: Any = None):
    """Attention forward: returns (out, lse).

    Arrays may be anything exporting ``__dlpack__`` or ``__cuda_array_interface__``, or
    DeviceArrays. Without ``out``/``lse``, they are allocated stream-ordered on ``stream`` and
    returned as arrays exporting both protocols; with them given, nothing is allocated and
    nothing synchronises (the call can be captured in a CUDA graph). ``causal`` masks are
    aligned bottom-right when seqlen_q != seqlen_k, and so is ``window_size=(left, right)``
    (-1 unbounded; causal is (-1, 0)). ``softcap`` > 0 computes softcap * tanh(s / softcap) on
    the scaled scores; ``learnable_sink`` (heads_q,) float32 adds one logit per head to each
    row's denominator and to LSE, as FA4 (O = 0, LSE = sink for a row that sees no key).
    Empty inputs launch nothing: batch,
    seqlen_q or heads_q = 0 give empty outputs; seqlen_k = 0 gives O = 0, LSE = -inf.

    A call whose arrays' shapes, strides, dtypes, devices and read-only flags (and which
    outputs are given), ``causal``, ``softmax_scale`` and ``source`` equal an earlier call's
    reuses that call's checked parameters: only its pointers are checked (alignment, device)
    and rewritten where they changed; anything else new is checked in full.
    A caller that repeats one call every step can bind it once instead: ``plan_attention``.

    FP8: e4m3 q/k/v (or any descale, or v_layout="colmajor") go to runtime/fp8.py
    ``flash_attn_fp8``: descales float32 (batch, heads_kv) or None, out bf16; FP8 takes none
    of window_size, softcap, learnable_sink yet (nor plan_attention). Block descales from
    quantize_fp8(x, block=): ``descale_block=(BQ, BK)`` with q_descale (batch, heads_q,
    ceil(seqlen_q / BQ)) and k_descale (batch, heads_kv, ceil(seqlen_k / BK)); v_descale stays
    (batch, heads_kv) (flash_attn_fp8 says more)."""
    if type(stream) is int:
        handle = stream
    else:
        handle, _keep = driver.resolve_stream(stream)
    od: set = set()
    if (lse is not None and out is not None and _readers.get(type(q)) is torch_array and learnable_sink is None
            and window_size is _NO_WINDOW and type(softcap) is float and not softcap and type(causal) is bool
            and q_descale is None and k_descale is None and v_descale is None and v_layout == "rowmajor"
            and descale_block is None and _torch_hit(q, k, v, out, lse, handle, causal, softmax_scale, source, od)):
        return out, lse
    # Wrap each array once (a DLPack capsule can be consumed only once).
    qa = q if isinstance(q, DeviceArray) else wrap_arg(q, handle, "q", od)
    ka = k if isinstance(k, DeviceArray) else wrap_arg(k, handle, "k", od)
    va = v if isinstance(v, DeviceArray) else wrap_arg(v, handle, "v", od)
    oa = None if out is None else out if isinstance(out, DeviceArray) else wrap_arg(out, handle, "o", od)
    la = None if lse is None else lse if isinstance(lse, DeviceArray) else wrap_arg(lse, handle, "lse", od)
    if (qa.dtype == "e4m3" or q_descale is not None or k_descale is not None or v_descale is not None
            or v_layout != "rowmajor" or descale_block is not None):
        if tuple(window_size) != (-1, -1) or softcap or learnable_sink is not None:
            raise InputError("FP8 (e4m3) attention does not take window_size, softcap or learnable_sink yet; "
                             "call it with their defaults, or use bf16/fp16 inputs for those variants")
        from .fp8 import flash_attn_fp8
        o8, l8 = flash_attn_fp8(qa, ka, va, softmax_scale, causal, oa, la, handle, q_descale=q_descale,
                                k_descale=k_descale, v_descale=v_descale, v_layout=v_layout,
                                descale_block=descale_block, source=source)
        return (o8 if out is None else out), (l8 if lse is None else lse)
    sa = (None if learnable_sink is None else learnable_sink if isinstance(learnable_sink, DeviceArray)
          else as_device_array(learnable_sink, stream=handle, what="learnable_sink", ordered=od))
    if window_size is _NO_WINDOW and sa is None and type(softcap) is float and not softcap and type(causal) is bool:
        variant, vkey = _PLAIN[causal]      # the plain kernel's arguments: nothing to resolve
    else:
        variant = resolve_variant(causal, window_size, softcap, sa is not None)
        vkey = variant.key
    key = None
    try:
        scale = None if softmax_scale is None else float(softmax_scale)
    except (TypeError, ValueError, OverflowError):
        scale = None
        sa_ok = False            # the full path below says what is wrong
    else:
        sa_ok = sa is None       # calls with a sink take the full path (an entry holds 5 arrays)
    if sa_ok:
        # Everything the checks depend on except the pointers: those are checked for
        # alignment and device here and rewritten into the entry's own parameters. Outputs
        # not given are keyed as None: a hit allocates them as the first call did.
        key = (qa.shape, qa.strides, qa.dtype, qa.device, ka.shape, ka.strides, ka.dtype, ka.device,
               va.shape, va.strides, va.dtype, va.device,
               None if oa is None else (oa.shape, oa.strides, oa.dtype, oa.device, oa.readonly),
               None if la is None else (la.shape, la.strides, la.dtype, la.device, la.readonly),
               bool(causal), scale, id(source), vkey)
        hit = _calls.get(key)
        if hit is not None and hit.source is source:
            o2 = oa if oa is not None else hit.allocate("o", stream)
            l2 = la if la is not None else hit.allocate("lse", stream)
            if hit.launch((qa, ka, va, o2, l2), handle):
                return (out if oa is not None else o2), (lse if la is not None else l2)
    call = prepare(qa, ka, va, oa, la, out, lse, softmax_scale, causal, stream, source, handle, variant, sa)
    if call.kernel is None:
        run_without_kernel(call, handle)
        return call.out, call.lse
    if call.decode is not None:
        if not call.copies and key is not None:
            ent = _CachedDecode(source, call.decode, handle)
            with _kernels_lock:
                if len(_calls) >= _MAX_CALLS:
                    _calls.pop(next(iter(_calls)))
                _calls[key] = ent
        rec = _run_decode([k for k, _ in call.decode.launches], [p for _, p in call.decode.launches], handle)
        if call.copies:
            record_copies(rec, tuple(call.copies))
        return (out if oa is not None else call.out), (lse if la is not None else call.lse)
    kernel = call.kernel
    if call.copies:
        # Not cached: the plan holds the copies' layout, not the caller's.
        rec = kernel.run(kernel.plan(call.arrays, call.scalars, handle), handle)
        record_copies(rec, tuple(call.copies))
    elif key is not None and len(call.arrays) == 5:
        ent = _Cached(source, kernel, kernel.build_plan(call.arrays, call.scalars, handle, keep_arrays=False))
        with _kernels_lock:
            if len(_calls) >= _MAX_CALLS:
                _calls.pop(next(iter(_calls)))
            _calls[key] = ent
        ent.launch(tuple(call.arrays[n] for n in _ORDER), handle)
    else:
        kernel.run(kernel.plan(call.arrays, call.scalars, handle), handle)
    return call.out, call.lse


_PLAIN = {c: (v, v.key) for c in (False, True) for v in (resolve_variant(c),)}


def _torch_hit(q, k, v, out, lse, handle: int, causal: bool, softmax_scale, source, od: set) -> bool:
    """A repeated plain call with torch tensors (out and lse given) whose layout and pointers
    equal a cached call's: its fields are read from the tensors (producers.torch_fields) and
    the cached launch runs, with no DeviceArray made. False (nothing launched; ``od`` may say
    the stream is ordered) sends the call the full way: new pointers, another layout, a tensor
    the attribute path cannot read, a decode-routed entry."""
    tq = type(q)
    if type(k) is not tq or type(v) is not tq or type(out) is not tq or type(lse) is not tq:
        return False
    if softmax_scale is None:
        scale = None
    elif type(softmax_scale) is float:
        scale = softmax_scale
    else:
        return False
    ts = (q, k, v, out, lse)
    m = _torch_memo[0]
    if m is not None and m[0] is source and m[1] is causal and m[2] == scale:
        # The layout of the last call that hit: compared field by field, no key built or
        # hashed. Any difference (or a tensor the attribute path does not take) goes on to
        # the keyed lookup below, which reads every field again.
        dev, layouts = m[3], m[4]
        ptrs = []
        try:
            for t, (shape, strides, tdt) in zip(ts, layouts):
                if (t.requires_grad or t.is_neg() or t.get_device() != dev or t.dtype is not tdt
                        or t.stride() != strides or t.shape != shape):
                    break
                ptrs.append(t.data_ptr())
        except (RuntimeError, NotImplementedError):     # no storage / no strides: as torch_fields
            ptrs = ()
        if len(ptrs) == 5:
            hit = m[5]
            order_for(handle, dev, od)
            ptrs = tuple(ptrs)
            # The same replay as the keyed path's below, written out: a shared method measured
            # 570 instructions (1.4%) more per call under callgrind (session 6).
            with hit.lock:
                if ptrs == hit.ptrs or hit.seen(ptrs) is not None:
                    hit.kernel.run(hit.plan, handle)
                    return True
            return hit.launch(tuple(DeviceArray._trusted(p, shape, strides, hit.dtypes[i], dev, t)
                                    for i, (p, t, (shape, strides, _)) in enumerate(zip(ptrs, ts, layouts))),
                              handle)
    fq, fk, fv, fo, fl = torch_fields(q), torch_fields(k), torch_fields(v), torch_fields(out), torch_fields(lse)
    if fq is None or fk is None or fv is None or fo is None or fl is None:
        return False
    dev = fq[4]
    if fk[4] != dev or fv[4] != dev or fo[4] != dev or fl[4] != dev:
        return False
    # The same key flash_attn_func builds from the DeviceArrays of these tensors.
    key = (fq[1], fq[2], fq[3], dev, fk[1], fk[2], fk[3], dev, fv[1], fv[2], fv[3], dev,
           (fo[1], fo[2], fo[3], dev, False), (fl[1], fl[2], fl[3], dev, False), causal, scale, id(source),
           _PLAIN[causal][1])
    hit = _calls.get(key)
    if type(hit) is not _Cached or hit.source is not source:
        return False
    fs = (fq, fk, fv, fo, fl)
    # Remembered for the next call: its layout (torch's own shape, stride and dtype objects,
    # as read) and the entry. One slot: calls of one layout (every layer of a model) share it.
    _torch_memo[0] = (source, causal, scale, dev, tuple((f[1], f[2], t.dtype) for f, t in zip(fs, ts)), hit)
    order_for(handle, dev, od)
    ptrs = (fq[0], fk[0], fv[0], fo[0], fl[0])
    with hit.lock:
        if ptrs == hit.ptrs or hit.seen(ptrs) is not None:
            hit.kernel.run(hit.plan, handle)
            return True
    # Other buffers of this layout: the entry checks and rewrites their pointers.
    arrays = tuple(DeviceArray._trusted(f[0], f[1], f[2], f[3], dev, t) for f, t in zip(fs, ts))
    return hit.launch(arrays, handle)


# The last _torch_hit's (source, causal, scale, device, ((shape, strides, torch dtype) x 5),
# entry): a repeated call of that layout skips the keyed lookup. clear_cache forgets it.
_torch_memo: list = [None]


class _Cached:
    """A checked flash_attn_func call of one layout (outputs given or not), with parameters of
    its own: a later call of that layout only has its pointers checked (alignment, device)
    and rewritten where they changed. A lock keeps rewrite + launch of one entry together
    (the driver copies the parameter bytes at the launch, so after it they may change).

    Each set of pointers it meets (up to _MAX_POINTER_SETS) gets parameters of its own, kept
    by pointers: the layers of a model call one layout with their own buffers in turn, and
    each set seen before launches as it is, with nothing rewritten. Past that many sets the
    last plan is rewritten in place, as before."""

    __slots__ = ("source", "kernel", "plan", "align", "lock", "ptrs", "dtypes", "plans")

    def __init__(self, source, kernel: Kernel, plan):
        self.source, self.kernel, self.plan = source, kernel, plan
        self.dtypes = tuple(plan.bound.tensors[n].dtype for n in _ORDER)     # our names, as keyed
        specs = kernel.contract.tensors
        tma = {p.spec.get("tensor") for p in kernel.contract.params if p.kind == "tensormap"}
        self.align = tuple(max(specs[n].align_bytes, 16 if n in tma else 1) for n in _ORDER)
        self.lock = threading.Lock()
        self.ptrs = tuple(plan.bound.tensors[n].ptr for n in _ORDER)    # what the parameters hold
        self.plans = {self.ptrs: plan}     # pointers -> the plan whose parameters hold them

    def seen(self, ptrs: tuple):
        """The plan already holding these pointers (checked when first met), or None."""
        plan = self.plans.get(ptrs)
        if plan is not None:
            self.plan, self.ptrs = plan, ptrs
        return plan

    def allocate(self, name: str, stream: Any) -> OwnedDeviceArray:
        """A new output laid out as this entry's first call allocated it."""
        a = self.plan.bound.tensors[name]
        return OwnedDeviceArray.empty(a.shape, a.dtype, self.plan.device, stream, a.strides)

    def launch(self, arrays: tuple, handle: int) -> bool:
        """Launch over ``arrays`` (q, k, v, o, lse); False (nothing done) when a pointer is
        misaligned or on another device: the full path then says what is wrong."""
        plan = self.plan
        dev = plan.device
        q, k, v, o, lse = arrays
        ptrs = (q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr)
        # Arrays that carry no device (__cuda_array_interface__, raw pointers) are located on
        # every call: the same address may now be memory of another device.
        if (q.device is None or k.device is None or v.device is None or o.device is None
                or lse.device is None) and not all(a.device is not None or _on(a, dev) for a in arrays):
            return False
        with self.lock:
            if ptrs != self.ptrs and self.seen(ptrs) is None:
                if any(p % al for p, al in zip(ptrs, self.align)):
                    return False
                plan = self.plan                             # as of now, under the lock
                if len(self.plans) < _MAX_POINTER_SETS:
                    plan = self.kernel.clone_plan(plan)     # a plan of its own for these pointers
                else:
                    del self.plans[self.ptrs]               # full: this plan is pointed elsewhere
                self.kernel.rewrite_pointers(plan, {n: a if a.device is not None else a.with_device(dev)
                                                    for n, a in zip(_ORDER, arrays)})
                self.plans[ptrs] = self.plan = plan
                self.ptrs = ptrs
            self.kernel.run(self.plan, handle)
        return True


_ORDER = ("q", "k", "v", "o", "lse")
# Pointer sets with parameters of their own per _Cached entry (a few KB each): a 32-layer
# model's layers and then some.
_MAX_POINTER_SETS = 64


class _CachedDecode:
    """A checked decode-shaped flash_attn_func call of one layout routed to the split-KV forms:
    its launches (forward, combine) with parameters of their own, and the buffers only it uses
    (key counts, partial O and LSE). A later call of that layout on the same stream has q, k,
    v, o, lse pointers checked and rewritten, as _Cached; on another stream it takes the full
    path (the partial buffers are ordered on this one)."""

    __slots__ = ("source", "launches", "internal", "handle", "align", "lock", "ptrs", "layout", "device", "seen",
                 "record")

    def __init__(self, source, prepared, handle: int):
        self.source, self.handle = source, handle
        bufs = prepared.buffers
        self.internal = {n: a for n, a in bufs.items() if n not in _ORDER}   # ours: kept alive here
        self.launches = []
        align = dict.fromkeys(_ORDER, 1)
        for kernel, plan in prepared.launches:
            names = tuple(n for n in _ORDER if n in kernel.contract.tensors)
            tma = {p.spec.get("tensor") for p in kernel.contract.params if p.kind == "tensormap"}
            for n in names:
                align[n] = max(align[n], kernel.contract.tensors[n].align_bytes, 16 if n in tma else 1)
            self.launches.append((kernel, plan, names))
        self.align = tuple(align[n] for n in _ORDER)
        self.lock = threading.Lock()
        self.ptrs = tuple(bufs[n].ptr for n in _ORDER)
        self.layout = {n: (bufs[n].shape, bufs[n].dtype, bufs[n].strides) for n in ("o", "lse")}
        self.device = prepared.launches[-1][1].device
        self.seen = self.record = None

    def allocate(self, name: str, stream: Any) -> OwnedDeviceArray:
        shape, dtype, strides = self.layout[name]
        return OwnedDeviceArray.empty(shape, dtype, self.device, stream, strides)

    def launch(self, arrays: tuple, handle: int) -> bool:
        if handle != self.handle:
            return False
        dev = self.device
        if any(a.device is None for a in arrays) and not all(a.device is not None or _on(a, dev) for a in arrays):
            return False
        ptrs = tuple(a.ptr for a in arrays)
        with self.lock:
            if ptrs != self.ptrs:
                if any(p % al for p, al in zip(ptrs, self.align)):
                    return False
                by_name = {n: a if a.device is not None else a.with_device(dev) for n, a in zip(_ORDER, arrays)}
                for kernel, plan, names in self.launches:
                    kernel.rewrite_pointers(plan, {n: by_name[n] for n in names})
                self.ptrs = ptrs
            first = None
            for kernel, plan, _ in self.launches:
                rec = kernel.run(plan, handle)
                first = first or rec
            if first is not self.seen:      # the record names the forward form, not the combine
                self.seen, self.record = first, _decode_record(first, rec)
            record_as_last(self.record)
        return True


def _decode_record(first, last):
    if first is last:
        return first
    return replace(first, note=f"decode-shaped: the split-KV form, then {last.variant} reduces its splits")


def _run_decode(kernels, plans, handle):
    recs = [k.run(p, handle) for k, p in zip(kernels, plans)]
    return record_as_last(_decode_record(recs[0], recs[-1]))


def plan_attention(q: Any, k: Any, v: Any, softmax_scale: float | None = None, causal: bool = False,
                   out: Any = None, lse: Any = None, stream: Any = None, window_size: Any = _NO_WINDOW,
                   softcap: float = 0.0, learnable_sink: Any = None, *, source: Source | None = None):
    """Bind one flash_attn_func call once, for replay: returns an ``AttentionPlan``.

    Everything flash_attn_func checks is checked here, outputs are allocated here when not
    given, and the kernel parameters are packed here. ``plan.launch(stream)`` then launches
    those bytes (no checks, no allocation: a CUDA graph can capture it); ``plan.run(q, k, v,
    out=, lse=)`` launches it over other buffers of the same shapes, strides and dtypes,
    rewriting only the parameters that hold the pointers that changed."""
    from .plan import AttentionPlan
    if type(stream) is int:
        handle = stream
    else:
        handle, _keep = driver.resolve_stream(stream)
    od: set = set()
    qa = as_device_array(q, stream=handle, what="q", ordered=od)
    ka = as_device_array(k, stream=handle, what="k", ordered=od)
    va = as_device_array(v, stream=handle, what="v", ordered=od)
    oa = None if out is None else as_device_array(out, stream=handle, what="o", ordered=od)
    la = None if lse is None else as_device_array(lse, stream=handle, what="lse", ordered=od)
    if qa.dtype == "e4m3":
        raise InputError("plan_attention does not bind FP8 (e4m3) calls yet; call flash_attn_func with "
                         "v_layout='colmajor' (runtime/fp8.py) for them")
    sa = None if learnable_sink is None else as_device_array(learnable_sink, stream=handle, what="learnable_sink",
                                                              ordered=od)
    variant = resolve_variant(causal, window_size, softcap, sa is not None)
    # The plain kernel: a plan binds one launch. A decode step's plan (split forms + combine)
    # is prepare_kvcache's PreparedAttention.
    call = prepare(qa, ka, va, oa, la, out, lse, softmax_scale, causal, stream, source, handle, variant, sa,
                   forms=False)
    return AttentionPlan(call, handle, stream)


def _on(a: DeviceArray, device: int) -> bool:
    return not a.ptr or driver.pointer_device(a.ptr) == device
