"""The launch-contract sections this family knows (docs/launch-contract.md), in the SM90 format.

The parameter list mirrors FlashFwdSm100.kernel's signature as the CuTe DSL lowers it, as for
fa3_fwd_sm90: coordinate tensors become their dynamic shapes (i32), LSE a {pointer, shapes,
strides} struct, each TMA atom a 128-byte tensor map. Two differences the cubin shows: the
parameters start at constant-bank offset 0x380 on sm_100a, and each tcgen05 tiled MMA is a
32-byte, 16-aligned argument the kernel never reads (zero bytes are bound). Offsets and sizes
are checked against the cubin's EIATTR_KPARAM_INFO by the pipeline, as for every variant.
"""

from __future__ import annotations

from ..common import i32_struct, lay_out, tensormap

from .config import FwdConfig

PARAM_BANK_BASE = 0x380  # sm_100a: c[0x0][0x380] is the first parameter byte in the SASS


def family_contract(cfg: FwdConfig, boxes: dict[str, tuple[int, int]], swizzle: int) -> dict:
    """Grid, symbols, tensors, scalars, checks and params for one compiled variant."""
    params = [
        i32_struct("q_coords", 0, ["seqlen_q", "heads_q", "batch"]),
        i32_struct("k_coords", 1, ["seqlen_k", "heads_kv", "batch"]),
        # V is seen as (head_dim, seqlen_k, heads_kv, batch); head_dim is static.
        i32_struct("v_coords", 2, ["seqlen_k", "heads_kv", "batch"]),
        i32_struct("o_coords", 3, ["seqlen_q", "heads_q", "batch"]),
        {
            "name": "lse", "ordinal": 4, "kind": "struct", "size": 40, "align": 8,
            "fields": [
                {"offset": 0, "type": "ptr", "value": ["lse.ptr"]},
                {"offset": 8, "type": "i32", "value": ["seqlen_q"]},
                {"offset": 12, "type": "i32", "value": ["heads_q"]},
                {"offset": 16, "type": "i32", "value": ["batch"]},
                {"offset": 24, "type": "i64", "value": ["lse.stride.1"]},
                {"offset": 32, "type": "i64", "value": ["lse.stride.0"]},
            ],
        },
        tensormap("tma_q", 5, "q", cfg.dtype, boxes["q"], swizzle),
        tensormap("tma_k", 6, "k", cfg.dtype, boxes["k"], swizzle),
        tensormap("tma_v", 7, "v", cfg.dtype, boxes["v"], swizzle),
        tensormap("tma_o", 8, "o", cfg.dtype, boxes["o"], swizzle),
        {"name": "softmax_scale_log2", "ordinal": 9, "kind": "scalar", "size": 4, "align": 4,
         "type": "f32", "value": ["softmax_scale", "log2e_mul"]},
        {"name": "tiled_mma_qk", "ordinal": 10, "kind": "struct", "size": 32, "align": 16, "fields": []},
        {"name": "tiled_mma_pv", "ordinal": 11, "kind": "struct", "size": 32, "align": 16, "fields": []},
    ]
    bshd = {"contiguous_dim": 3, "align_bytes": 16}
    d = cfg.head_dim
    return {
        # One CTA per (128-row tile, head, batch), cluster (1, 1, 1).
        "grid": [["seqlen_q", cfg.tile_m, "ceil_div"], ["heads_q"], ["batch"]],
        "symbols": {
            "batch": {"tensor": "q", "dim": 0, "min": 1},
            "seqlen_q": {"tensor": "q", "dim": 1, "min": 1},
            "heads_q": {"tensor": "q", "dim": 2, "min": 1},
            "head_dim": {"tensor": "q", "dim": 3, "fixed": d},
            "seqlen_k": {"tensor": "k", "dim": 1, "min": 1},
            "heads_kv": {"tensor": "k", "dim": 2, "min": 1},
        },
        "tensors": {
            "q": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd},
            "k": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_k", "heads_kv", "head_dim"], **bshd},
            "v": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_k", "heads_kv", "head_dim"], **bshd},
            "o": {"role": "output", "dtype": cfg.dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd},
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
        "params": lay_out(params),
    }
