"""Shared builders for the runtime's CPU tests: a small hand-written FA-like contract,
raw-pointer arrays, a temporary registry, and the build-and-read-back step of the slow
compile tests. (No tests here.)"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from pathlib import Path

from cubinforge.runtime.arrays import DeviceArray

BASE = 0x7F00_0000_0000  # a plausible, 256-byte aligned device address


def fa_contract(variant="fa3_fwd-sm_90a-bf16-hd128-causal", dtype="bf16", hd=128, arch="sm_90a"):
    def t(role, dims, dt=dtype, cdim=3, align=16):
        return {"role": role, "dtype": dt, "dims": dims, "contiguous_dim": cdim, "align_bytes": align}
    return {
        "contract_version": 1, "variant": variant, "arch": arch, "entry": "kernel_fa3_fwd",
        "block": [384, 1, 1], "cluster": [1, 1, 1],
        "dynamic_smem_bytes": 164864, "static_smem_bytes": 1024,
        "grid": [["seqlen_q", 128, "ceil_div"], ["heads_q"], ["batch"]],
        "symbols": {
            "batch": {"tensor": "q", "dim": 0, "min": 1},
            "seqlen_q": {"tensor": "q", "dim": 1, "min": 1},
            "heads_q": {"tensor": "q", "dim": 2, "min": 1},
            "head_dim": {"tensor": "q", "dim": 3, "fixed": hd},
            "seqlen_k": {"tensor": "k", "dim": 1, "min": 1},
            "heads_kv": {"tensor": "k", "dim": 2, "min": 1},
        },
        "tensors": {
            "q": t("input", ["batch", "seqlen_q", "heads_q", "head_dim"]),
            "k": t("input", ["batch", "seqlen_k", "heads_kv", "head_dim"]),
            "v": t("input", ["batch", "seqlen_k", "heads_kv", "head_dim"]),
            "o": t("output", ["batch", "seqlen_q", "heads_q", "head_dim"]),
            "lse": t("output", ["batch", "heads_q", "seqlen_q"], "f32", 2, 4),
        },
        "scalars": {"softmax_scale": {"type": "f32", "default": ["head_dim", "rsqrt"]}},
        "checks": [{"expr": ["heads_q", "heads_kv", "%", 0, "=="],
                    "message": "heads_q must be a multiple of heads_kv (GQA)"}],
        "params": [
            {"ordinal": 0, "offset": 0, "size": 16, "align": 4, "name": "q_coord", "kind": "struct",
             "fields": [{"offset": 0, "type": "i32", "value": ["seqlen_q"]},
                        {"offset": 4, "type": "i32", "value": ["head_dim"]},
                        {"offset": 8, "type": "i32", "value": ["heads_q"]},
                        {"offset": 12, "type": "i32", "value": ["batch"]}]},
            {"ordinal": 1, "offset": 16, "size": 40, "align": 8, "name": "lse", "kind": "struct",
             "fields": [{"offset": 0, "type": "ptr", "value": ["lse.ptr"]},
                        {"offset": 8, "type": "i32", "value": ["seqlen_q"]},
                        {"offset": 12, "type": "i32", "value": ["heads_q"]},
                        {"offset": 16, "type": "i32", "value": ["batch"]},
                        {"offset": 24, "type": "i64", "value": ["lse.stride.1"]},
                        {"offset": 32, "type": "i64", "value": ["lse.stride.0"]}]},
            {"ordinal": 2, "offset": 64, "size": 128, "align": 64, "name": "tma_q", "kind": "tensormap",
             "tensor": "q", "dtype": dtype, "dims": [3, 1, 2, 0], "box": [64, 128, 1, 1],
             "element_strides": [1, 1, 1, 1], "interleave": "none", "swizzle": "128B",
             "l2_promotion": "128B", "oob_fill": "none"},
            {"ordinal": 3, "offset": 192, "size": 4, "align": 4, "name": "scale_log2", "kind": "scalar",
             "type": "f32", "value": ["softmax_scale", "log2e_mul"]},
        ],
    }


def arr(shape, dtype="bf16", strides=None, offset=0, device=0, base=BASE):
    return DeviceArray.from_pointer(base + offset, shape, strides, dtype, device=device)


def fa_arrays(b=2, sq=300, sk=500, hq=8, hkv=2, d=128, dtype="bf16", device=0):
    """q/k/v/o/lse as raw-pointer arrays in disjoint (fake) address ranges."""
    mb = 1 << 30
    return {
        "q": arr((b, sq, hq, d), dtype, base=BASE, device=device),
        "k": arr((b, sk, hkv, d), dtype, base=BASE + mb, device=device),
        "v": arr((b, sk, hkv, d), dtype, base=BASE + 2 * mb, device=device),
        "o": arr((b, sq, hq, d), dtype, base=BASE + 3 * mb, device=device),
        "lse": arr((b, hq, sq), "f32", base=BASE + 4 * mb, device=device),
    }


def e4m3_colmajor_arrays(b, sq, sk, hq, hkv, d=128):
    """The dense e4m3 forward's arrays with V column-major (seqlen_k storage padded to 16 B),
    bf16 O and the stacked (3, batch, heads_kv) descales, at fixed fake addresses."""
    pad = -(-sk // 16) * 16
    return {
        "q": DeviceArray(0x10000, (b, sq, hq, d), None, "e4m3", 0),
        "k": DeviceArray(0x20000, (b, sk, hkv, d), None, "e4m3", 0),
        "v": DeviceArray(0x30000, (b, hkv, d, sk), (hkv * d * pad, d * pad, pad, 1), "e4m3", 0),
        "o": DeviceArray(0x40000, (b, sq, hq, d), None, "bf16", 0),
        "lse": DeviceArray(0x50000, (b, hq, sq), None, "f32", 0),
        "descale": DeviceArray(0x60000, (3, b, hkv), None, "f32", 0),
    }


def manifest(family="fa3_fwd", arch="sm_90a", dtype="bf16", hd=128, causal=False, cubin=b"\x7fELF fake",
             variant=None, **axes):
    variant = variant or f"{family}-{arch}-{dtype}-hd{hd}" + ("-causal" if causal else "")
    c = fa_contract(variant, dtype, hd, arch)
    all_axes = {"arch": arch, "dtype": dtype, "head_dim": hd, "causal": causal, "varlen": False,
                "paged_kv": False, "pack_gqa": False, "split_kv": False, "scheduler": "single",
                "tile_m": 128, "tile_n": 128}
    all_axes.update(axes)
    return {
        "manifest_version": 1, "variant": variant, "family": family, "axes": all_axes,
        "cubin": {"sha256": hashlib.sha256(cubin).hexdigest(), "size": len(cubin)},
        "contract": c,
        "metadata": {"entry": c["entry"], "registers": 168, "static_smem_bytes": 1024,
                     "dynamic_smem_bytes": c["dynamic_smem_bytes"], "max_threads": 384,
                     "param_table": [{"ordinal": p["ordinal"], "offset": p["offset"], "size": p["size"]}
                                     for p in c["params"]],
                     "block": c["block"], "cluster": c["cluster"]},
        "provenance": {"test": True},
    }


def write_registry(home: Path, manifests, blobs=None) -> Path:
    (home / "manifests").mkdir(parents=True, exist_ok=True)
    for m in manifests:
        (home / "manifests" / f"{m['variant']}.json").write_text(json.dumps(m))
    for data in (blobs or []):
        sha = hashlib.sha256(data).hexdigest()
        p = home / "blobs" / "sha256" / sha[:2] / sha
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return home


@contextlib.contextmanager
def registry_source(home: Path, manifests, blobs=None):
    """A LocalSource over a registry of these manifests, with the runtime's caches cleared
    before and after (what every mocked-driver test's `source` fixture needs)."""
    from cubinforge.runtime import LocalSource, clear_cache

    write_registry(home, manifests, blobs)
    clear_cache()
    try:
        yield LocalSource(home)
    finally:
        clear_cache()


def refused_or_copied(mock, call, name="q"):
    """Run `call` (a launch whose array `name` is misaligned) under the mocked driver: the
    runtime either refuses it (InputError, nothing launched) or copies that array into an
    aligned buffer first (last_launch().copies names it)."""
    from cubinforge.runtime import InputError, last_launch

    n = mock.counts["cuLaunchKernelEx"]
    try:
        call()
    except InputError:
        pass
    assert mock.counts["cuLaunchKernelEx"] == n or last_launch().copies == (name,)


def deep(d):
    return copy.deepcopy(d)


def varlen_contract_of(cfg):
    """The loaded launch contract of a varlen FwdConfig, built as the generator builds it, with
    every tensor map's box (q/o by tile_m, k/v by tile_n, the paged chunks by 16 rows; the
    contract takes the ones it maps)."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import varlen_contract
    from cubinforge.runtime.contract import load_contract

    boxes = {"q": (64, cfg.tile_m), "k": (64, cfg.tile_n), "v": (64, cfg.tile_n), "o": (64, cfg.tile_m),
             "kc": (64, 16), "vc": (64, 16)}
    c = varlen_contract(cfg, boxes, 128)
    return load_contract({"contract_version": 1, "variant": "t", "arch": "sm_90a", "entry": "e",
                          "block": [cfg.threads, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": 1,
                          "static_smem_bytes": 0, **c})


def checked_plan(self, arrays, scalars, stream=0):
    """A stand-in for launcher.Kernel.plan with no driver: binds the contract on 132 SMs, checks
    every tensor-map recipe against its array, packs the parameters (descriptors as 128 zero
    bytes), and returns a plan whose grid and scalars the tests read."""
    from cubinforge.runtime import launcher, tensormap
    from cubinforge.runtime.contract import bind
    from cubinforge.runtime.params import build_params

    b = bind(self.contract, arrays, scalars, {"sm_count": 132})
    for p in self.contract.params:
        if p.kind == "tensormap":
            tensormap.tensormap_args(p.spec, b.tensors[p.spec["tensor"]], p.spec["tensor"])
    build_params(b, encode=lambda spec, a, name: bytes(128))
    plan = launcher._Plan(b.grid, 0, [], None)
    plan.scalars = dict(scalars)
    return plan


def built_records(chosen) -> tuple:
    """Build `chosen` (spec Variants) into the test's registry (CUBINFORGE_HOME), assert every
    one built (the build's summary says why not); return (the Registry, each variant's record).
    The registry needs the server extra: imported here, not at module level."""
    from cubinforge.generator import build
    from cubinforge.registry import Registry

    reg = Registry()
    outcomes = build.build(chosen, reg, jobs=1, progress=False)
    assert all(o.status == "built" for o in outcomes), build.summary(outcomes)
    return reg, [reg.get(o.variant) for o in outcomes]
