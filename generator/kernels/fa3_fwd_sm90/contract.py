"""The launch-contract sections this family knows (docs/launch-contract.md).

The parameter list mirrors FlashFwdSm90.kernel's signature as the CuTe DSL lowers it:
coordinate tensors become their dynamic shapes (i32), the LSE tensor a
{pointer, i32 shapes, i64 strides} struct, each TMA atom a 128-byte tensor map. Offsets and
sizes are checked against the cubin's own parameter table by the pipeline.
"""

from __future__ import annotations

from .config import FwdConfig

SWIZZLE_NAMES = {128: "128B", 64: "64B", 32: "32B", 0: "none"}
# (batch, seqlen, heads, head_dim) -> tensor-map order, innermost first.
TMA_DIM_ORDER = [3, 1, 2, 0]


def _i32_struct(name: str, ordinal: int, values: list[str]) -> dict:
    return {
        "name": name, "ordinal": ordinal, "kind": "struct", "size": 4 * len(values), "align": 4,
        "fields": [{"offset": 4 * i, "type": "i32", "value": [v]} for i, v in enumerate(values)],
    }


def _tensormap(name: str, ordinal: int, tensor: str, dtype: str, box: tuple[int, int], swizzle: int) -> dict:
    return {
        "name": name, "ordinal": ordinal, "kind": "tensormap", "size": 128, "align": 64,
        "tensor": tensor, "dtype": dtype, "dims": TMA_DIM_ORDER,
        "box": [box[0], box[1], 1, 1], "element_strides": [1, 1, 1, 1],
        "interleave": "none", "swizzle": SWIZZLE_NAMES[swizzle],
        "l2_promotion": "128B", "oob_fill": "none",
    }


# sm_90 kernels' parameters start at this constant-bank offset; alignment holds for bank
# addresses, so a 64-byte-aligned tensor map can sit at parameter offset 112.
PARAM_BANK_BASE = 0x210


def _lay_out(params: list[dict]) -> list[dict]:
    """Give each parameter the offset the compiler uses: the next bank-aligned slot."""
    end = 0
    for p in params:
        addr = PARAM_BANK_BASE + end
        addr = (addr + p["align"] - 1) // p["align"] * p["align"]
        p["offset"] = addr - PARAM_BANK_BASE
        end = p["offset"] + p["size"]
    return params


def family_contract(cfg: FwdConfig, boxes: dict[str, tuple[int, int]], swizzle: int,
                    swizzles: dict[str, int] | None = None) -> dict:
    """Grid, symbols, tensors, scalars, checks and params for one compiled variant.
    ``swizzles`` gives a tensor's own swizzle where it differs from ``swizzle`` (e4m3)."""
    d = cfg.head_dim
    sw = {n: (swizzles or {}).get(n, swizzle) for n in ("q", "k", "v", "o")}
    params = [
        _i32_struct("q_coords", 0, ["seqlen_q", "heads_q", "batch"]),
        _i32_struct("k_coords", 1, ["seqlen_k", "heads_kv", "batch"]),
        _i32_struct("v_coords", 2, ["seqlen_k", "heads_kv", "batch"]),
        _i32_struct("o_coords", 3, ["seqlen_q", "heads_q", "batch"]),
        {
            # The kernel sees LSE as (seqlen_q, heads_q, batch); the seqlen stride is 1.
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
        _tensormap("tma_q", 5, "q", cfg.dtype, boxes["q"], sw["q"]),
        _tensormap("tma_k", 6, "k", cfg.dtype, boxes["k"], sw["k"]),
        _tensormap("tma_v", 7, "v", cfg.dtype, boxes["v"], sw["v"]),
        _tensormap("tma_o", 8, "o", cfg.out_dtype, boxes["o"], sw["o"]),
        {"name": "softmax_scale_log2", "ordinal": 9, "kind": "scalar", "size": 4, "align": 4,
         "type": "f32", "value": ["softmax_scale", "log2e_mul"]},
        # The two tiled-MMA arguments are compile-time only; the DSL still gives each a byte.
        {"name": "tiled_mma_qk", "ordinal": 10, "kind": "struct", "size": 1, "align": 1, "fields": []},
        {"name": "tiled_mma_pv", "ordinal": 11, "kind": "struct", "size": 1, "align": 1, "fields": []},
    ]
    bshd = {"contiguous_dim": 3, "align_bytes": 16}
    v_dims = ["batch", "seqlen_k", "heads_kv", "head_dim"]
    if cfg.v_layout == "colmajor":
        v_dims = ["batch", "heads_kv", "head_dim", "seqlen_k"]
        # The kernel's view of V is (head_dim, seqlen_k, heads_kv, batch): v_coords keep their
        # values; the tensor map walks seqlen_k innermost.
        params[7]["dims"] = [3, 2, 1, 0]
    scalars = {"softmax_scale": {"type": "f32", "default": ["head_dim", "rsqrt"]}}
    tensors = {
        "q": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd},
        "k": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_k", "heads_kv", "head_dim"], **bshd},
        "v": {"role": "input", "dtype": cfg.dtype, "dims": v_dims, **bshd},
        "o": {"role": "output", "dtype": cfg.out_dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd},
        "lse": {"role": "output", "dtype": "f32", "dims": ["batch", "heads_q", "seqlen_q"],
                "contiguous_dim": 2, "align_bytes": 4},
    }
    if cfg.fp8:
        # q, k and v descales stacked: (3, batch, heads_kv), FA3's (batch, heads_kv) each.
        tensors["descale"] = {"role": "input", "dtype": "f32", "dims": [3, "batch", "heads_kv"],
                              "contiguous_dim": 2, "align_bytes": 4}
        params.append({
            "name": "descale", "ordinal": 12, "kind": "struct", "size": 32, "align": 8,
            "fields": [
                {"offset": 0, "type": "ptr", "value": ["descale.ptr"]},
                {"offset": 8, "type": "i32", "value": ["batch"]},
                {"offset": 12, "type": "i32", "value": ["heads_kv"]},
                {"offset": 16, "type": "i64", "value": ["descale.stride.0"]},
                {"offset": 24, "type": "i64", "value": ["descale.stride.1"]},
            ],
        })
    return {
        "grid": (
            # One CTA per SM, never more CTAs than tiles.
            [["seqlen_q", cfg.tile_m, "ceil_div", "heads_q", "*", "batch", "*", "sm_count", "min"], [1], [1]]
            if cfg.scheduler == "persistent"
            # One CTA per tile on a 1-D grid: the kernel maps blockIdx.x through its tile order.
            else [["seqlen_q", cfg.tile_m, "ceil_div", "heads_q", "*", "batch", "*"], [1], [1]]
            if cfg.scheduler == "lpt"
            else [["seqlen_q", cfg.tile_m, "ceil_div"], ["heads_q"], ["batch"]]
        ),
        "symbols": {
            "batch": {"tensor": "q", "dim": 0, "min": 1},
            "seqlen_q": {"tensor": "q", "dim": 1, "min": 1},
            "heads_q": {"tensor": "q", "dim": 2, "min": 1},
            "head_dim": {"tensor": "q", "dim": 3, "fixed": d},
            "seqlen_k": {"tensor": "k", "dim": 1, "min": 1},
            "heads_kv": {"tensor": "k", "dim": 2, "min": 1},
        },
        "tensors": tensors,
        "scalars": scalars,
        "checks": [
            {"expr": ["heads_q", "heads_kv", "%", 0, "=="],
             "message": "heads_q must be a multiple of heads_kv (MHA, GQA or MQA)"},
            {"expr": ["heads_q", 65535, "<="], "message": "heads_q must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
        ],
        "params": _lay_out(params),
    }
