"""What the GPU tests share: the device probe, the array framework, bit-exact host <-> device
copies (through the driver alone), NaN poison, the float64 softmax of a reference, and the
comparison against it. No cutlass and no framework import at module level, so every GPU test
module still collects on the device image and where there is no GPU.
"""

from __future__ import annotations

import numpy as np

from cubinforge.runtime import as_device_array, driver

RTOL_O = 2.5e-3      # ||O - ref|| / ||ref||, bf16 and fp16
ATOL_LSE = 1e-3      # natural log
# A quiet NaN's bits per dtype: outputs are filled with it, so an element never written shows.
NAN_BITS = {"bf16": (np.uint16, 0x7FC0), "fp16": (np.uint16, 0x7E00), "f32": (np.uint32, 0x7FC00000)}


# Called with no arguments whenever a comparison against a float64 reference found nothing
# wrong: tests/gpu_verification_log.py's log (CUBINFORGE_VERIFIED_OUT) listens, and marks the
# kernels the test launched so far as checked. Checks of their own (fp8, varlen) call it too.
CHECK_LISTENERS: list = []


def numerics_checked() -> None:
    for listener in CHECK_LISTENERS:
        listener()


def gpu_probe():
    """(skip reason or None, the device's arch or None)."""
    try:
        n = driver.device_count()
    except Exception as e:          # no cuda-bindings, no libcuda, cuInit failed
        return f"no usable CUDA driver ({type(e).__name__}: {e})", None
    if n == 0:
        return "no CUDA device", None
    return None, driver.device_arch(0)


def backend():
    """("cupy", cupy) where CuPy sees a device, else ("torch", torch)."""
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return "cupy", cupy
    except Exception:
        import torch
        return "torch", torch


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """Host values -> the dtype's bit patterns (bf16: round to nearest even)."""
    if dtype == "bf16":
        b = x.astype(np.float32).view(np.uint32)
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    return x.astype(np.float32).view(np.uint32)


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Bit patterns -> float64 values."""
    if dtype == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float64)
    if dtype == "i32":
        return bits.view(np.int32).astype(np.float64)
    return bits.view(np.float32).astype(np.float64)


def download_raw(a) -> np.ndarray:
    """The array's elements as raw bits (uint8/uint16/uint32 by item size), shaped like it,
    copied through the driver alone (independent of the framework)."""
    a = as_device_array(a)
    with driver.device_context(0):
        driver.call("cuCtxSynchronize")
        raw = np.empty(a.span_bytes, np.uint8)
        if a.span_bytes:
            driver.call("cuMemcpyDtoH", raw.ctypes.data, a.ptr, a.span_bytes)
    np_t = {1: np.uint8, 2: np.uint16, 4: np.uint32}[a.itemsize]
    view = np.lib.stride_tricks.as_strided(raw.view(np_t), a.shape, tuple(s * a.itemsize for s in a.strides))
    return np.ascontiguousarray(view)


def download(a) -> np.ndarray:
    """Device -> host float64 (bf16, fp16, f32, i32)."""
    a = as_device_array(a)
    return from_bits(download_raw(a), a.dtype)


def softmax_rows(s: np.ndarray):
    """(P, LSE) of masked float64 scores s (..., keys), -inf where masked: P normalised per
    row, LSE in natural log; a row with no key gets P = 0 and LSE = -inf."""
    m = s.max(-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    lse = np.where(empty[..., 0], -np.inf, (m + np.log(np.where(l == 0, 1.0, l)))[..., 0])
    return p / np.where(l == 0, 1.0, l), lse


def compare(o, lse, ref_o, ref_lse, what, rtol=RTOL_O, atol=ATOL_LSE, zero_empty_rows=False) -> list[str]:
    """What is wrong with (o, lse) against the reference: NaN left (never written), O's relative
    error, LSE's absolute error, -inf LSE where a row sees no key; with `zero_empty_rows`
    (o (b, s, h, d), lse (b, h, s)), also O = 0 on those rows. Empty: all good."""
    errs = []
    if np.isnan(o).any():
        errs.append(f"{what}: {int(np.isnan(o).sum())} O elements never written (NaN)")
    if np.isnan(lse).any():
        errs.append(f"{what}: {int(np.isnan(lse).sum())} LSE elements never written (NaN)")
    if errs:
        return errs
    rel = np.linalg.norm(o - ref_o) / max(np.linalg.norm(ref_o), 1e-30)
    if not rel <= rtol:
        errs.append(f"{what}: O rel err {rel:.2e} > {rtol}")
    inf_ref = np.isinf(ref_lse)
    if (lse[inf_ref] != ref_lse[inf_ref]).any():
        errs.append(f"{what}: LSE of rows with no key should be -inf")
    if zero_empty_rows and inf_ref.any() and np.abs(
            o[np.broadcast_to(inf_ref.transpose(0, 2, 1)[..., None], o.shape)]).max(initial=0) != 0:
        errs.append(f"{what}: O of rows with no key should be 0")
    fin = ~inf_ref
    if fin.any():
        lerr = np.abs(lse[fin] - ref_lse[fin]).max()
        if not lerr <= atol:
            errs.append(f"{what}: LSE abs err {lerr:.2e} > {atol}")
    if not errs:
        numerics_checked()
    return errs


def label_names(variant: str, label_token: str) -> bool:
    """Whether a bench.ab variant's label (after its first "+") has `label_token` as one of its
    "+"-separated tokens ("" : any labelled variant). Whole tokens, so "lazy-rescale-1" does not
    pick "lazy-rescale-10"."""
    name, plus, label = variant.partition("+")
    return bool(plus) and (not label_token or label_token in label.split("+"))


def labelled_candidates(home, label_token: str, arch) -> list:
    """The fa3_fwd manifests of a bench.ab home whose label names `label_token` (label_names),
    for `arch`, by variant name: the candidates a pinned GPU test runs."""
    from cubinforge.runtime.registry_source import LocalSource, manifests

    if not (home / "manifests").is_dir():
        return []
    found, _broken = manifests(LocalSource(home), "fa3_fwd")
    return sorted((m for m in found if label_names(m.variant, label_token) and m.contract.arch == arch),
                  key=lambda m: m.variant)
