"""Every C++ loader entry point against the Python runtime, bit for bit, in one process.

    python examples/cpp/compare_inference_with_python.py --lib build/cpp/libcubinforge_check.so

The C++ side is examples/cpp/check_lib.cpp built as a shared library (CMake target
``cubinforge_check``) against a bundle rendered from the registry the Python runtime reads;
it is loaded here with ctypes and runs on the same device tensors. For each case of CASES the
inputs are generated on the GPU (CuPy, seeded), outputs are poisoned with NaN, the Python
runtime runs the call (flash_attn_func, prepare_kvcache, prepare_varlen, flash_attn_combine),
the C++ loader runs the same call on its own copy of what the call writes (O, LSE, and the
caches when k/v are appended), and the variants launched, the split count and every byte of
O, LSE and the caches are compared on the device. No host copies of the data, no files.

The case list is plain data (``CASES``; ``tensors(case)`` gives each tensor's shape and dtype
without a GPU): tests/test_cpp_compare_cases.py checks on the CPU that it covers every entry
point and that both sides' host checks accept every case.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import struct
import sys
import time
from pathlib import Path

import numpy as np

D = 128
# Each entry point's cases. kvcache: capacity keys per sequence (the cache holds exactly that,
# paged: ceil(capacity / page_size) pages per sequence, shuffled out of a pool of 3 spare
# pages), page_size 0 = dense, num_splits 0 = auto, seqlen_new k/v appended first, batch_idx
# = a cache_batch_idx over a dense cache with 2 spare rows. Key counts are ragged in
# [room / 2, room] (room = capacity - seqlen_new), the last sequence full.
KV = ("batch", "seqlen_q", "capacity", "heads_q", "heads_kv", "causal", "page_size", "num_splits", "seqlen_new",
      "batch_idx")
KV_CASES = [
    (8, 1, 32768, 32, 8, 1, 0, 0, 0, 0),       # long-context dense decode: auto splits, pack-GQA, combine
    (8, 1, 32768, 32, 8, 1, 256, 0, 0, 0),     # long-context paged, page 256
    (4, 1, 8192, 16, 16, 1, 0, 0, 0, 0),       # no GQA to pack
    (4, 16, 4096, 16, 16, 0, 0, 0, 0, 0),      # 16 query tokens, non-causal
    (32, 4, 2048, 32, 8, 1, 0, 0, 0, 0),       # speculative: 4 query tokens, pack-GQA
    (2, 3, 5000, 8, 2, 1, 16, 5, 0, 0),        # explicit 5 splits, page 16
    (64, 1, 1024, 32, 8, 1, 256, 1, 0, 0),     # never split (num_splits 1), page 256
    (8, 1, 2048, 32, 8, 1, 0, 0, 1, 0),        # append 1 token into a dense cache, then attend
    (8, 4, 2048, 32, 8, 1, 256, 0, 4, 0),      # append 4 into a paged cache (page 256)
    (4, 2, 1024, 16, 4, 1, 16, 2, 2, 0),       # append 2 into page 16, 2 splits
    (4, 1, 1024, 32, 8, 1, 0, 0, 0, 1),        # cache_batch_idx: shuffled rows of a larger cache
    (4, 2, 1024, 32, 8, 1, 0, 3, 2, 1),        # cache_batch_idx + append, 3 splits
    (3, 1, 1000, 16, 4, 1, 1, 0, 0, 0),        # page size 1: gathered first
    (3, 2, 1000, 16, 4, 1, 24, 0, 2, 0),       # page 24 (not a multiple of 16) + append: gathered
]
# varlen: per-sequence query / key slot lengths; used_q / used_k shorten them (None: the
# slots); page_size 0 = packed k/v, else a paged cache read through seqused_k = used_k.
VL = ("q_lens", "k_lens", "heads_q", "heads_kv", "head_dim", "causal", "page_size", "used_q", "used_k")
VL_CASES = [
    ([0, 1, 17, 300], [5, 1, 40, 700], 16, 4, 128, 0, 0, None, None),          # 0- and 1-token sequences
    ([0, 1, 17, 300], [5, 1, 40, 700], 16, 4, 128, 1, 0, [0, 1, 9, 250], [5, 0, 40, 333]),  # seqused < slot
    # packed bf16 hd128 (the two above too): O by one TMA store per tile through the ragged map
    # (config.TUNED_VARLEN_DTYPE); many sequences ending on, beside and between tile edges.
    ([128, 0, 129, 255, 1, 0, 1000, 7], [128, 3, 129, 300, 1, 9, 1000, 7], 16, 4, 128, 0, 0, None, None),
    ([128, 0, 129, 255, 1, 0, 1000, 7], [128, 3, 129, 300, 1, 9, 1000, 7], 16, 4, 128, 1, 0,
     [100, 0, 129, 200, 1, 0, 999, 7], None),
    ([64, 129, 3], [64, 129, 1000], 8, 8, 64, 1, 0, None, None),               # hd64
    ([1, 17, 128], [100, 17, 2000], 16, 4, 128, 1, 16, None, [100, 17, 2000]),  # paged, page 16
    ([7, 200], [4096, 333], 16, 2, 128, 0, 256, None, [4096, 333]),           # paged, page 256
    ([5, 9], [77, 300], 16, 4, 128, 1, 24, None, [77, 300]),                  # page 24: gathered
]
# dense flash_attn_func: (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, dtype)
DENSE = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal", "dtype")
DENSE_CASES = [
    (2, 512, 512, 8, 8, 128, 0, "bf16"),
    (2, 512, 512, 8, 8, 128, 1, "bf16"),
    (1, 300, 777, 16, 4, 128, 1, "bf16"),   # seqlen_q != seqlen_k: bottom-right causal, GQA
    (1, 777, 300, 16, 16, 128, 1, "bf16"),  # rows that see no key
    (3, 129, 65, 4, 1, 64, 0, "bf16"),      # MQA, ragged tiles
    (2, 256, 256, 8, 8, 128, 1, "fp16"),
]
# Decode-shaped dense calls: on an H200 (132 SMs) the dispatcher routes them to the split-KV
# forms (decode-split-kv: forward into split partials, then the combine) or, for hd64 where
# one split fills the SMs, the unsplit pack-GQA form (decode-pack-hd64); C++ must do the same.
DENSE_DECODE_CASES = [
    (8, 1, 32768, 32, 8, 128, 1, "bf16"),     # the inference bench's dense decode: 2 splits
    (4, 1, 32768, 16, 16, 128, 1, "bf16"),    # a bench --decode cell, no GQA: 2 splits
    (4, 16, 32768, 16, 16, 128, 0, "bf16"),   # 16 query tokens, non-causal
    (1, 64, 8192, 32, 8, 128, 1, "bf16"),     # 64 query tokens, bottom-right causal: 4 splits
    (2, 3, 5000, 8, 2, 128, 0, "bf16"),       # ragged key blocks: 10 splits
    (2, 4, 16384, 32, 8, 256, 1, "bf16"),     # hd256 (m64n80 tiles): 7 splits
    (2, 1, 65536, 64, 8, 64, 1, "bf16"),      # hd64, 64k keys: 7 splits
    (16, 1, 8192, 32, 32, 64, 0, "bf16"),     # hd64, SMs filled: the unsplit pack-GQA form
    (4, 1, 32768, 16, 16, 128, 1, "fp16"),    # fp16
    (16, 4, 8192, 32, 8, 128, 1, "bf16"),     # GQA, SMs filled: the unsplit pack-GQA form (decode-pack-gqa)
]
# flash_attn_combine on partials of its own (some splits' LSE -inf, one row with none left).
CB = ("num_splits", "batch", "seqlen_q", "heads", "head_dim")
CB_CASES = [(3, 2, 3, 8, 128), (16, 4, 1, 32, 128)]

# The model variants (issue 12), FlashAttention's arguments: window_size, softcap, and
# learnable_sink (1: a random float32 (heads_q,) sink). Each case is a plain case of its entry
# point with some of these set, on variants the default set builds (generator/spec.py
# "default": dense bf16 hd128 window / causal softcap / causal sink; paged split-KV decode
# forms for an hd128 window, hd64 sinks with and without a window, hd256 causal softcap; a
# packed varlen hd128 window). kvcache cases may also set head_dim (else D).
NO_MODEL = {"window": (-1, -1), "softcap": 0.0, "sink": 0}
DENSE_MODEL_CASES = [
    ((1, 1000, 1000, 8, 8, 128, 0, "bf16"), {"window": (63, 0)}),       # a window smaller than a tile
    ((2, 700, 1500, 16, 4, 128, 0, "bf16"), {"window": (128, 128)}),    # both sides, seqlen_q != seqlen_k, GQA
    ((1, 2048, 5000, 8, 8, 128, 1, "bf16"), {"window": (4096, -1)}),    # causal sets right = 0: (4096, 0)
    ((2, 512, 512, 8, 8, 128, 0, "bf16"), {"window": (-1, 0)}),         # (-1, 0) is causal: the plain causal kernel
    ((2, 600, 900, 8, 2, 128, 1, "bf16"), {"softcap": 30.0}),           # Gemma-2's softcap, causal
    ((2, 512, 640, 16, 16, 128, 1, "bf16"), {"sink": 1}),               # gpt-oss's sink, causal
]
KV_MODEL_CASES = [
    ((8, 1, 8192, 32, 8, 0, 256, 0, 0, 0), {"window": (1023, 0)}),                    # Mistral-style window, auto splits
    ((4, 4, 4096, 32, 8, 1, 16, 3, 0, 0), {"window": (127, -1)}),                     # causal + window, page 16, 3 splits
    ((4, 1, 4096, 64, 8, 1, 256, 0, 0, 0), {"head_dim": 64, "sink": 1}),              # gpt-oss full layer: sink
    ((4, 2, 4096, 64, 8, 1, 64, 0, 0, 0), {"head_dim": 64, "window": (128, 0), "sink": 1}),  # its sliding layer
    ((2, 1, 3000, 16, 8, 1, 256, 0, 0, 0), {"head_dim": 256, "softcap": 50.0}),       # Gemma-2 hd256 softcap
]
VL_MODEL_CASES = [
    (([0, 1, 17, 300], [5, 1, 40, 700], 16, 4, 128, 0, 0, None, None), {"window": (63, 0)}),
    (([64, 129, 3, 1000], [64, 200, 3000, 1000], 8, 8, 128, 0, 0, None, [64, 150, 2000, 1000]),
     {"window": (128, 128)}),                                                          # both sides, seqused_k < slot
]
# Packed varlen at the default set's wider head dims (spec.VARLEN_WIDE): DeepSeek MLA prefill's
# (192, 128), v narrower than q and k (head_dim_v), and Gemma's hd256.
VL_WIDE_CASES = [
    (([0, 1, 17, 300, 129], [5, 1, 40, 700, 129], 16, 16, 192, 1, 0, None, None), {"head_dim_v": 128}),
    (([64, 200, 3], [64, 300, 1000], 8, 8, 192, 0, 0, [60, 200, 3], None), {"head_dim_v": 128}),
    (([1, 17, 300], [1, 40, 300], 8, 4, 256, 1, 0, None, None), {}),
]

CASES = ([{"entry": "dense", **dict(zip(DENSE, c)), **NO_MODEL} for c in DENSE_CASES + DENSE_DECODE_CASES]
         + [{"entry": "kvcache", **dict(zip(KV, c)), "head_dim": D, **NO_MODEL} for c in KV_CASES]
         + [{"entry": "varlen", **dict(zip(VL, c)), **NO_MODEL} for c in VL_CASES]
         + [{"entry": "combine", **dict(zip(CB, c))} for c in CB_CASES]
         + [{"entry": "dense", **dict(zip(DENSE, c)), **NO_MODEL, **m} for c, m in DENSE_MODEL_CASES]
         + [{"entry": "kvcache", **dict(zip(KV, c)), "head_dim": D, **NO_MODEL, **m} for c, m in KV_MODEL_CASES]
         + [{"entry": "varlen", **dict(zip(VL, c)), **NO_MODEL, **m} for c, m in VL_MODEL_CASES]
         + [{"entry": "varlen", **dict(zip(VL, c)), **NO_MODEL, **m} for c, m in VL_WIDE_CASES])
for _i, _c in enumerate(CASES):
    _c["seed"] = _i

CUPY = {"bf16": "uint16", "fp16": "float16", "f32": "float32", "i32": "int32"}
WRITTEN = ("o", "lse")                 # outputs: poisoned, each side writes its own
APPENDED = ("k_cache", "v_cache")      # written in place when k/v are appended


def label(case: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in case.items()
                    if k not in ("entry", "seed") and not (k in NO_MODEL and v == NO_MODEL[k]))


def model(case: dict) -> dict:
    """The case's model-variant keyword arguments, as FlashAttention's functions take them."""
    return {"window_size": tuple(case.get("window", NO_MODEL["window"])),
            "softcap": float(case.get("softcap", NO_MODEL["softcap"]))}


def has_model(case: dict) -> bool:
    return any(case.get(k, v) != v for k, v in NO_MODEL.items())


def _pages(n: int, size: int) -> int:
    return (n + size - 1) // size


def tensors(case: dict) -> dict:
    """name -> (shape, dtype) of every tensor the call takes, outputs included."""
    e = case["entry"]
    if e == "dense":
        b, sq, sk, hq, hkv, d, dt = (case[k] for k in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
                                                        "head_dim", "dtype"))
        t = {"q": ((b, sq, hq, d), dt), "k": ((b, sk, hkv, d), dt), "v": ((b, sk, hkv, d), dt),
             "o": ((b, sq, hq, d), dt), "lse": ((b, hq, sq), "f32")}
        return _sink(case, t, hq)
    if e == "kvcache":
        b, sq, cap, hq, hkv, ps, sn = (case[k] for k in ("batch", "seqlen_q", "capacity", "heads_q", "heads_kv",
                                                          "page_size", "seqlen_new"))
        d = case["head_dim"]
        t = {"q": ((b, sq, hq, d), "bf16"), "o": ((b, sq, hq, d), "bf16"), "lse": ((b, hq, sq), "f32"),
             "cache_seqlens": ((b,), "i32")}
        if ps:
            pages = _pages(cap, ps)
            t["k_cache"] = t["v_cache"] = ((b * pages + 3, ps, hkv, d), "bf16")
            t["page_table"] = ((b, pages), "i32")
        else:
            t["k_cache"] = t["v_cache"] = ((b + 2 if case["batch_idx"] else b, cap, hkv, d), "bf16")
            if case["batch_idx"]:
                t["cache_batch_idx"] = ((b,), "i32")
        if sn:
            t["k"] = t["v"] = ((b, sn, hkv, d), "bf16")
        return _sink(case, t, hq)
    if e == "varlen":
        ql, kl, hq, hkv, d, ps = (case[k] for k in ("q_lens", "k_lens", "heads_q", "heads_kv", "head_dim",
                                                     "page_size"))
        b, tq = len(ql), sum(ql)
        dv = case.get("head_dim_v", d)  # v's head dim, and o's
        t = {"q": ((tq, hq, d), "bf16"), "o": ((tq, hq, dv), "bf16"), "lse": ((hq, tq), "f32"),
             "cu_seqlens_q": ((b + 1,), "i32")}
        if ps:
            mp = max(_pages(n, ps) for n in case["used_k"])
            t["k"] = t["v"] = ((b * mp + 3, ps, hkv, d), "bf16")
            t["page_table"] = ((b, mp), "i32")
        else:
            t["k"], t["v"] = ((sum(kl), hkv, d), "bf16"), ((sum(kl), hkv, dv), "bf16")
            t["cu_seqlens_k"] = ((b + 1,), "i32")
        if case["used_q"] is not None:
            t["seqused_q"] = ((b,), "i32")
        if case["used_k"] is not None:
            t["seqused_k"] = ((b,), "i32")
        return _sink(case, t, hq)
    s, b, sq, h, d = (case[k] for k in CB)
    return {"out_partial": ((s, b, sq, h, d), "f32"), "lse_partial": ((s, b, h, sq), "f32"),
            "o": ((b, sq, h, d), "bf16"), "lse": ((b, h, sq), "f32")}


def _sink(case: dict, t: dict, heads_q: int) -> dict:
    if case.get("sink"):
        t["learnable_sink"] = ((heads_q,), "f32")
    return t


def int_values(case: dict) -> dict:
    """The int32 tensors' values (host numpy, small): key counts, offsets, page tables, rows."""
    rng = np.random.default_rng(case["seed"])
    shapes = tensors(case)
    out = {}
    if case["entry"] == "kvcache":
        b, cap, sn = case["batch"], case["capacity"], case["seqlen_new"]
        room = cap - sn
        lens = [room if i == b - 1 else room // 2 + int(rng.integers(0, room // 2 + 1)) for i in range(b)]
        out["cache_seqlens"] = lens
        if "page_table" in shapes:
            pool = shapes["k_cache"][0][0]
            out["page_table"] = rng.permutation(pool)[: b * shapes["page_table"][0][1]]
        if "cache_batch_idx" in shapes:
            out["cache_batch_idx"] = rng.permutation(b + 2)[:b]
    elif case["entry"] == "varlen":
        out["cu_seqlens_q"] = np.concatenate([[0], np.cumsum(case["q_lens"])])
        if "cu_seqlens_k" in shapes:
            out["cu_seqlens_k"] = np.concatenate([[0], np.cumsum(case["k_lens"])])
        for n in ("used_q", "used_k"):
            if case[n] is not None:
                out["seq" + n] = case[n]
        if "page_table" in shapes:
            pool = shapes["k"][0][0]
            out["page_table"] = rng.permutation(pool)[: int(np.prod(shapes["page_table"][0]))]
    return {n: np.asarray(v, dtype=np.int32).reshape(shapes[n][0]) for n, v in out.items()}


def request(case: dict, arrays: dict) -> str:
    """check_lib.cpp's request text; arrays: name -> (ptr, shape, strides in elements, dtype)."""
    e = case["entry"]
    left, right = model(case)["window_size"]
    # softcap as its IEEE-754 bits: exact, and check_lib.cpp parses it without a locale
    words = f"{case.get('causal', 0)} {left} {right} {struct.unpack('<Q', struct.pack('<d', model(case)['softcap']))[0]}"
    head = {"dense": f"dense {words}", "kvcache": f"kvcache {case.get('num_splits', 0)} -1 {words}",
            "varlen": f"varlen 0 -1 {words}", "combine": "combine"}[e]
    lines = [head]
    for n, (ptr, shape, strides, dtype) in arrays.items():
        lines.append(f"t {n} {dtype} {ptr} {len(shape)} {' '.join(map(str, shape))} {' '.join(map(str, strides))}")
    return "\n".join(lines + ["end", ""])


def compact(shape) -> tuple:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def load(lib: Path):
    so = ctypes.CDLL(str(lib))
    so.cubinforge_check_run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    so.cubinforge_check_run.restype = ctypes.c_int

    def call(text: str, launch: bool) -> str:
        buf = ctypes.create_string_buffer(8192)
        so.cubinforge_check_run(text.encode(), int(launch), buf, len(buf))
        return buf.value.decode()
    return call


# --------------------------------------------------------------------------- on the GPU

class CuPyArrays:
    """Device arrays through CuPy (bf16 travels as uint16, reinterpreted by dtype=)."""
    name = "cupy"

    def __init__(self):
        import cupy as cp
        self.cp = cp
        self._bf16 = cp.ElementwiseKernel(
            "float32 f", "uint16 h", "unsigned int x = __float_as_uint(f); h = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;",
            "cf_to_bf16")   # round to nearest even, as the C++ examples' float_to_bf16
        self._bf16(cp.zeros(1, cp.float32))   # NVRTC must work here, else the torch backend

    def normal(self, shape, dtype, seed, lse_partial=False):
        cp = self.cp
        f = cp.random.RandomState(seed).standard_normal(shape, dtype=cp.float32)
        if lse_partial:
            _infs(f, 3, -cp.inf)
        return self._bf16(f) if dtype == "bf16" else f.astype(CUPY[dtype])

    def nan(self, shape, dtype):
        return self.cp.full(shape, 0x7FC0 if dtype == "bf16" else np.nan, dtype=CUPY[dtype])

    def ints(self, host):
        return self.cp.asarray(host)

    def copy(self, x):
        return x.copy()

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def describe(self, x):
        return x.data.ptr, tuple(x.shape), tuple(s // x.itemsize for s in x.strides)

    def differ(self, a, b) -> int:
        """How many elements differ bit for bit (NaN bits included)."""
        bits = {2: self.cp.uint16, 4: self.cp.uint32}[a.itemsize]
        return int(self.cp.count_nonzero(a.view(bits) != b.view(bits)))


class TorchArrays:
    """The same through torch, where CuPy cannot compile kernels (no NVRTC)."""
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        self._dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}

    def normal(self, shape, dtype, seed, lse_partial=False):
        t = self.torch
        f = t.randn(shape, dtype=t.float32, device="cuda", generator=t.Generator("cuda").manual_seed(seed))
        if lse_partial:
            _infs(f, 3, -float("inf"))
        return f.to(self._dt[dtype])   # round to nearest even

    def nan(self, shape, dtype):
        return self.torch.full(shape, float("nan"), dtype=self._dt[dtype], device="cuda")

    def ints(self, host):
        return self.torch.from_numpy(np.ascontiguousarray(host)).to("cuda")

    def copy(self, x):
        return x.clone()

    def sync(self):
        self.torch.cuda.synchronize()

    def describe(self, x):
        return x.data_ptr(), tuple(x.shape), tuple(x.stride())

    def differ(self, a, b) -> int:
        bits = {2: self.torch.int16, 4: self.torch.int32}[a.element_size()]
        return int((a.view(bits) != b.view(bits)).sum())


def backend(which: str):
    if which in ("auto", "cupy"):
        try:
            return CuPyArrays()
        except Exception as e:  # noqa: BLE001  no CuPy, or no NVRTC for its kernels
            if which == "cupy":
                raise
            print(f"note: CuPy unusable here ({type(e).__name__}: {str(e)[:120]}); generating with torch")
    return TorchArrays()


def _infs(f, scale, neg_inf):
    f *= scale
    f[1, 0, :, 0] = neg_inf       # a split that counts for nothing
    f[:, -1, 0, -1] = neg_inf     # a row no split reached


def _device_inputs(xp, case: dict) -> dict:
    ints = int_values(case)
    arrays = {}
    for i, (n, (shape, dtype)) in enumerate(tensors(case).items()):
        if n in ints:
            arrays[n] = xp.ints(ints[n])
        elif n in WRITTEN:   # NaN everywhere: rows no one writes must stay NaN on both sides
            arrays[n] = xp.nan(shape, dtype)
        else:
            arrays[n] = xp.normal(shape, dtype, case["seed"] * 64 + i, lse_partial=n == "lse_partial")
    return arrays


def _python_side(case: dict, a: dict, dt: dict):
    """Runs the call through the Python runtime; (kernels, num_splits)."""
    from cubinforge.runtime import as_device_array, flash_attn_func, last_launch
    from cubinforge.runtime.kvcache import flash_attn_combine, prepare_kvcache
    from cubinforge.runtime.varlen import prepare_varlen

    w = {n: as_device_array(x, dtype=dt[n], what=n) for n, x in a.items()}
    g = w.get
    e = case["entry"]
    mv = {**model(case), "learnable_sink": g("learnable_sink")} if e != "combine" else {}
    if e == "dense":
        flash_attn_func(w["q"], w["k"], w["v"], causal=bool(case["causal"]), out=w["o"], lse=w["lse"], **mv)
        return dense_route(case, last_launch())
    if e == "combine":
        flash_attn_combine(w["out_partial"], w["lse_partial"], out=w["o"], lse=w["lse"])
        return [last_launch().variant], case["num_splits"]
    if e == "kvcache":
        p = prepare_kvcache(w["q"], w["k_cache"], w["v_cache"], k=g("k"), v=g("v"), cache_seqlens=w["cache_seqlens"],
                            cache_batch_idx=g("cache_batch_idx"), page_table=g("page_table"),
                            causal=bool(case["causal"]), num_splits=case["num_splits"], out=w["o"], lse=w["lse"],
                            **mv)
    else:
        p = prepare_varlen(w["q"], w["k"], w["v"], w["cu_seqlens_q"], g("cu_seqlens_k"), seqused_q=g("seqused_q"),
                           seqused_k=g("seqused_k"), page_table=g("page_table"), causal=bool(case["causal"]),
                           out=w["o"], lse=w["lse"], **mv)
    p.run()
    return p.kernels, p.plan.num_splits


def dense_route(case: dict, rec) -> tuple[list, int]:
    """(kernels, num_splits) of the flash_attn_func call ``rec`` records: the record names
    the forward kernel; a call routed to the split-KV form names the combine in its note,
    and its split count is the dispatcher's (the same choice flash_attn_func made)."""
    from cubinforge.runtime import driver
    from cubinforge.runtime.attention import choose_attention_variant
    from cubinforge.runtime.variants import resolve

    m = re.search(r"then (\S+) reduces its splits", rec.note)
    if m is None:
        return [rec.variant], 1
    va = resolve(bool(case["causal"]), **model(case), has_sink=bool(case.get("sink")))
    sizes = dict(zip(("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv"),
                     (case[k] for k in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv"))))
    choice = choose_attention_variant(case["dtype"], case["head_dim"], arch=driver.device_arch(0),
                                      sizes={**sizes, "sm_count": driver.sm_count(0)}, **va.axes)
    if choice.best.variant != rec.variant:
        raise RuntimeError(f"flash_attn_func ran {rec.variant}, the dispatcher says {choice.best.variant}")
    return [rec.variant, m.group(1)], int(choice.params["num_splits"])


def compare(call, xp, case: dict) -> str:
    """'ok', 'skip' (the bundle or registry lacks a variant) or 'fail'; prints one line."""
    t0 = time.perf_counter()
    shapes = tensors(case)
    dt = {n: d for n, (_, d) in shapes.items()}
    py = _device_inputs(xp, case)
    appended = "k" in shapes and case["entry"] == "kvcache"
    mine = [*WRITTEN, *(APPENDED if appended else ())]
    cpp = {**py, **{n: xp.copy(py[n]) for n in mine}}   # the C++ side's own outputs (and caches)
    xp.sync()
    name = f"{case['entry']:8s} {label(case)}"
    try:
        kernels, splits = _python_side(case, py, dt)
    except Exception as e:  # noqa: BLE001  reported, the matrix goes on
        skip = type(e).__name__ == "VariantNotFound"
        print(f"{'SKIP' if skip else 'FAIL'} {name}: Python: {type(e).__name__}: {e}")
        return "skip" if skip else "fail"
    xp.sync()
    reply = call(request(case, {n: (*xp.describe(x), dt[n]) for n, x in cpp.items()}), True)
    if not reply.startswith("ok "):
        skip = "CUDA_ERROR_NOT_FOUND" in reply
        print(f"{'SKIP' if skip else 'FAIL'} {name}: C++: {reply}")
        return "skip" if skip else "fail"
    _, cpp_kernels, cpp_splits = reply.split()
    bad = []
    if cpp_kernels.split(",") != list(kernels) or int(cpp_splits) != splits:
        bad.append(f"Python ran {kernels} with {splits} split(s), C++ {cpp_kernels} with {cpp_splits}")
    for n in mine:
        k = xp.differ(py[n], cpp[n])
        if k:
            bad.append(f"{n} differs in {k} elements")
    if bad:
        print(f"FAIL {name}: " + "; ".join(bad))
        return "fail"
    what = "O, LSE and caches" if appended else "O and LSE"
    print(f"OK   {name}: {' + '.join(kernels)}, {splits} split(s): {what} identical "
          f"({time.perf_counter() - t0:.2f} s)")
    return "ok"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True, help="libcubinforge_check.so (CMake target cubinforge_check)")
    ap.add_argument("--entries", default="dense,kvcache,varlen,combine", help="which entry points' cases to run")
    ap.add_argument("--arrays", default="auto", choices=["auto", "cupy", "torch"],
                    help="what generates the inputs on the GPU (auto: CuPy, else torch)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    call = load(a.lib)
    xp = backend(a.arrays)
    want = set(a.entries.split(","))
    results = [compare(call, xp, c) for c in CASES if c["entry"] in want]
    print(f"{results.count('ok')} agree, {results.count('skip')} skipped, {results.count('fail')} differ "
          f"({time.perf_counter() - t0:.1f} s)")
    return 1 if "fail" in results or not results.count("ok") else 0


if __name__ == "__main__":
    sys.exit(main())
