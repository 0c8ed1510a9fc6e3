"""Variable-length attention: ``flash_attn_varlen_func`` (issue 11), torch-free.

Layouts as FlashAttention's: q (total_q, heads_q, d) with the sequences packed one after
another, sequence b at rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1]; k and v packed the same
way with cu_seqlens_k, or, with ``page_table`` int32 (batch, max_pages), a paged cache
(num_pages, page_size, heads_kv, d) whose sequence b has seqused_k[b] keys (or
cu_seqlens_k[b + 1] - cu_seqlens_k[b]). ``seqused_q`` / ``seqused_k`` int32 (batch,), where
given, say how many of a sequence's rows count (the rest of its slot is neither read as a
key nor written). out like q; lse float32 (heads_q, total_q). v may have a head dim of its
own (head_dim_v, DeepSeek MLA prefill's (192, 128)), packed k and v only: out is then
(total_q, heads_q, head_dim_v). Causal is bottom-right per
sequence (query i of n sees keys j <= i + seqlen_k - n); a query row that sees no key gets
O = 0 and LSE = -inf. ``max_seqlen_q`` / ``max_seqlen_k`` are hints; the kernel does not
need them (its grid is bounded by total_q and the batch size: fa3_fwd_sm90/schedule.py).
``window_size`` (-1 unbounded; bottom-right per sequence like causal: query i of n sees keys
i + seqlen_k - n - left .. + right), ``softcap`` and ``learnable_sink`` (heads_q,) float32 are
FlashAttention's, as in flash_attn_func (runtime/variants.py).

The kernels are the registry's ``fa3_fwd`` variants with varlen=True (and paged_kv for a
paged cache); page sizes that are not a multiple of 16 (e.g. 1) go through ``kv_gather``
into a packed copy and the packed form: correct, not fast.

FP8 (issue 13): q, k and v e4m3 (V row-major like k, transposed in the kernel's shared
memory) with ``q_descale`` / ``k_descale`` / ``v_descale`` float32 (batch, heads_kv) or None
(1), row b for sequence b (FA3's); out is bf16. Page sizes that are not a multiple of 16
are refused for e4m3 (no e4m3 gather), and so are the model variants (window_size, softcap,
learnable_sink) with e4m3 inputs.

What is checked where: shapes, dtypes, lengths and alignment always (before the launch);
the values of cu_seqlens / seqused / page_table when they are host sequences (lists,
tuples, numpy arrays; they are then copied to the device) or with ``check=True`` (a copy to
the host, at the cost of a sync). Unchecked, the kernel assumes: cu_seqlens non-decreasing
from >= 0 with cu_seqlens_q[-1] <= total_q (and _k <= total_k); seqused within the slot; the
page_table entries a sequence uses are pages of the cache; rows of k/v it may read past a
sequence's keys (the rest of a tile: other sequences' rows or unused cache rows) are finite.
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import driver
from .arrays import DeviceArray, OwnedDeviceArray
from .axes import axis_value
from .errors import InputError
from .fp8 import OUT_DTYPE, _stack_descales
from .kvcache import (FAMILY, FP8, GATHER_FAMILY, PAGE_CHUNK, DecodePlan, PreparedAttention, _check_inner, _fill_i32,
                      _family_kernel, _kernel, _model_text, _to_host_i32, _wrap, check_sink, model_axes_match,
                      nearest_error)
from .variants import VariantArgs, refuse_e4m3, resolve as resolve_variant
from .launcher import Kernel, resolve_devices
from .registry_source import Manifest, Source, VariantNotFound, default_source, manifests


# --------------------------------------------------------------------------- host checks (pure)

def check_seqlens(cu_q: list, cu_k: list | None, used_q: list | None, used_k: list | None, total_q: int,
                  total_k: int | None, *, paged: bool = False, table: list | None = None, max_pages: int = 0,
                  page_size: int = 0, num_pages: int = 0) -> None:
    """The values the kernel trusts, checked on the host: raises InputError naming the first
    bad entry and what would be right. None: not known on the host (not checked). Paged: k is
    the cache, so seqused_k is not bounded by cu_seqlens_k but by the page table."""
    batch = len(cu_q) - 1

    def cu(name, c, total, rows):
        if c[0] < 0:
            raise InputError(f"{name}[0] = {c[0]} is negative; cu_seqlens start at 0 (offsets into {rows})")
        for i in range(batch):
            if c[i + 1] < c[i]:
                raise InputError(f"{name} must be non-decreasing: {name}[{i + 1}] = {c[i + 1]} < "
                                 f"{name}[{i}] = {c[i]} (sequence {i} would have a negative length)")
        if total is not None and c[-1] > total:
            raise InputError(f"{name}[-1] = {c[-1]} is past the {total} rows of {rows}: the packed tokens "
                             f"must fit (cu_seqlens[-1] <= {rows}.shape[0])")

    cu("cu_seqlens_q", cu_q, total_q, "q")
    if cu_k is not None:
        cu("cu_seqlens_k", cu_k, total_k, "k")
    for name, used, c in (("seqused_q", used_q, cu_q), ("seqused_k", used_k, cu_k)):
        if used is None:
            continue
        for i, n in enumerate(used):
            if n < 0:
                raise InputError(f"{name}[{i}] = {n} is negative")
            if c is not None and not (name == "seqused_k" and paged) and n > c[i + 1] - c[i]:
                raise InputError(f"{name}[{i}] = {n} is longer than sequence {i}'s slot of {c[i + 1] - c[i]} rows "
                                 f"(cu_seqlens[{i + 1}] - cu_seqlens[{i}]); seqused may only shorten it")
    if table is None or (used_k is None and cu_k is None):
        return
    lens_k = used_k if used_k is not None else [cu_k[i + 1] - cu_k[i] for i in range(batch)]
    for i in range(batch):
        pages = -(-lens_k[i] // page_size)
        if pages > max_pages:
            raise InputError(f"sequence {i} has {lens_k[i]} keys: {pages} pages of {page_size}, but page_table "
                             f"has {max_pages} columns")
        for j in range(pages):
            p = table[i * max_pages + j]
            if not 0 <= p < num_pages:
                raise InputError(f"page_table[{i}, {j}] = {p} is not a page of the cache (0..{num_pages - 1}); "
                                 f"sequence {i} has {lens_k[i]} keys")


# --------------------------------------------------------------------------- helpers

def _is_host(x) -> bool:
    return isinstance(x, (list, tuple)) or (hasattr(x, "__array_interface__")
                                            and not hasattr(x, "__cuda_array_interface__"))


def _host_ints(x, what: str) -> list:
    vals = x.tolist() if hasattr(x, "tolist") else list(x)
    if any(isinstance(v, (list, tuple)) for v in vals):
        raise InputError(f"{what} must be 1-D; got nested values")
    kind = getattr(getattr(x, "dtype", None), "kind", "i")
    if kind not in "iu" or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise InputError(f"{what} must hold integers (int32); got {getattr(x, 'dtype', type(vals[0]).__name__ if vals else 'nothing')}")
    if any(not -(1 << 31) <= v < (1 << 31) for v in vals):
        raise InputError(f"{what} has values outside int32")
    return [int(v) for v in vals]


def _upload_i32(values: list, device: int, stream, handle: int) -> OwnedDeviceArray:
    """A device copy of host int32 values, ordered on ``handle`` (pageable source: the driver
    has copied it out before returning)."""
    a = OwnedDeviceArray.empty((max(len(values), 1),), "i32", device, stream)
    buf = (ctypes.c_int32 * max(len(values), 1))(*values)
    with driver.device_context(device):
        d = driver.drv()
        driver.call("cuMemcpyHtoDAsync", d.CUdeviceptr(a.ptr), ctypes.addressof(buf), 4 * len(values),
                    d.CUstream(handle))
    return a if len(values) == a.shape[0] else DeviceArray(a.ptr, (len(values),), (1,), "i32", device, owner=a)


def _i32_vector(a: DeviceArray, name: str, n: int, what_n: str) -> None:
    if a.dtype != "i32" or a.ndim != 1 or a.shape[0] != n:
        raise InputError(f"{name} must be int32 ({what_n}={n},); got {a.dtype} {a.shape}")
    if a.strides[0] != 1 and n > 1:
        raise InputError(f"{name} must be contiguous (stride 1); its stride is {a.strides[0]}")


def _prefix_view(a: DeviceArray, n: int) -> DeviceArray:
    """The first n entries of a 1-D int32 array: stands in for an absent seqused (never read)."""
    return DeviceArray(a.ptr, (n,), (1,), "i32", a.device, owner=a)


def select_varlen_variant(arch: str, dtype: str, head_dim: int, causal: bool, paged_kv: bool,
                          source: Source | None = None, variant: VariantArgs | None = None,
                          head_dim_v: int | None = None) -> Manifest:
    """The registry's varlen variant for these axes (``variant``: the model axes, none when not
    given; ``head_dim_v``: v's head dim, head_dim when None); VariantNotFound names what is
    there and the nearest."""
    found, _ = manifests(source or default_source(), FAMILY)
    forms = [m for m in found if m.axes.get("varlen")]
    want = {"arch": arch, "dtype": dtype, "head_dim": int(head_dim),
            "head_dim_v": int(head_dim if head_dim_v is None else head_dim_v), "causal": bool(causal),
            "paged_kv": bool(paged_kv)}
    hits = [m for m in forms if all(axis_value(m.axes, k) == v for k, v in want.items())
            and not m.axes.get("split_kv") and not m.axes.get("pack_gqa") and model_axes_match(m, variant)]
    if not hits:
        have = ", ".join(sorted(m.variant for m in forms)[:16]) or "none"
        raise nearest_error(
            f"no {FAMILY} varlen variant with {want}{_model_text(variant)} in the registry "
            f"(varlen variants there: {have})",
            {**want, "varlen": True, **(variant.axes if variant else {})}, source,
            "build them with `make kernels ARCH=sm90 SET=inference` (the default set has bf16/fp16 hd64/128 "
            "and (192, 128) packed, bf16 hd128 paged and a bf16 hd128 window)")
    return min(hits, key=lambda m: (m.axes.get("tile_m", 0), m.variant))


# --------------------------------------------------------------------------- API

def prepare_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int | None = None,
                   max_seqlen_k: int | None = None, seqused_q: Any = None, seqused_k: Any = None,
                   page_table: Any = None, softmax_scale: float | None = None, causal: bool = False,
                   num_splits: int = 0, pack_gqa: bool | None = None, out: Any = None, lse: Any = None,
                   stream: Any = None, window_size: Any = (-1, -1), softcap: float = 0.0,
                   learnable_sink: Any = None, *, check: bool = False, source: Source | None = None,
                   q_descale: Any = None, k_descale: Any = None, v_descale: Any = None) -> PreparedAttention:
    """flash_attn_varlen_func's checks, variant choice and buffers, without launching: the
    plan a serving loop computes once per batch layout and runs every step (``.run``)."""
    handle, _keep = (stream, None) if type(stream) is int else driver.resolve_stream(stream)
    variant = resolve_variant(causal, window_size, softcap, learnable_sink is not None)
    causal = variant.causal
    for name, hint in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if hint is not None and (isinstance(hint, bool) or not hasattr(hint, "__index__") or hint.__index__() < 0):
            raise InputError(f"{name} is a hint: a non-negative int or None, got {hint!r}")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise InputError(f"num_splits must be 0 (auto) or a positive int, got {num_splits!r}")
    if num_splits > 1:
        raise InputError(f"num_splits={num_splits}: varlen is built without split-KV so far; pass 0 (auto) or 1")
    if pack_gqa:
        raise InputError("pack_gqa=True: varlen is built without pack-GQA so far (GQA itself works: "
                         "heads_q a multiple of heads_kv); pass None or False")
    paged = page_table is not None
    qa, ka, va = _wrap(q, handle, "q"), _wrap(k, handle, "k"), _wrap(v, handle, "v")
    if qa.ndim != 3:
        raise InputError(f"q must be packed (total_q, heads_q, head_dim); got shape {qa.shape}")
    kv_rank = 4 if paged else 3
    for n, a in (("k", ka), ("v", va)):
        if a.ndim != kv_rank:
            want = "the paged cache (num_pages, page_size, heads_kv, head_dim)" if paged else \
                "packed (total_k, heads_kv, head_dim)"
            raise InputError(f"{n} must be {want}{' (page_table was given)' if paged else ''}; got shape {a.shape}")
    for n, a in (("q", qa), ("k", ka), ("v", va)):
        _check_inner(n, a)
    if not qa.dtype == ka.dtype == va.dtype:
        raise InputError(f"q, k, v must share one dtype; got {qa.dtype}, {ka.dtype}, {va.dtype}")
    fp8 = qa.dtype == FP8
    if fp8:
        refuse_e4m3(variant, "flash_attn_varlen_func")
    descales = [(n, _wrap(x, handle, n)) for n, x in
                (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))]
    if not fp8 and any(a is not None for _, a in descales):
        raise InputError(f"q_descale / k_descale / v_descale scale e4m3 inputs; q, k, v are {qa.dtype}")
    o_dtype = OUT_DTYPE if fp8 else qa.dtype
    if fp8 and paged and ka.shape[1] % PAGE_CHUNK:
        raise InputError(f"an e4m3 paged cache needs page_size a multiple of {PAGE_CHUNK} (got {ka.shape[1]}): "
                         f"there is no e4m3 gather for other page sizes")
    if ka.shape[:-1] != va.shape[:-1]:
        raise InputError(f"k and v must have one shape but for v's head dim (head_dim_v); got {ka.shape} and "
                         f"{va.shape}")
    total_q, hq, d = qa.shape
    hkv, dv = ka.shape[-2], va.shape[-1]
    if ka.shape[-1] != d:
        raise InputError(f"head_dim differs: q has {d}, k {ka.shape[-1]}")
    if dv != d and (paged or fp8):
        raise InputError(f"v's head dim {dv} != head_dim {d} (head_dim_v) is built for packed bf16/fp16 k and v "
                         f"only; {'a paged cache (page_table)' if paged else 'e4m3 inputs'} read V as wide as K")
    if hkv == 0 or hq % hkv:
        raise InputError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv})")
    sink = _wrap(learnable_sink, handle, "learnable_sink")
    check_sink(sink, hq)

    # cu_seqlens / seqused / page_table: host values are checked here and copied over.
    host = {}
    arrays: dict[str, DeviceArray] = {"q": qa, "k": ka, "v": va}
    for name, x in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k), ("seqused_q", seqused_q),
                    ("seqused_k", seqused_k), ("page_table", page_table)):
        if x is None:
            continue
        if _is_host(x):
            if name == "page_table":
                rows = x.tolist() if hasattr(x, "tolist") else [list(r) for r in x]
                if not rows or not all(isinstance(r, (list, tuple)) and len(r) == len(rows[0]) for r in rows):
                    raise InputError("page_table must be 2-D int32 (batch, max_pages)")
                host[name] = (_host_ints([p for r in rows for p in r], name), (len(rows), len(rows[0])))
            else:
                host[name] = (_host_ints(x, name), None)
        else:
            arrays[name] = _wrap(x, handle, name)
    if cu_seqlens_q is None:
        raise InputError("cu_seqlens_q is required: int32 (batch + 1,) offsets of the sequences in q")
    if cu_seqlens_k is None and not (paged and seqused_k is not None):
        raise InputError("cu_seqlens_k is required (int32 (batch + 1,)); with page_table, seqused_k may give "
                         "the key counts instead")

    def length(name):
        return len(host[name][0]) if name in host else arrays[name].shape[0] if arrays[name].ndim == 1 else -1

    batch = length("cu_seqlens_q") - 1
    if batch < 0 or ("cu_seqlens_q" in arrays and arrays["cu_seqlens_q"].ndim != 1):
        raise InputError("cu_seqlens_q must be int32 (batch + 1,) with at least one entry (0)")
    for name in ("cu_seqlens_q", "cu_seqlens_k"):
        if name in arrays:
            _i32_vector(arrays[name], name, batch + 1, "batch + 1")
        elif name in host and len(host[name][0]) != batch + 1:
            raise InputError(f"{name} must have batch + 1 = {batch + 1} entries (as cu_seqlens_q); "
                             f"got {len(host[name][0])}")
    for name in ("seqused_q", "seqused_k"):
        if name in arrays:
            _i32_vector(arrays[name], name, batch, "batch")
        elif name in host and len(host[name][0]) != batch:
            raise InputError(f"{name} must have batch = {batch} entries; got {len(host[name][0])}")
    num_pages = page_size = max_pages = 0
    if paged:
        num_pages, page_size = ka.shape[0], ka.shape[1]
        if "page_table" in arrays:
            pt = arrays["page_table"]
            if pt.dtype != "i32" or pt.ndim != 2 or pt.shape[0] != batch:
                raise InputError(f"page_table must be int32 (batch={batch}, max_pages); got {pt.dtype} {pt.shape}")
            max_pages = pt.shape[1]
        else:
            shape = host["page_table"][1]
            if shape[0] != batch:
                raise InputError(f"page_table must have batch = {batch} rows; got {shape[0]}")
            max_pages = shape[1]
        if page_size % PAGE_CHUNK and seqused_k is None:
            raise InputError(f"page_size {page_size} (not a multiple of {PAGE_CHUNK}) goes through a gather that "
                             f"needs seqused_k: pass the key counts as seqused_k")
    if out is not None:
        arrays["o"] = _wrap(out, handle, "out")
    if lse is not None:
        arrays["lse"] = _wrap(lse, handle, "lse")
    arrays.update({n: a for n, a in descales if a is not None})  # located with the rest: one device
    if sink is not None:
        arrays["learnable_sink"] = sink
    arrays, device = resolve_devices(arrays)
    descales = [(n, arrays.pop(n) if a is not None else None) for n, a in descales]
    o_shape = (total_q, hq, dv)  # v's head dim (head_dim_v)
    if "o" in arrays and (arrays["o"].shape != o_shape or arrays["o"].dtype != o_dtype):
        like = "" if fp8 else " like q" if dv == d else " (q's rows, v's head dim)"
        raise InputError(f"out must be {o_shape} {o_dtype}{like}; got {arrays['o'].shape} {arrays['o'].dtype}")
    if "o" in arrays:
        _check_inner("out", arrays["o"])
    if "lse" in arrays and (arrays["lse"].shape != (hq, total_q) or arrays["lse"].dtype != "f32"):
        raise InputError(f"lse must be float32 (heads_q, total_q) = {(hq, total_q)}; "
                         f"got {arrays['lse'].dtype} {arrays['lse'].shape}")

    # The values: from the host copies, or (check=True) from the device.
    vals = {n: h[0] for n, h in host.items()}
    if check:
        for n in ("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "page_table"):
            if n in arrays:
                vals[n] = _to_host_i32(arrays[n], device, handle)
    if vals:
        # What is known on the host is checked; an unknown cu_seqlens_q stands as [0]*(batch+1)
        # only for the shape of the loops (its own checks then pass trivially).
        cu_q_vals = vals.get("cu_seqlens_q", [0] * (batch + 1))
        used_q = vals.get("seqused_q") if "cu_seqlens_q" in vals else None
        check_seqlens(cu_q_vals, vals.get("cu_seqlens_k"), used_q, vals.get("seqused_k"),
                      total_q, None if paged else ka.shape[0], paged=paged, table=vals.get("page_table"),
                      max_pages=max_pages, page_size=page_size, num_pages=num_pages)
    for n, h in host.items():
        arrays[n] = _upload_i32(h[0], device, stream, handle)
        if n == "page_table":
            arrays[n] = DeviceArray(arrays[n].ptr, h[1], (h[1][1], 1), "i32", device, owner=arrays[n])

    if "o" not in arrays:
        out = arrays["o"] = OwnedDeviceArray.empty(o_shape, o_dtype, device, stream)
    if "lse" not in arrays:
        lse = arrays["lse"] = OwnedDeviceArray.empty((hq, total_q), "f32", device, stream)
    plan = DecodePlan(False, 1, 0, 0)
    if fp8 and batch > 0:
        arrays["descale"] = _stack_descales(descales, batch, hkv, device, stream, handle)
    if batch == 0 or total_q == 0:
        return PreparedAttention(out, lse, plan, [], arrays)

    launches = []
    scalars = {"has_seqused_q": int("seqused_q" in arrays), "has_seqused_k": int("seqused_k" in arrays),
               **variant.scalars}
    if softmax_scale is not None:
        scalars["softmax_scale"] = float(softmax_scale)
    arch = driver.device_arch(device)
    if paged and page_size % PAGE_CHUNK:
        # Gather the used keys into (batch, capacity) rows, packed: sequence b at b * capacity.
        capacity = max_pages * page_size
        gat = _family_kernel(GATHER_FAMILY, source, arch=arch, dtype=qa.dtype, head_dim=d)
        kd_ = OwnedDeviceArray.empty((batch, capacity, hkv, d), qa.dtype, device, stream)
        vd_ = OwnedDeviceArray.empty((batch, capacity, hkv, d), qa.dtype, device, stream)
        launches.append((gat, gat.plan({"k_cache": arrays["k"], "v_cache": arrays["v"],
                                        "page_table": arrays.pop("page_table"), "seqused_k": arrays["seqused_k"],
                                        "k": kd_, "v": vd_}, {}, handle)))
        arrays["k"] = DeviceArray(kd_.ptr, (batch * capacity, hkv, d), (hkv * d, d, 1), qa.dtype, device, owner=kd_)
        arrays["v"] = DeviceArray(vd_.ptr, (batch * capacity, hkv, d), (hkv * d, d, 1), qa.dtype, device, owner=vd_)
        arrays["cu_seqlens_k"] = _upload_i32([i * capacity for i in range(batch + 1)], device, stream, handle)
        arrays["_gathered"] = kd_
        arrays["_gathered_v"] = vd_
        paged = False
    if "cu_seqlens_k" not in arrays:
        arrays["cu_seqlens_k"] = arrays["cu_seqlens_q"]  # paged with seqused_k: only a stand-in, never read
    if "seqused_q" not in arrays:
        arrays["seqused_q"] = _prefix_view(arrays["cu_seqlens_q"], batch)
    if "seqused_k" not in arrays:
        arrays["seqused_k"] = _prefix_view(arrays["cu_seqlens_k"], batch)
    fwd: Kernel = _kernel(select_varlen_variant(arch, qa.dtype, d, causal, paged, source, variant, dv), source)
    if "tile_counter" in fwd.contract.tensors:
        # The walk's tile counter (a variant that hands tiles out by atomicAdd): zero now, and
        # every launch leaves it zero, so the plan's runs (stream-ordered, as its outputs are)
        # and CUDA-graph replays share it.
        arrays["tile_counter"] = _fill_i32(0, 2, device, stream, handle)
    kern = {n: arrays[n] for n in fwd.contract.tensors}
    launches.append((fwd, fwd.plan(kern, scalars, handle)))
    return PreparedAttention(out, lse, plan, launches, arrays)


def flash_attn_varlen_func(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int | None = None,
                           max_seqlen_k: int | None = None, seqused_q: Any = None, seqused_k: Any = None,
                           page_table: Any = None, softmax_scale: float | None = None, causal: bool = False,
                           num_splits: int = 0, pack_gqa: bool | None = None, out: Any = None, lse: Any = None,
                           stream: Any = None, window_size: Any = (-1, -1), softcap: float = 0.0,
                           learnable_sink: Any = None, *, check: bool = False, source: Source | None = None,
                           q_descale: Any = None, k_descale: Any = None, v_descale: Any = None):
    """Attention over packed variable-length sequences: returns (out, lse), out (total_q,
    heads_q, dv) like q, dv being v's head dim (bf16 for e4m3 q/k/v, with descales (batch,
    heads_kv)), and lse float32 (heads_q, total_q). See the module docstring for the layouts and what is checked;
    ``check=True`` also checks device-side cu_seqlens, seqused and page_table on the host (a sync)."""
    handle = stream if type(stream) is int else driver.resolve_stream(stream)[0]
    prepared = prepare_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k,
                              page_table, softmax_scale, causal, num_splits, pack_gqa, out, lse, stream,
                              window_size, softcap, learnable_sink, check=check, source=source,
                              q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return prepared.run(handle)
