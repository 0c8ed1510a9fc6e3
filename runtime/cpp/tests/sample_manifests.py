"""Hand-written manifests with a realistic FA3-class SM90 forward contract, for the C++ tests.

The parameter layout is the one the CuTe DSL attention forward has
(generator/kernels/fa3_fwd_sm90/contract.py, with offsets as the cubin's KPARAM table gives
them): four coordinate-tensor structs (i32 shapes), an LSE struct {ptr, i32 shapes, i64
strides}, four 128-byte tensor maps, an f32 `softmax_scale * log2(e)` and two 1-byte
compile-time-only arguments. The cubins are fake bytes.
"""

from __future__ import annotations

import hashlib

ENTRY = "kernel_cutlass_kernel_flash_attn_fwd_sm90_0"


def _coord(ordinal: int, name: str, offset: int, symbols: list[str]) -> dict:
    return {"ordinal": ordinal, "name": name, "kind": "struct", "offset": offset, "size": 4 * len(symbols), "align": 4,
            "fields": [{"offset": 4 * i, "type": "i32", "value": [s]} for i, s in enumerate(symbols)]}


def _tma(ordinal: int, name: str, offset: int, tensor: str, dtype: str, head_dim: int, tile: int) -> dict:
    return {"ordinal": ordinal, "name": name, "kind": "tensormap", "offset": offset, "size": 128, "align": 64,
            "tensor": tensor, "dtype": dtype, "dims": [3, 1, 2, 0], "box": [min(head_dim, 64), tile, 1, 1],
            "element_strides": [1, 1, 1, 1], "interleave": "none", "swizzle": "128B",
            "l2_promotion": "128B", "oob_fill": "none"}


def contract(arch: str = "sm_90a", dtype: str = "bf16", head_dim: int = 128, causal: bool = True,
             tile_m: int = 128, tile_n: int = 128, cluster=(1, 1, 1)) -> dict:
    name = variant_name(arch, dtype, head_dim, causal)
    qdims = ["batch", "seqlen_q", "heads_q", "head_dim"]
    kdims = ["batch", "seqlen_k", "heads_kv", "head_dim"]
    io = {"dtype": dtype, "contiguous_dim": 3, "align_bytes": 16}
    return {
        "contract_version": 1,
        "variant": name,
        "arch": arch,
        "entry": ENTRY,
        "block": [384, 1, 1],
        "cluster": list(cluster),
        "dynamic_smem_bytes": 164864 if head_dim == 128 else 98304,
        "static_smem_bytes": 1024,
        "grid": [["seqlen_q", tile_m, "ceil_div"], ["heads_q"], ["batch"]],
        "symbols": {
            "batch": {"tensor": "q", "dim": 0, "min": 1},
            "seqlen_q": {"tensor": "q", "dim": 1, "min": 1},
            "heads_q": {"tensor": "q", "dim": 2, "min": 1},
            "head_dim": {"tensor": "q", "dim": 3, "fixed": head_dim},
            "seqlen_k": {"tensor": "k", "dim": 1, "min": 1},
            "heads_kv": {"tensor": "k", "dim": 2, "min": 1},
        },
        "tensors": {
            "q": {"role": "input", "dims": qdims, **io},
            "k": {"role": "input", "dims": kdims, **io},
            "v": {"role": "input", "dims": kdims, **io},
            "o": {"role": "output", "dims": qdims, **io},
            "lse": {"role": "output", "dtype": "f32", "dims": ["batch", "heads_q", "seqlen_q"],
                    "contiguous_dim": 2, "align_bytes": 4},
        },
        "scalars": {"softmax_scale": {"type": "f32", "default": ["head_dim", "rsqrt"]}},
        "checks": [
            {"expr": ["heads_q", "heads_kv", "%", 0, "=="],
             "message": "heads_q must be a multiple of heads_kv (MHA, GQA or MQA)"},
            {"expr": ["heads_q", 65535, "<="], "message": "heads_q must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
        ],
        "params": [
            _coord(0, "q_coords", 0, ["seqlen_q", "heads_q", "batch"]),
            _coord(1, "k_coords", 12, ["seqlen_k", "heads_kv", "batch"]),
            _coord(2, "v_coords", 24, ["seqlen_k", "heads_kv", "batch"]),
            _coord(3, "o_coords", 36, ["seqlen_q", "heads_q", "batch"]),
            {"ordinal": 4, "name": "lse", "kind": "struct", "offset": 48, "size": 40, "align": 8,
             "fields": [
                 {"offset": 0, "type": "ptr", "value": ["lse.ptr"]},
                 {"offset": 8, "type": "i32", "value": ["seqlen_q"]},
                 {"offset": 12, "type": "i32", "value": ["heads_q"]},
                 {"offset": 16, "type": "i32", "value": ["batch"]},
                 {"offset": 24, "type": "i64", "value": ["lse.stride.1"]},
                 {"offset": 32, "type": "i64", "value": ["lse.stride.0"]},
             ]},
            _tma(5, "tma_q", 128, "q", dtype, head_dim, tile_m),
            _tma(6, "tma_k", 256, "k", dtype, head_dim, tile_n),
            _tma(7, "tma_v", 384, "v", dtype, head_dim, tile_n),
            _tma(8, "tma_o", 512, "o", dtype, head_dim, tile_m),
            {"ordinal": 9, "name": "softmax_scale_log2", "kind": "scalar", "offset": 640, "size": 4, "align": 4,
             "type": "f32", "value": ["softmax_scale", "log2e_mul"]},
            {"ordinal": 10, "name": "tiled_mma_qk", "kind": "struct", "offset": 644, "size": 1, "align": 1, "fields": []},
            {"ordinal": 11, "name": "tiled_mma_pv", "kind": "struct", "offset": 645, "size": 1, "align": 1, "fields": []},
        ],
    }


def variant_name(arch: str, dtype: str, head_dim: int, causal: bool) -> str:
    return f"fa3_fwd-{arch}-{dtype}-hd{head_dim}" + ("-causal" if causal else "")


def manifest(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, **kw) -> tuple[dict, bytes]:
    """A manifest and its (fake) cubin bytes."""
    name = variant_name(arch, dtype, head_dim, causal)
    cubin = b"\x7fELF fake cubin for " + name.encode()
    sha = hashlib.sha256(cubin).hexdigest()
    c = contract(arch, dtype, head_dim, causal, **kw)
    return ({"manifest_version": 1, "variant": name, "family": "fa3_fwd",
             "axes": {"arch": arch, "dtype": dtype, "head_dim": head_dim, "causal": causal, "varlen": False,
                      "paged_kv": False, "pack_gqa": False, "split_kv": False, "scheduler": "single",
                      "tile_m": 128, "tile_n": 128},
             "cubin": {"sha256": sha, "size": len(cubin)},
             "contract": c, "metadata": {}, "provenance": {"source": "hand-written test manifest"}},
            cubin)


def sample_bundle() -> tuple[list[dict], dict[str, bytes]]:
    """Six SM90 variants (bf16 hd64/hd128 x causal, fp16 hd128 x causal) and one SM100 variant
    with a 2x1x1 cluster; no variant has head_dim 96 or fp16 hd64."""
    specs = [("sm_90a", "bf16", 64, False), ("sm_90a", "bf16", 64, True), ("sm_90a", "bf16", 128, False),
             ("sm_90a", "bf16", 128, True), ("sm_90a", "fp16", 128, False), ("sm_90a", "fp16", 128, True)]
    manifests, blobs = [], {}
    for arch, dtype, hd, causal in specs:
        m, b = manifest(arch, dtype, hd, causal)
        manifests.append(m)
        blobs[m["cubin"]["sha256"]] = b
    m, b = manifest("sm_100a", "bf16", 128, True, cluster=(2, 1, 1))
    manifests.append(m)
    blobs[m["cubin"]["sha256"]] = b
    return manifests, blobs
