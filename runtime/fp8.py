"""FP8 inputs without torch: ``quantize_fp8`` over the registry's ``fp8_quant`` variants.

    x8, descale = quantize_fp8(q, block=128, hadamard=True, seed=7)

x is (batch, seqlen, heads, head_dim) bf16 or fp16, any DLPack / __cuda_array_interface__
array. x8 is e4m3 of the same shape and descale float32 (batch, heads, blocks) with
blocks = ceil(seqlen / block) (block=None: one block of every token, descale (batch, heads)
squeezed from (batch, heads, 1) -- FA3's per-(batch, head) descale shape). x ~= x8 * descale
per block. With ``hadamard`` each token row is first rotated by diag(random signs from
``seed``) then H/sqrt(head_dim) (orthonormal): rotate q and k with the same seed and
Q K^T is unchanged up to rounding; v must not be rotated (O would come out rotated).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from . import driver
from .arrays import DeviceArray, OwnedDeviceArray, as_device_array
from .errors import InputError
from .launcher import Kernel, resolve_devices
from .registry_source import Source, default_source, select

FAMILY = "fp8_quant"
_kernels: dict[tuple, tuple] = {}  # (id(source), arch, dtype, head_dim) -> (source, Kernel)
_lock = threading.Lock()
I32_MAX = (1 << 31) - 1
HEAD_DIMS = (64, 128, 256)  # generator/families.py FP8_QUANT (the runtime imports no generator)


def _kernel(arch: str, dtype: str, head_dim: int, source: Source | None) -> Kernel:
    key = (id(source), arch, dtype, head_dim)
    ent = _kernels.get(key)
    if ent is None or ent[0] is not source:
        with _lock:
            m = select(FAMILY, {"arch": arch, "dtype": dtype, "head_dim": head_dim}, source=source)
            ent = _kernels[key] = (source, Kernel.from_manifest(m, source or default_source()))
    return ent[1]


def _block_tokens(block: Any, seqlen: int) -> int:
    if block is None:
        return seqlen
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise InputError(f"block must be None (one scale per (batch, head)) or a positive int of "
                         f"tokens, got {block!r}")
    return min(block, seqlen)


def quantize_fp8(x: Any, block: int | None = None, hadamard: bool = False, seed: int = 0,
                 stream: Any = None, *, out: tuple | None = None, source: Source | None = None):
    """Quantise x to e4m3: returns (x_fp8, descale) as arrays exporting DLPack and
    __cuda_array_interface__ (see the module docstring for shapes and the rotation).
    ``out=(y, descale)`` writes into the caller's arrays instead (nothing is allocated):
    y e4m3 like x, descale float32 (batch, heads, blocks) -- (batch, heads) when block is None."""
    handle = stream if type(stream) is int else driver.resolve_stream(stream)[0]
    xa = x if isinstance(x, DeviceArray) else as_device_array(x, stream=handle, what="x")
    if xa.ndim != 4:
        raise InputError(f"x must be (batch, seqlen, heads, head_dim); got {xa.ndim} dims {xa.shape}")
    if xa.dtype not in ("bf16", "fp16"):
        raise InputError(f"x must be bf16 or fp16 to quantise to e4m3; got {xa.dtype}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= I32_MAX:
        raise InputError(f"seed must be an int in 0..{I32_MAX}, got {seed!r}")
    b, s, h, d = xa.shape
    if d not in HEAD_DIMS:
        raise InputError(f"head_dim {d} cannot be quantised here; fp8_quant builds head_dim {HEAD_DIMS} "
                         f"(powers of two, for the Hadamard rotation)")
    if min(b, s, h) < 1:
        raise InputError(f"x must not be empty; got shape {xa.shape}")
    tokens = _block_tokens(block, s)
    blocks = -(-s // tokens)
    arrays, device = resolve_devices({"x": xa})
    kernel = _kernel(driver.device_arch(device), xa.dtype, d, source)
    # Row strides of y padded to 16 bytes (one e4m3 element is one byte), as the contract asks.
    scalars = {"block_tokens": tokens, "hadamard": int(bool(hadamard)), "seed": seed}
    if out is not None:
        y, desc = _given_outputs(out, xa.shape, (b, h, blocks), block is None, handle)
        arrays.update(y=y, descale=desc)
        arrays, _ = resolve_devices(arrays)
        kernel.run(kernel.plan(arrays, scalars, handle), handle)
        return out
    y = OwnedDeviceArray.empty(xa.shape, "e4m3", device, stream)
    desc = OwnedDeviceArray.empty((b, h, blocks), "f32", device, stream)
    arrays.update(y=y, descale=desc)
    kernel.run(kernel.plan(arrays, scalars, handle), handle)
    if block is None:
        # The same memory as (batch, heads); the view keeps the allocation alive.
        view = DeviceArray(desc.ptr, (b, h), desc.strides[:2], "f32", device, owner=desc)
        view._stream = desc._stream
        return y, view
    return y, desc


def _given_outputs(out, shape, desc_shape, per_head: bool, handle: int):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise InputError("out must be a pair (y, descale)")
    y = out[0] if isinstance(out[0], DeviceArray) else as_device_array(out[0], stream=handle, what="y")
    d = out[1] if isinstance(out[1], DeviceArray) else as_device_array(out[1], stream=handle, what="descale")
    if y.shape != tuple(shape) or y.dtype != "e4m3":
        raise InputError(f"out[0] must be e4m3 {tuple(shape)} like x; got {y.dtype} {y.shape}")
    want = desc_shape[:2] if per_head else desc_shape
    if d.shape != want or d.dtype != "f32":
        raise InputError(f"out[1] (descale) must be float32 {want}; got {d.dtype} {d.shape}")
    if per_head:  # the kernel sees (batch, heads, 1)
        d = DeviceArray(d.ptr, desc_shape, (*d.strides, 1), "f32", d.device, owner=d)
    return y, d


# --------------------------------------------------------------------------- FP8 attention

ATTN_FAMILY = "fa3_fwd"
OUT_DTYPE = "bf16"  # generator fa3_fwd_sm90/config.py E4M3_OUT_DTYPE
ONE_F32_BITS = 0x3F800000
V_LAYOUTS = ("rowmajor", "colmajor")  # runtime/axes.py's v_layout values
HEAD_DESCALE = "head"  # runtime/axes.py descale_block: per-(batch, head_kv) q/k descales
_attn: dict[tuple, tuple] = {}  # (id(source), arch, head_dim, causal, v_layout, descale_block) -> (source, Kernel)


def _attn_kernel(arch: str, head_dim: int, causal: bool, v_layout: str, source: Source | None,
                 sizes: dict, descale_block: str = HEAD_DESCALE) -> Kernel:
    key = (id(source), arch, head_dim, causal, v_layout, descale_block)
    ent = _attn.get(key)
    if ent is None or ent[0] is not source:
        with _lock:
            axes = {"arch": arch, "dtype": "e4m3", "head_dim": head_dim, "causal": causal, "v_layout": v_layout}
            if descale_block != HEAD_DESCALE:  # left out otherwise: the plain request, as before
                axes["descale_block"] = descale_block
            m = select(ATTN_FAMILY, axes, source=source, sizes=sizes)
            ent = _attn[key] = (source, Kernel.from_manifest(m, source or default_source()))
    return ent[1]


def block_axis_value(descale_block) -> str:
    """descale_block=(q block, k block) in tokens -> the descale_block axis value
    ("blockq128k192"), checked against the values the project knows (runtime/axes.py)."""
    from .axes import AXES

    known = [v for v in AXES["descale_block"].values if v != HEAD_DESCALE]
    pairs = ", ".join("({}, {})".format(*re.fullmatch(r"blockq(\d+)k(\d+)", v).groups()) for v in known)
    if (not isinstance(descale_block, (tuple, list)) or len(descale_block) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in descale_block)):
        raise InputError(f"descale_block must be (q block, k block), positive token counts as given to "
                         f"quantize_fp8(..., block=); got {descale_block!r} (built: {pairs})")
    value = f"blockq{descale_block[0]}k{descale_block[1]}"
    if value not in known:
        raise InputError(f"no e4m3 variant takes descale blocks {tuple(descale_block)}: the k block must be a "
                         f"multiple of a variant's key tile and the q block of 16; the block pairs built are "
                         f"{pairs} (quantize_fp8(q, block=BQ), quantize_fp8(k, block=BK))")
    return value


def _check_block_descale(name: str, a, want: tuple, block: int, what: str):
    if a.dtype != "f32" or a.shape != want:
        raise InputError(f"{name} with descale_block must be float32 (batch, {what}, ceil(seqlen / {block})) = "
                         f"{want}, quantize_fp8(..., block={block})'s shape; got {a.dtype} {a.shape}")
    if a.strides[2] != 1 and want[2] > 1:
        raise InputError(f"{name}'s block dimension must be contiguous (stride 1); got strides {a.strides}")


def _ones(shape, device, stream, handle) -> OwnedDeviceArray:
    out = OwnedDeviceArray.empty(shape, "f32", device, stream)
    d = driver.drv()
    n = shape[0] * shape[1] * shape[2]
    with driver.device_context(device):
        driver.call("cuMemsetD32Async", d.CUdeviceptr(out.ptr), ONE_F32_BITS, n, d.CUstream(handle))
    return out


def _wrap(a, name, handle):
    if a is None or isinstance(a, DeviceArray):
        return a
    return as_device_array(a, stream=handle, what=name)


def _stack_descales(descales, b: int, hkv: int, device: int, stream, handle: int) -> OwnedDeviceArray:
    """The kernel's (3, batch, heads_kv) float32 descale tensor: the given ones copied in
    (stream-ordered), 1.0 where None."""
    out = OwnedDeviceArray.empty((3, b, hkv), "f32", device, stream)
    d = driver.drv()
    n = b * hkv
    with driver.device_context(device):
        for i, (name, a) in enumerate(descales):
            dst = d.CUdeviceptr(out.ptr + 4 * n * i)
            if a is None:
                driver.call("cuMemsetD32Async", dst, ONE_F32_BITS, n, d.CUstream(handle))
                continue
            if a.dtype != "f32" or a.shape != (b, hkv):
                raise InputError(f"{name} must be float32 (batch, heads_kv) = {(b, hkv)}; got {a.dtype} {a.shape}")
            if a.strides != (hkv, 1) and n > 1:
                raise InputError(f"{name} must be contiguous (strides ({hkv}, 1)); got strides {a.strides}")
            driver.call("cuMemcpyDtoDAsync", dst, d.CUdeviceptr(a.ptr), 4 * n, d.CUstream(handle))
    return out


def flash_attn_fp8(q, k, v, softmax_scale=None, causal=False, out=None, lse=None, stream=None, *,
                   q_descale=None, k_descale=None, v_descale=None, v_layout="rowmajor",
                   descale_block=None, source: Source | None = None):
    """FP8 attention forward (flash_attn_func routes e4m3 inputs here): returns (out, lse).

    q (batch, seqlen_q, heads_q, head_dim) and k (batch, seqlen_k, heads_kv, head_dim) e4m3;
    v e4m3 like k (v_layout="rowmajor": the kernel transposes it in shared memory) or
    (batch, heads_kv, head_dim, seqlen_k) with v_layout="colmajor": seqlen_k contiguous, the
    other strides multiples of 16 B (store seqlen_k padded to a multiple of 16 and pass the
    slice [..., :seqlen_k]). The descales are float32 (batch, heads_kv) or None (1): S = q k^T * q_descale *
    k_descale * softmax_scale and O = P v * v_descale, as FA3. out is bf16 like q; lse float32
    (batch, heads_q, seqlen_q).

    Block descales: ``descale_block=(BQ, BK)`` with q_descale float32 (batch, heads_q,
    ceil(seqlen_q / BQ)) and k_descale (batch, heads_kv, ceil(seqlen_k / BK)), what
    quantize_fp8(q, block=BQ) and quantize_fp8(k, block=BK) return (None: all ones). q's are
    per query head (GQA: each q head its own blocks), k's per KV head; v_descale stays
    (batch, heads_kv) (FA3's shape: O is linear in v, a per-block v scale would have to
    enter the PV GEMM). The block sizes are given, not inferred (ceil(seqlen / B) does not
    tell B); only the block pairs built serve (runtime/axes.py descale_block)."""
    handle = stream if type(stream) is int else driver.resolve_stream(stream)[0]
    qa, ka, va = (_wrap(x, n, handle) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    oa, la = _wrap(out, "out", handle), _wrap(lse, "lse", handle)
    descales = [(n, _wrap(x, n, handle)) for n, x in
                (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))]
    for n, a in (("q", qa), ("k", ka), ("v", va)):
        if a.ndim != 4:
            raise InputError(f"{n} must have 4 dimensions; got {a.ndim} {a.shape}")
        if a.dtype != "e4m3":
            raise InputError(f"FP8 attention takes e4m3 q, k and v; {n} is {a.dtype}")
    if v_layout not in V_LAYOUTS:
        raise InputError(f"v_layout must be one of {V_LAYOUTS}; got {v_layout!r}")
    b, sq, hq, d = qa.shape
    sk, hkv = ka.shape[1], ka.shape[2]
    if ka.shape[0] != b or ka.shape[3] != d:
        raise InputError(f"k must be (batch={b}, seqlen_k, heads_kv, head_dim={d}); got {ka.shape}")
    # rowmajor: V like k, transposed in the kernel's shared memory (no copy here).
    v_want = (b, hkv, d, sk) if v_layout == "colmajor" else (b, sk, hkv, d)
    if va.shape != v_want:
        form = "(batch, heads_kv, head_dim, seqlen_k)" if v_layout == "colmajor" else "(batch, seqlen_k, heads_kv, head_dim)"
        raise InputError(f"v ({v_layout}) must be {form} = {v_want}; got {va.shape}")
    if hkv == 0 or hq % hkv:
        raise InputError(f"heads_q ({hq}) must be a multiple of heads_kv ({hkv}) (GQA/MQA)")
    arrays = {"q": qa, "k": ka, "v": va}
    if oa is not None:
        if oa.shape != qa.shape or oa.dtype != OUT_DTYPE:
            raise InputError(f"out must be {OUT_DTYPE} {qa.shape}; got {oa.dtype} {oa.shape}")
        arrays["o"] = oa
    if la is not None:
        if la.shape != (b, hq, sq) or la.dtype != "f32":
            raise InputError(f"lse must be float32 (batch, heads_q, seqlen_q) = {(b, hq, sq)}; got {la.dtype} {la.shape}")
        arrays["lse"] = la
    block = HEAD_DESCALE
    if descale_block is not None:
        block = block_axis_value(descale_block)
        bq, bk = descale_block
        for (n, a), want, blk, what in zip(descales, ((b, hq, -(-sq // bq)), (b, hkv, -(-sk // bk))), (bq, bk),
                                           ("heads_q", "heads_kv")):
            if a is not None:
                _check_block_descale(n, a, want, blk, what)
    else:
        for n, a in descales[:2]:
            if a is not None and a.ndim == 3:
                raise InputError(f"{n} is {a.shape}, per-block descales (batch, heads, blocks): pass "
                                 f"descale_block=(q block, k block) as given to quantize_fp8(..., block=), "
                                 f"or per-head descales (batch, heads_kv)")
    arrays.update({n: a for n, a in descales if a is not None})  # located with the rest: one device
    arrays, device = resolve_devices(arrays)
    descales = [(n, arrays.pop(n) if a is not None else None) for n, a in descales]
    sizes = {"batch": b, "seqlen_q": sq, "seqlen_k": sk, "heads_q": hq, "heads_kv": hkv}
    kernel = _attn_kernel(driver.device_arch(device), d, bool(causal), v_layout, source, sizes, block)
    if block != HEAD_DESCALE:
        # q and k per block go to the kernel as they are (ones where None); mDescale keeps v's.
        for (n, a), want in zip(descales[:2], ((b, hq, -(-sq // bq)), (b, hkv, -(-sk // bk)))):
            arrays[n] = a if a is not None else _ones(want, device, stream, handle)
        descales = [(descales[0][0], None), (descales[1][0], None), descales[2]]
    if "o" not in arrays:
        arrays["o"] = out = OwnedDeviceArray.empty(qa.shape, OUT_DTYPE, device, stream)
    if "lse" not in arrays:
        arrays["lse"] = lse = OwnedDeviceArray.empty((b, hq, sq), "f32", device, stream)
    arrays["descale"] = _stack_descales(descales, b, hkv, device, stream, handle)
    scalars = {} if softmax_scale is None else {"softmax_scale": float(softmax_scale)}
    kernel.run(kernel.plan(arrays, scalars, handle), handle)
    return out, lse

