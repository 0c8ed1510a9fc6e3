"""Inference attention: ``flash_attn_with_kvcache`` and ``flash_attn_combine`` (issue 11).

Torch-free like the rest of the runtime. The kernels are the registry's ``fa3_fwd``
variants with the inference axes (split_kv, pack_gqa, paged_kv) and the ``attn_combine``
family; which one runs, and with how many splits, is decided here from the problem and the
device's SM count (``plan_decode``: plain data, so a dispatcher elsewhere can own it later).

New k/v (batch, seqlen_new, heads_kv, d) are first written into the cache at cache_seqlens
by the ``kv_append`` family, and attention then sees cache_seqlens + seqlen_new keys.

Layouts as FlashAttention's: q (batch, seqlen_q, heads_q, d); a dense cache (batch,
seqlen_cache, heads_kv, d) or a paged one (num_pages, page_size, heads_kv, d) with
page_table int32 (batch, max_pages); cache_seqlens int32 (batch,) or an int; out like q;
lse float32 (batch, heads_q, seqlen_q). Causal is bottom-right aligned (query i of n sees
keys up to cache_seqlens - n + i). A sequence with no keys gets O = 0 and LSE = -inf.

What the kernels assume and the cheap checks cannot see (``check=True`` copies
cache_seqlens and page_table to the host and checks them, at the cost of a sync):
cache_seqlens[b] <= the cache's capacity for b; page_table[b, :ceil(cache_seqlens[b] /
page_size)] are pages in [0, num_pages); key rows of the cache past cache_seqlens[b] hold
finite values (they are read and masked, and 0 * NaN would spoil a row).

FP8 KV cache (issue 13): q, k_cache and v_cache all e4m3 (V row-major, as the cache holds
it: the kernel transposes it in shared memory), with ``q_descale`` / ``k_descale`` /
``v_descale`` float32 (batch, heads_kv) or None (1), FA3's: S = q k^T * q_descale *
k_descale * softmax_scale, O = P v * v_descale; out is bf16. Row b of each descale belongs
to row b of q, also under cache_batch_idx (FA3's indexing, not the cache row it reads).
Appending k/v into an e4m3 cache is refused (no e4m3 kv_append yet), and so are page sizes
that are not multiples of PAGE_CHUNK (no e4m3 kv_gather).

``cache_batch_idx`` int32 (batch,), FlashAttention's meaning (row b of q uses cache row
cache_batch_idx[b] of a dense cache with any number of rows), runs on the paged forms: the
dense cache is pages of seqlen_cache rows and cache_batch_idx the page table
(``batch_idx_as_page_table``; seqlen_cache must be a multiple of PAGE_CHUNK). Its values must
lie in [0, cache rows) (``check=True`` checks them); rows appended to must be distinct.

The model variants, FlashAttention's arguments with its defaults: ``window_size=(left,
right)`` (-1 unbounded; bottom-right aligned per sequence, as causal: query i of n sees keys
cache_seqlens - n + i - left .. + right; causal=True sets right = 0), ``softcap`` (> 0:
softcap * tanh(s / softcap)) and ``learnable_sink`` float32 (heads_q,) (one logit per head
in each row's denominator and LSE; a row that sees no key gets O = 0, LSE = sink). Under
split-KV only split 0 adds the sink, so the combine counts it once. An e4m3 cache takes
none of them yet (refused by name).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

from . import driver
from .arrays import DeviceArray, OwnedDeviceArray, as_device_array
from .errors import InputError
from .fp8 import OUT_DTYPE, _stack_descales
from .launcher import Kernel, resolve_devices
from .registry_source import Manifest, Source, VariantNotFound, choose, default_source, manifests
from .dispatch import Problem, rank
from .variants import VariantArgs, refuse_e4m3, resolve as resolve_variant
from .decode_plan import (  # noqa: F401  (re-exported: kvcache's public names)
    EFFICIENCY_SLACK, FILL_FRACTION, MAX_SPLITS, MIN_BLOCKS_PER_SPLIT, DecodePlan, num_splits_heuristic,
    pack_gqa_heuristic, plan_decode)

FAMILY = "fa3_fwd"
COMBINE_FAMILY = "attn_combine"
APPEND_FAMILY = "kv_append"
GATHER_FAMILY = "kv_gather"
PAGE_CHUNK = 16  # paged variants load pages in boxes of this many rows (config.PAGE_CHUNK)
FP8 = "e4m3"  # an FP8 cache: O comes out in fp8.OUT_DTYPE (bf16)


# --------------------------------------------------------------------------- variants

_lock = threading.Lock()
_kernels: dict[tuple, tuple] = {}


def _forms(source: Source | None) -> list[Manifest]:
    found, _ = manifests(source or default_source(), FAMILY)
    # varlen forms (paged or not) serve flash_attn_varlen_func only (runtime/varlen.py).
    return [m for m in found if any(m.axes.get(a) for a in ("split_kv", "pack_gqa", "paged_kv"))
            and not m.axes.get("varlen")]


MODEL_AXES = ("local", "softcap", "learnable_sink")  # runtime/variants.py's, as the manifests name them


def model_axes_match(m: Manifest, variant: VariantArgs | None) -> bool:
    """Whether a manifest's model-variant axes are the call's (none on without a variant)."""
    want = variant.axes if variant is not None else {}
    return all(bool(m.axes.get(a)) == bool(want.get(a, False)) for a in MODEL_AXES)


def nearest_error(what: str, axes: dict, source: Source | None, hint: str) -> VariantNotFound:
    """VariantNotFound for `what`, with the dispatcher's nearest variants to `axes` (one home
    for that list: registry_source.choose) and how to build the missing ones."""
    try:
        choose(Problem(FAMILY, axes), source)
    except VariantNotFound as e:
        return VariantNotFound(f"{what}; {hint}. {e}")
    return VariantNotFound(f"{what}; {hint}")


def select_kvcache_variant(arch: str, dtype: str, head_dim: int, causal: bool, *, split_kv: bool, pack_gqa: bool,
                           paged_kv: bool, source: Source | None = None, variant: VariantArgs | None = None) -> Manifest:
    """The registry's inference variant for these axes; among tiles, the smallest tile_m (decode
    tiles are mostly rows of few tokens). ``variant``: the model axes (window, softcap, sink),
    none when not given. VariantNotFound names what is there and the nearest."""
    want = {"arch": arch, "dtype": dtype, "head_dim": int(head_dim), "causal": bool(causal),
            "split_kv": split_kv, "pack_gqa": pack_gqa, "paged_kv": paged_kv, "varlen": False}
    cands = _forms(source)
    hits = [m for m in cands if all(m.axes.get(k) == v and type(m.axes.get(k)) is type(v) for k, v in want.items())
            and model_axes_match(m, variant)]
    if not hits:
        have = ", ".join(sorted(m.variant for m in cands)[:12]) or "none"
        raise nearest_error(f"no {FAMILY} variant with {want}{_model_text(variant)} in the registry "
                            f"(inference variants there: {have})",
                            {**want, **(variant.axes if variant else {})}, source,
                            "build them with `make kernels ARCH=sm90 SET=inference`")
    return min(hits, key=lambda m: (m.axes.get("tile_m", 0), m.variant))


def _model_text(variant: VariantArgs | None) -> str:
    on = [a for a in MODEL_AXES if variant is not None and variant.axes.get(a)]
    return f" and {', '.join(f'{a}=True' for a in on)}" if on else ""


def _kernel(manifest: Manifest, source: Source | None) -> Kernel:
    key = (id(source), manifest.variant)
    ent = _kernels.get(key)
    if ent is None or ent[0] is not source:
        with _lock:
            ent = _kernels.get(key)
            if ent is None or ent[0] is not source:
                ent = _kernels[key] = (source, Kernel.from_manifest(manifest, source or default_source()))
    return ent[1]


def _family_kernel(family: str, source: Source | None, **axes) -> Kernel:
    found, _ = manifests(source or default_source(), family)
    hits = [m for m in found if all(m.axes.get(k) == v and type(m.axes.get(k)) is type(v) for k, v in axes.items())]
    if not hits:
        raise VariantNotFound(f"no {family} variant with {axes} in the registry; "
                              f"build it with `make kernels ARCH=sm90 SET=inference`")
    return _kernel(min(hits, key=lambda m: m.variant), source)


def _combine_kernel(arch: str, dtype: str, head_dim: int, source: Source | None) -> Kernel:
    return _family_kernel(COMBINE_FAMILY, source, arch=arch, dtype=dtype, head_dim=head_dim)


def clear_cache() -> None:
    with _lock:
        _kernels.clear()


# --------------------------------------------------------------------------- helpers

def _wrap(x, handle, what) -> DeviceArray | None:
    if x is None:
        return None
    return x if isinstance(x, DeviceArray) else as_device_array(x, stream=handle, what=what)


def _check_inner(name: str, a: DeviceArray, align: int = 16) -> None:
    if a.strides[-1] != 1 and a.shape[-1] != 1:
        raise InputError(f"{name}: the last dimension must be contiguous (stride 1); strides are {a.strides}")
    if a.ptr % align or any((s * a.itemsize) % align for s in a.strides[:-1]):
        raise InputError(f"{name}: base pointer and strides must be {align}-byte aligned "
                         f"(ptr 0x{a.ptr:x}, strides {a.strides} elements)")


def _fill_i32(value: int, n: int, device: int, stream, handle: int) -> OwnedDeviceArray:
    a = OwnedDeviceArray.empty((n,), "i32", device, stream)
    with driver.device_context(device):
        d = driver.drv()
        driver.call("cuMemsetD32Async", d.CUdeviceptr(a.ptr), int(value) & 0xFFFFFFFF, n, d.CUstream(handle))
    return a


def _to_host_i32(a: DeviceArray, device: int, handle: int) -> list:
    """Copy an int32 array to the host (synchronises ``handle``): for check=True only."""
    n = 1
    for s in a.shape:
        n *= s
    if a.strides != tuple(_compact(a.shape)):
        raise InputError("check=True needs compact (row-major contiguous) cache_seqlens / page_table")
    buf = (ctypes.c_int32 * max(n, 1))()
    with driver.device_context(device):
        d = driver.drv()
        driver.call("cuStreamSynchronize", d.CUstream(handle))
        driver.call("cuMemcpyDtoH", ctypes.addressof(buf), a.ptr, 4 * n)
    return list(buf)[:n]


def batch_idx_as_page_table(bi: DeviceArray, batch: int, cache_shape: tuple) -> DeviceArray:
    """FlashAttention's cache_batch_idx (row b of q reads cache row cache_batch_idx[b]) over a
    dense cache (batch_cache, seqlen_cache, heads_kv, d), as the paged kernels' page table:
    the cache is num_pages = batch_cache pages of page_size = seqlen_cache rows, and the table
    is cache_batch_idx viewed as (batch, 1), no copy. A page of whole 128-key tiles takes one
    TMA box per tile (as a dense cache does); other multiples of PAGE_CHUNK take boxes of
    PAGE_CHUNK rows. kv_append writes row cache_batch_idx[b] through the same table."""
    if bi.dtype != "i32" or bi.ndim != 1 or bi.shape[0] != batch:
        raise InputError(f"cache_batch_idx must be int32 (batch={batch},); got {bi.dtype} {bi.shape}")
    s_cache = cache_shape[1]
    if s_cache % PAGE_CHUNK:
        raise InputError(f"cache_batch_idx needs the cache's seqlen ({s_cache}) to be a multiple of {PAGE_CHUNK}: "
                         f"the cache is read as pages of that many rows; allocate it with a padded seqlen")
    return DeviceArray(bi.ptr, (batch, 1), (bi.strides[0] if batch > 1 else 1, 1), "i32", bi.device,
                       owner=bi, readonly=True)


def check_sink(sink: DeviceArray | None, hq: int) -> None:
    """learnable_sink, where given: float32 (heads_q,), one logit per query head."""
    if sink is not None and (sink.dtype != "f32" or sink.shape != (hq,)):
        raise InputError(f"learnable_sink must be float32 (heads_q,) = ({hq},); got {sink.dtype} {sink.shape}")
    if sink is not None and hq > 1 and sink.strides[0] != 1:
        raise InputError(f"learnable_sink must be contiguous (stride 1); its stride is {sink.strides[0]}")


def _compact(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return reversed(out)


# --------------------------------------------------------------------------- API

def prepare_kvcache(q: Any, k_cache: Any, v_cache: Any, k: Any = None, v: Any = None,
                    cache_seqlens: Any = None, cache_batch_idx: Any = None, page_table: Any = None,
                    softmax_scale: float | None = None, causal: bool = True, num_splits: int = 0,
                    pack_gqa: bool | None = None, out: Any = None, lse: Any = None, stream: Any = None,
                    window_size: Any = (-1, -1), softcap: float = 0.0, learnable_sink: Any = None,
                    *, check: bool = False, source: Source | None = None,
                    own_plans: bool = False, variant: VariantArgs | None = None, q_descale: Any = None,
                    k_descale: Any = None, v_descale: Any = None) -> "PreparedAttention":
    """flash_attn_with_kvcache's checks, choice of variants and buffers, without launching:
    the plan a serving loop computes once and runs every step (``PreparedAttention.run``).
    ``own_plans``: parameters of its own per launch (not shared through the kernels' plan
    cache, and holding no caller array), for a caller that rewrites pointers later
    (Kernel.rewrite_pointers: flash_attn_func's decode route). ``variant``: window_size,
    softcap and causal already resolved (runtime/variants.py; the decode route's), in place
    of those arguments."""
    handle, _keep = (stream, None) if type(stream) is int else driver.resolve_stream(stream)

    def plan_of(kernel: Kernel, arrays: dict, scalars: dict):
        if own_plans:
            return kernel.build_plan(arrays, scalars, handle, keep_arrays=False)
        return kernel.plan(arrays, scalars, handle)

    if (k is None) != (v is None):
        raise InputError("k and v are appended together: pass both or neither")
    if k is not None and cache_seqlens is None:
        raise InputError("appending k/v needs cache_seqlens (where each sequence's new tokens go)")
    if cache_batch_idx is not None and page_table is not None:
        raise InputError("cache_batch_idx indexes the rows of a dense cache; with a page_table, "
                         "put that indirection in the page table instead")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise InputError(f"num_splits must be 0 (auto) or a positive int, got {num_splits!r}")
    if num_splits > MAX_SPLITS:
        raise InputError(f"num_splits {num_splits} is above {MAX_SPLITS}")
    qa = _wrap(q, handle, "q")
    sink = _wrap(learnable_sink, handle, "learnable_sink")
    if variant is None:
        variant = resolve_variant(causal, window_size, softcap, sink is not None)
    causal = variant.causal
    ka, va = _wrap(k_cache, handle, "k_cache"), _wrap(v_cache, handle, "v_cache")
    pt = _wrap(page_table, handle, "page_table")
    bi = _wrap(cache_batch_idx, handle, "cache_batch_idx")
    for n, a in (("q", qa), ("k_cache", ka), ("v_cache", va)):
        if a.ndim != 4:
            raise InputError(f"{n} must have 4 dimensions, got {a.shape}")
        _check_inner(n, a)
    if not qa.dtype == ka.dtype == va.dtype:
        raise InputError(f"q, k_cache, v_cache must share one dtype; got {qa.dtype}, {ka.dtype}, {va.dtype}"
                         + (" (an e4m3 cache takes e4m3 q: quantise it with quantize_fp8 and pass q_descale)"
                            if FP8 in (ka.dtype, va.dtype) else ""))
    fp8 = qa.dtype == FP8
    if fp8:
        refuse_e4m3(variant, "flash_attn_with_kvcache")
    descales = [(n, _wrap(x, handle, n)) for n, x in
                (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))]
    if not fp8 and any(a is not None for _, a in descales):
        raise InputError(f"q_descale / k_descale / v_descale scale e4m3 inputs; q and the cache are {qa.dtype}")
    o_dtype = OUT_DTYPE if fp8 else qa.dtype
    if ka.shape != va.shape:
        dv = "; v's head dim differs from k's (head_dim_v != head_dim), which only flash_attn_func's dense " \
             "forward and flash_attn_varlen_func's packed k/v take so far" if ka.shape[:-1] == va.shape[:-1] else ""
        raise InputError(f"k_cache and v_cache must have one shape; got {ka.shape} and {va.shape}{dv}")
    b, sq, hq, d = qa.shape
    hkv = ka.shape[2]
    if ka.shape[3] != d:
        raise InputError(f"head_dim differs: q has {d}, k_cache {ka.shape[3]}")
    if hkv == 0 or hq % hkv:
        raise InputError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv})")
    check_sink(sink, hq)
    if bi is not None:
        pt = batch_idx_as_page_table(bi, b, ka.shape)
    paged = pt is not None
    if paged:
        if pt.dtype != "i32" or pt.ndim != 2 or pt.shape[0] != b:
            raise InputError(f"page_table must be int32 (batch={b}, max_pages); got {pt.dtype} {pt.shape}")
        page_size = ka.shape[1]
        capacity = pt.shape[1] * page_size
    else:
        if ka.shape[0] != b:
            raise InputError(f"a dense cache has one row per batch: k_cache.shape[0] = {ka.shape[0]}, batch = {b}")
        capacity = ka.shape[1]

    kn, vn = _wrap(k, handle, "k"), _wrap(v, handle, "v")
    if fp8 and kn is not None:
        raise InputError("appending k/v into an e4m3 cache is not built (kv_append copies bf16/fp16): quantise the "
                         "new tokens, write them into k_cache / v_cache yourself, and call with k=None, v=None and "
                         "cache_seqlens counting them")
    if fp8 and paged and ka.shape[1] % PAGE_CHUNK:
        raise InputError(f"an e4m3 paged cache needs page_size a multiple of {PAGE_CHUNK} (got {ka.shape[1]}): "
                         f"there is no e4m3 gather for other page sizes")
    s_new = 0
    if kn is not None:
        if kn.ndim != 4 or kn.shape[0] != b or kn.shape[2:] != (hkv, d) or vn.shape != kn.shape:
            raise InputError(f"k and v to append must be (batch={b}, seqlen_new, heads_kv={hkv}, head_dim={d}) "
                             f"alike; got k {kn.shape}, v {vn.shape}")
        if kn.dtype != qa.dtype or vn.dtype != qa.dtype:
            raise InputError(f"k and v to append must be {qa.dtype} like q; got {kn.dtype}, {vn.dtype}")
        for n, a in (("k", kn), ("v", vn)):
            if a.strides[-1] != 1 and a.shape[-1] != 1:
                raise InputError(f"{n}: the last dimension must be contiguous (stride 1); strides are {a.strides}")
        s_new = kn.shape[1]
    arrays = {"q": qa, "k": ka, "v": va}
    if kn is not None:
        arrays["k_new"], arrays["v_new"] = kn, vn
    if paged:
        arrays["page_table"] = pt
    if out is not None:
        arrays["o"] = _wrap(out, handle, "out")
    if lse is not None:
        arrays["lse"] = _wrap(lse, handle, "lse")
    if sink is not None:
        arrays["learnable_sink"] = sink
    seq_int = None
    is_int = cache_seqlens is None or (hasattr(cache_seqlens, "__index__") and not hasattr(cache_seqlens, "__dlpack__")
                                       and not hasattr(cache_seqlens, "__cuda_array_interface__"))
    if is_int:
        if cache_seqlens is not None:
            cache_seqlens = cache_seqlens.__index__()
        seq_int = capacity if cache_seqlens is None else int(cache_seqlens)
        if not 0 <= seq_int <= capacity - s_new:
            raise InputError(f"cache_seqlens = {seq_int}{f' + {s_new} new tokens' if s_new else ''} is outside "
                             f"the cache's capacity 0..{capacity}")
    else:
        sa = _wrap(cache_seqlens, handle, "cache_seqlens")
        if sa.dtype != "i32" or sa.shape != (b,):
            raise InputError(f"cache_seqlens must be int32 (batch={b},); got {sa.dtype} {sa.shape}")
        arrays["seqused_k"] = sa
    arrays.update({n: a for n, a in descales if a is not None})  # located with the rest: one device
    arrays, device = resolve_devices(arrays)
    descales = [(n, arrays.pop(n) if a is not None else None) for n, a in descales]
    if "o" in arrays:
        o = arrays["o"]
        if o.shape != qa.shape or o.dtype != o_dtype:
            raise InputError(f"out must be {qa.shape} {o_dtype}{'' if fp8 else ' like q'}; got {o.shape} {o.dtype}")
    if "lse" in arrays:
        la = arrays["lse"]
        if la.shape != (b, hq, sq) or la.dtype != "f32":
            raise InputError(f"lse must be float32 (batch, heads_q, seqlen_q) = {(b, hq, sq)}; got {la.dtype} {la.shape}")
    if check and "seqused_k" in arrays:
        lens = _to_host_i32(arrays["seqused_k"], device, handle)
        bad = [(i, n) for i, n in enumerate(lens) if not 0 <= n <= capacity - s_new]
        if bad:
            raise InputError(f"cache_seqlens{f' + {s_new} new tokens' if s_new else ''} outside 0..{capacity} "
                             f"(the cache's capacity) at "
                             f"{', '.join(f'[{i}] = {n}' for i, n in bad[:8])}")
    if check and bi is not None:
        rows = _to_host_i32(bi, device, handle)
        bad = [(i, r) for i, r in enumerate(rows) if not 0 <= r < ka.shape[0]]
        if bad:
            raise InputError(f"cache_batch_idx holds rows outside the cache's 0..{ka.shape[0] - 1} at "
                             f"{', '.join(f'[{i}] = {r}' for i, r in bad[:8])}")
    elif check and paged:
        lens = _to_host_i32(arrays["seqused_k"], device, handle) if "seqused_k" in arrays else [seq_int] * b
        table = _to_host_i32(pt, device, handle)
        npages, mp = ka.shape[0], pt.shape[1]
        for i in range(b):
            for j in range(-(-(lens[i] + s_new) // ka.shape[1])):
                p = table[i * mp + j]
                if not 0 <= p < npages:
                    raise InputError(f"page_table[{i}, {j}] = {p} is not a page of the cache (0..{npages - 1}); "
                                     f"sequence {i} has {lens[i]} keys")
    if seq_int is not None:
        arrays["seqused_k"] = _fill_i32(seq_int, b, device, stream, handle)
    launches = []
    if kn is not None:
        # The companion kernel writes the new tokens and the key counts attention reads.
        app = _family_kernel(APPEND_FAMILY, source, arch=driver.device_arch(device), dtype=qa.dtype, head_dim=d,
                             paged_kv=paged)
        used = OwnedDeviceArray.empty((b,), "i32", device, stream)
        app_arrays = {"k": arrays.pop("k_new"), "v": arrays.pop("v_new"), "k_cache": arrays["k"], "v_cache": arrays["v"],
                      "cache_seqlens": arrays["seqused_k"], "seqused_k": used}
        if paged:
            app_arrays["page_table"] = arrays["page_table"]
        launches.append((app, plan_of(app, app_arrays, {})))
        arrays["cache_seqlens"] = arrays["seqused_k"]
        arrays["seqused_k"] = used
    if paged and ka.shape[1] % PAGE_CHUNK:
        # Pages the paged kernels do not take (not a multiple of PAGE_CHUNK rows, e.g. 1):
        # gather the used keys into a dense cache and attend to that. Correct, not fast.
        gat = _family_kernel(GATHER_FAMILY, source, arch=driver.device_arch(device), dtype=qa.dtype, head_dim=d)
        kd_ = OwnedDeviceArray.empty((b, capacity, hkv, d), qa.dtype, device, stream)
        vd_ = OwnedDeviceArray.empty((b, capacity, hkv, d), qa.dtype, device, stream)
        launches.append((gat, plan_of(gat, {"k_cache": arrays["k"], "v_cache": arrays["v"], "page_table": arrays.pop("page_table"),
                                            "seqused_k": arrays["seqused_k"], "k": kd_, "v": vd_}, {})))
        arrays["k"], arrays["v"], paged = kd_, vd_, False

    arch = driver.device_arch(device)
    sms = driver.sm_count(device)
    plan, fwd = _pick(arch, qa.dtype, d, causal, sq, pack_gqa, paged, num_splits, sms, b, hq, hkv, capacity, source,
                      variant)
    splits = plan.num_splits
    scalars = dict(variant.scalars)
    if softmax_scale is not None:
        scalars["softmax_scale"] = float(softmax_scale)
    if fp8:
        arrays["descale"] = _stack_descales(descales, b, hkv, device, stream, handle)
    if "o" not in arrays:
        out = arrays["o"] = OwnedDeviceArray.empty(qa.shape, o_dtype, device, stream)
    if "lse" not in arrays:
        lse = arrays["lse"] = OwnedDeviceArray.empty((b, hq, sq), "f32", device, stream)
    if not fwd.manifest.axes.get("split_kv"):
        kern = {n: arrays[n] for n in fwd.contract.tensors}
        return PreparedAttention(out, lse, plan, launches + [(fwd, plan_of(fwd, kern, scalars))], arrays)
    o_part = OwnedDeviceArray.empty((splits, b, sq, hq, d), "f32", device, stream)
    l_part = OwnedDeviceArray.empty((splits, b, hq, sq), "f32", device, stream)
    kern = {n: arrays[n] for n in fwd.contract.tensors if n not in ("o_partial", "lse_partial")}
    kern["o_partial"], kern["lse_partial"] = o_part, l_part
    comb = _combine_kernel(arch, o_dtype, d, source)
    parts = {"o_partial": o_part, "lse_partial": l_part, "o": arrays["o"], "lse": arrays["lse"]}
    return PreparedAttention(out, lse, plan, launches + [(fwd, plan_of(fwd, kern, scalars)),
                                                         (comb, plan_of(comb, parts, {}))], {**arrays, **parts})


@dataclass
class PreparedAttention:
    """A checked kvcache call: its launches with their parameter bytes, and the buffers they
    use (kept alive here). ``run`` launches them and nothing else (no allocation, no sync),
    so a serving loop can prepare once per batch shape and buffers, and a CUDA graph can
    capture ``run``. Its buffers were allocated (and constant key counts written) on the
    stream it was prepared on: run it there, or order that stream first. ``kernels`` names
    the variants, in launch order."""
    out: Any
    lse: Any
    plan: DecodePlan
    launches: list
    buffers: dict

    @property
    def kernels(self) -> list[str]:
        return [k.variant for k, _ in self.launches]

    def run(self, stream: Any = None):
        handle = stream if type(stream) is int else driver.resolve_stream(stream)[0]
        for kernel, plan in self.launches:
            kernel.run(plan, handle)
        return self.out, self.lse


def flash_attn_with_kvcache(q: Any, k_cache: Any, v_cache: Any, k: Any = None, v: Any = None,
                            cache_seqlens: Any = None, cache_batch_idx: Any = None, page_table: Any = None,
                            softmax_scale: float | None = None, causal: bool = True, num_splits: int = 0,
                            pack_gqa: bool | None = None, out: Any = None, lse: Any = None, stream: Any = None,
                            window_size: Any = (-1, -1), softcap: float = 0.0, learnable_sink: Any = None,
                            *, check: bool = False, source: Source | None = None, q_descale: Any = None,
                            k_descale: Any = None, v_descale: Any = None):
    """Attention of q against a (dense or paged) KV cache: returns (out, lse).

    ``num_splits`` 0 picks the split count (``plan_decode``), 1 never splits, n > 1 splits
    the key range n ways and reduces with the combine kernel. ``pack_gqa`` None picks.
    ``window_size``, ``softcap``, ``learnable_sink``: FlashAttention's (module docstring).
    ``check=True`` also checks cache_seqlens and page_table on the host (a sync).
    An e4m3 q and cache take ``q_descale`` / ``k_descale`` / ``v_descale`` float32
    (batch, heads_kv) (row b: q's row b) and give out in bf16 (the module's docstring); not
    with the model variants yet."""
    handle = stream if type(stream) is int else driver.resolve_stream(stream)[0]
    prepared = prepare_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, page_table,
                               softmax_scale, causal, num_splits, pack_gqa, out, lse, stream,
                               window_size, softcap, learnable_sink, check=check, source=source,
                               q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return prepared.run(handle)


def _pick(arch, dtype, d, causal, sq, pack_gqa, paged, num_splits, sms, b, hq, hkv, capacity, source,
          variant: VariantArgs | None = None):
    """(plan, forward Kernel). The unsplit form serves num_splits == 1 where it is built, the
    split form (with the combine) everything else; among the tiles of a form the dispatcher's
    rules rank (runtime/dispatch.py, `decode-two-ctas`), then the name, as the C++ loader's
    choose_kvcache does. The plan takes its tiles from the unsplit choice (the split one where
    only it is built or its tile_m is smaller). Auto pack_gqa falls back to the other form
    when one is not built; causal is moot for a single query token, so either form serves
    it. The model axes (``variant``) must match exactly."""
    forms = [m for m in _forms(source) if m.axes.get("arch") == arch and m.axes.get("dtype") == dtype
             and m.axes.get("head_dim") == d and bool(m.axes.get("paged_kv")) == paged
             and model_axes_match(m, variant)]
    auto_pack = pack_gqa_heuristic(sq, hq, hkv, 128)
    packs = [bool(pack_gqa)] if pack_gqa is not None else [auto_pack, not auto_pack]
    if hq == hkv and pack_gqa is None:
        packs = [False, True]  # nothing to pack: the plain rows are the same rows
    sizes = dict(batch=b, seqlen_q=sq, seqlen_k=capacity, heads_q=hq, heads_kv=hkv, sm_count=sms)
    model = variant.axes if variant is not None else {}

    def best(c, pack, split):
        fit = [m for m in forms if m.axes.get("causal") == c and bool(m.axes.get("pack_gqa")) == pack
               and bool(m.axes.get("split_kv")) == split]
        axes = {"arch": arch, "dtype": dtype, "head_dim": d, "causal": c, "paged_kv": paged, "pack_gqa": pack,
                "split_kv": split, **{a: bool(model.get(a, False)) for a in MODEL_AXES}}
        ranked = rank(Problem(FAMILY, axes, **sizes), fit)
        return ranked.best if ranked else None

    for c in ([bool(causal), not causal] if sq == 1 else [bool(causal)]):
        for pack in packs:
            unsplit, split = best(c, pack, False), best(c, pack, True)
            if unsplit is None and split is None:
                continue
            tiles = unsplit or split
            if unsplit and split and split.axes["tile_m"] < unsplit.axes["tile_m"]:
                tiles = split
            plan = plan_decode(b, sq, hq, hkv, capacity, sms, tiles.axes["tile_m"], tiles.axes["tile_n"], pack,
                               num_splits)
            if plan.num_splits == 1 and unsplit:
                return plan, _kernel(unsplit, source)
            if split:
                return plan, _kernel(split, source)
    have = ", ".join(sorted(m.variant for m in forms)[:12]) or "none"
    want = {"arch": arch, "dtype": dtype, "head_dim": d, "causal": bool(causal), "paged_kv": paged,
            "split_kv": num_splits != 1, "pack_gqa": bool(pack_gqa if pack_gqa is not None else auto_pack),
            **(variant.axes if variant is not None else {})}
    raise nearest_error(
        f"no {FAMILY} inference variant for {arch} {dtype} hd{d} causal={causal} paged_kv={paged} "
        f"pack_gqa={pack_gqa} num_splits={num_splits}{_model_text(variant)} (built for this dtype/hd"
        f"{' and these model axes' if _model_text(variant) else ''}: {have})", want, source,
        "build them with `make kernels ARCH=sm90 SET=inference`")


def flash_attn_combine(out_partial: Any, lse_partial: Any, out: Any = None, lse: Any = None,
                       out_dtype: str = "bf16", stream: Any = None, *, source: Source | None = None):
    """Reduce split partials: out_partial float32 (num_splits, batch, seqlen_q, heads_q, d),
    lse_partial float32 (num_splits, batch, heads_q, seqlen_q) -> (out, lse), out in
    ``out_dtype`` (batch, seqlen_q, heads_q, d), lse (batch, heads_q, seqlen_q). A split with
    LSE -inf counts for nothing (its O is not read)."""
    handle, _keep = (stream, None) if type(stream) is int else driver.resolve_stream(stream)
    op, lp = _wrap(out_partial, handle, "out_partial"), _wrap(lse_partial, handle, "lse_partial")
    if op.dtype != "f32" or op.ndim != 5:
        raise InputError(f"out_partial must be float32 (num_splits, batch, seqlen_q, heads, d); got {op.dtype} {op.shape}")
    s, b, sq, h, d = op.shape
    if lp.dtype != "f32" or lp.shape != (s, b, h, sq):
        raise InputError(f"lse_partial must be float32 {(s, b, h, sq)}; got {lp.dtype} {lp.shape}")
    arrays = {"o_partial": op, "lse_partial": lp}
    if out is not None:
        arrays["o"] = _wrap(out, handle, "out")
        out_dtype = arrays["o"].dtype
    if lse is not None:
        arrays["lse"] = _wrap(lse, handle, "lse")
    arrays, device = resolve_devices(arrays)
    comb = _combine_kernel(driver.device_arch(device), out_dtype, d, source)
    if "o" not in arrays:
        out = arrays["o"] = OwnedDeviceArray.empty((b, sq, h, d), out_dtype, device, stream)
    if "lse" not in arrays:
        lse = arrays["lse"] = OwnedDeviceArray.empty((b, h, sq), "f32", device, stream)
    comb.run(comb.plan(arrays, {}, handle), handle)
    return out, lse
