"""The launch-contract sections this family knows (docs/launch-contract.md).

The parameter list mirrors FlashFwdSm90.kernel's signature as the CuTe DSL lowers it:
coordinate tensors become their dynamic shapes (i32), the LSE tensor a
{pointer, i32 shapes, i64 strides} struct, each TMA atom a 128-byte tensor map. Offsets and
sizes are checked against the cubin's own parameter table by the pipeline.
"""

from __future__ import annotations

from ..common import i32_struct, lay_out, tensor_struct, tensormap
from .config import FwdConfig
from .schedule import varlen_grid_expr

# sm_90 kernels' parameters start at this constant-bank offset; alignment holds for bank
# addresses, so a 64-byte-aligned tensor map can sit at parameter offset 112.
PARAM_BANK_BASE = 0x210


def window_expr(side: str, reach: str | list) -> list:
    """One side of the window as the kernel takes it (block_range.window_bounds): a negative
    value is unbounded, which `reach` (seqlen_k on the left, seqlen_q on the right) already
    is, and nothing beyond `reach` differs from it, so no kernel sum can overflow:
    min(max(w, -1) + (w < 0) * (reach + 1), reach). `reach` may be an expression: the
    inference forms bound every sequence's keys by the cache's capacity (or total_k) and its
    queries by total_q, which reach every sequence's window as its own lengths would."""
    r = list(reach) if isinstance(reach, (list, tuple)) else [reach]
    return [side, -1, "max", side, 0, "<", *r, 1, "+", "*", "+", *r, "min"]


def scale_log2_value(cfg: FwdConfig) -> list:
    """softmax_scale_log2's value: softcap moves the scale into tanh's argument
    (softmax.apply_softcap), so the exponent's factor is softcap * log2(e)."""
    return ["softcap", "log2e_mul"] if cfg.softcap else ["softmax_scale", "log2e_mul"]


def variant_args(cfg: FwdConfig, reach_k: str | list = "seqlen_k", reach_q: str | list = "seqlen_q"):
    """The model variants' kernel arguments, in the kernels' order (softcap_pre, window_left,
    window_right, learnable_sink; each only where its axis is on), with the scalars and
    tensors they read: (params without ordinals, scalars, tensors). One home for the dense
    and the inference contracts; `reach_*` as window_expr takes them."""
    params, scalars, tensors = [], {}, {}
    if cfg.softcap:
        # A softcap variant needs its cap: the default 0 makes softcap_pre a division by zero,
        # which both launchers refuse (the C++ table wants a default for every scalar).
        scalars["softcap"] = {"type": "f32", "default": [0.0]}
        params.append({"name": "softcap_pre", "ordinal": None, "kind": "scalar", "size": 4,
                       "align": 4, "type": "f32", "value": ["softmax_scale", "softcap", "/"]})
    if cfg.local:
        # FlashAttention's window_size: -1 (any negative) is unbounded; the default is (-1, -1).
        scalars["window_left"] = {"type": "i32", "default": [-1]}
        scalars["window_right"] = {"type": "i32", "default": [-1]}
        for side, reach in (("window_left", reach_k), ("window_right", reach_q)):
            params.append({"name": side, "ordinal": None, "kind": "scalar", "size": 4, "align": 4,
                           "type": "i32", "value": window_expr(side, reach)})
    if cfg.learnable_sink:
        tensors["learnable_sink"] = {"role": "input", "dtype": "f32", "dims": ["heads_q"],
                                     "contiguous_dim": 0, "align_bytes": 4}
        params.append({
            "name": "learnable_sink", "ordinal": None, "kind": "struct", "size": 16, "align": 8,
            "fields": [{"offset": 0, "type": "ptr", "value": ["learnable_sink.ptr"]},
                       {"offset": 8, "type": "i32", "value": ["heads_q"]}],
        })
    return params, scalars, tensors


# e4m3: q, k and v descales stacked, (3, batch, heads_kv), FA3's (batch, heads_kv) each,
# indexed by q's batch row (descale.py).
DESCALE_TENSOR = {"role": "input", "dtype": "f32", "dims": [3, "batch", "heads_kv"], "contiguous_dim": 2,
                  "align_bytes": 4}


def descale_param(ordinal: int) -> dict:
    return {
        "name": "descale", "ordinal": ordinal, "kind": "struct", "size": 32, "align": 8,
        "fields": [
            {"offset": 0, "type": "ptr", "value": ["descale.ptr"]},
            {"offset": 8, "type": "i32", "value": ["batch"]},
            {"offset": 12, "type": "i32", "value": ["heads_kv"]},
            {"offset": 16, "type": "i64", "value": ["descale.stride.0"]},
            {"offset": 24, "type": "i64", "value": ["descale.stride.1"]},
        ],
    }


def block_descale_parts(cfg: FwdConfig, first_ordinal: int) -> tuple[list, dict, dict, list]:
    """descale_block: the q_descale (batch, heads_q, q_descale_blocks) and k_descale (batch,
    heads_kv, k_descale_blocks) float32 tensors, quantize_fp8's per-block shape, as the
    kernel's mDescaleQ / mDescaleK: (params, symbols, tensors, checks)."""
    bq, bk = cfg.descale_blocks
    params, symbols, tensors, checks = [], {}, {}, []
    for i, (t, heads, seqlen, block) in enumerate((("q_descale", "heads_q", "seqlen_q", bq),
                                                   ("k_descale", "heads_kv", "seqlen_k", bk))):
        blocks = f"{t}_blocks"
        params.append(tensor_struct(t, first_ordinal + i, t, ["batch", heads, blocks], [0, 1]))
        symbols[blocks] = {"tensor": t, "dim": 2, "min": 1}
        tensors[t] = {"role": "input", "dtype": "f32", "dims": ["batch", heads, blocks], "contiguous_dim": 2,
                      "align_bytes": 4}
        checks.append({"expr": [blocks, seqlen, block, "ceil_div", "=="],
                       "message": f"{t} must be (batch, {heads}, ceil({seqlen} / {block})): this variant's "
                                  f"{t[0]} descale blocks are {block} tokens (quantize_fp8(..., block={block}))"})
    return params, symbols, tensors, checks


def family_contract(cfg: FwdConfig, boxes: dict[str, tuple[int, int]], swizzle: int | dict[str, int]) -> dict:
    """Grid, symbols, tensors, scalars, checks and params for one compiled variant.
    `swizzle`: one for every tensor map, or one per tensor (V and O rows may be narrower;
    e4m3's column-major V rows are keys, its O is bf16)."""
    d = cfg.head_dim
    swz = swizzle if isinstance(swizzle, dict) else {t: swizzle for t in "qkvo"}
    # V and O are head_dim_v wide: its own symbol only where it differs, so plain contracts stay.
    dv_sym = "head_dim_v" if cfg.head_dim_v != d else "head_dim"
    params = [
        i32_struct("q_coords", 0, ["seqlen_q", "heads_q", "batch"]),
        i32_struct("k_coords", 1, ["seqlen_k", "heads_kv", "batch"]),
        i32_struct("v_coords", 2, ["seqlen_k", "heads_kv", "batch"]),
        i32_struct("o_coords", 3, ["seqlen_q", "heads_q", "batch"]),
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
        tensormap("tma_q", 5, "q", cfg.dtype, boxes["q"], swz["q"]),
        tensormap("tma_k", 6, "k", cfg.dtype, boxes["k"], swz["k"]),
        tensormap("tma_v", 7, "v", cfg.dtype, boxes["v"], swz["v"]),
        tensormap("tma_o", 8, "o", cfg.out_dtype, boxes["o"], swz["o"]),
        {"name": "softmax_scale_log2", "ordinal": 9, "kind": "scalar", "size": 4, "align": 4,
         # softcap: the softmax exponent is softcap * tanh(..) * log2(e) (softmax.apply_softcap).
         "type": "f32", "value": scale_log2_value(cfg)},
        # The two tiled-MMA arguments are compile-time only; the DSL still gives each a byte.
        {"name": "tiled_mma_qk", "ordinal": 10, "kind": "struct", "size": 1, "align": 1, "fields": []},
        {"name": "tiled_mma_pv", "ordinal": 11, "kind": "struct", "size": 1, "align": 1, "fields": []},
    ]
    # The variants' arguments follow, in the kernel's order, each only where its axis is on.
    scalars = {"softmax_scale": {"type": "f32", "default": ["head_dim", "rsqrt"]}}
    var_params, var_scalars, tensors = variant_args(cfg)
    scalars.update(var_scalars)
    for p in var_params:
        p["ordinal"] = len(params)
        params.append(p)
    bshd = {"contiguous_dim": 3, "align_bytes": 16}
    v_dims = ["batch", "seqlen_k", "heads_kv", dv_sym]
    if cfg.v_layout == "colmajor":
        v_dims = ["batch", "heads_kv", dv_sym, "seqlen_k"]
        # The kernel's view of V is (head_dim, seqlen_k, heads_kv, batch): v_coords keep their
        # values; the tensor map walks seqlen_k innermost.
        params[7]["dims"] = [3, 2, 1, 0]
    block_symbols, block_checks = {}, []
    if cfg.fp8:
        tensors["descale"] = DESCALE_TENSOR
        params.append(descale_param(len(params)))
    if cfg.descale_blocks[1]:
        block_params, block_symbols, block_tensors, block_checks = block_descale_parts(cfg, len(params))
        params += block_params
        tensors.update(block_tensors)
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
            **({dv_sym: {"tensor": "v", "dim": 3, "fixed": cfg.head_dim_v}} if dv_sym != "head_dim" else {}),
            **block_symbols,
        },
        "tensors": {
            "q": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd},
            "k": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_k", "heads_kv", "head_dim"], **bshd},
            "v": {"role": "input", "dtype": cfg.dtype, "dims": v_dims, **bshd},
            "o": {"role": "output", "dtype": cfg.out_dtype, "dims": ["batch", "seqlen_q", "heads_q", dv_sym], **bshd},
            "lse": {"role": "output", "dtype": "f32", "dims": ["batch", "heads_q", "seqlen_q"],
                    "contiguous_dim": 2, "align_bytes": 4},
            **tensors,
        },
        "scalars": scalars,
        "checks": [
            {"expr": ["heads_q", "heads_kv", "%", 0, "=="],
             "message": "heads_q must be a multiple of heads_kv (MHA, GQA or MQA)"},
            {"expr": ["heads_q", 65535, "<="], "message": "heads_q must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
            *block_checks,
        ],
        "params": lay_out(params, PARAM_BANK_BASE),
    }


def inference_contract(cfg: FwdConfig, boxes: dict[str, tuple[int, int]], swizzle: int | dict[str, int]) -> dict:
    """The contract of a split_kv / pack_gqa / paged_kv variant (inference.FlashFwdSm90Inference).

    Tensors: q; k and v (dense (batch, seqlen_k, ...) or the paged cache (num_pages,
    page_size, ...)); seqused_k (keys per sequence); page_table when paged; o and lse, or with
    split_kv the fp32 partials o_partial (num_splits, batch, seqlen_q, heads_q, d) and
    lse_partial (num_splits, batch, heads_q, seqlen_q) for attn_combine.
    """
    swz = swizzle if isinstance(swizzle, dict) else {t: swizzle for t in "qkvo"}
    d = cfg.head_dim
    kv_rows = ["page_size"] if cfg.paged_kv else ["seqlen_k"]
    kv_outer = "num_pages" if cfg.paged_kv else "batch"
    o_name, lse_name = ("o_partial", "lse_partial") if cfg.split_kv else ("o", "lse")
    params: list[dict] = []

    def add(p):
        p["ordinal"] = len(params)
        params.append(p)

    if cfg.pack_gqa:  # Q as a plain tensor in the kernel's (seqlen, d, heads, batch) view
        add(tensor_struct("q", 0, "q", ["seqlen_q", "heads_q", "batch"], [1, 2, 0]))
    else:
        add(i32_struct("q_coords", 0, ["seqlen_q", "heads_q", "batch"]))
    add(i32_struct("k_coords", 0, kv_rows + ["heads_kv", kv_outer]))
    add(i32_struct("v_coords", 0, kv_rows + ["heads_kv", kv_outer]))
    if cfg.split_kv:
        add(tensor_struct(o_name, 0, o_name, ["num_splits", "batch", "seqlen_q", "heads_q"], [0, 1, 2, 3]))
        add(tensor_struct(lse_name, 0, lse_name, ["num_splits", "batch", "heads_q", "seqlen_q"], [0, 1, 2]))
    else:
        add(tensor_struct(o_name, 0, o_name, ["batch", "seqlen_q", "heads_q"], [0, 1, 2]))
        add(tensor_struct(lse_name, 0, lse_name, ["batch", "heads_q", "seqlen_q"], [0, 1]))
    if not cfg.pack_gqa:
        add(tensormap("tma_q", 0, "q", cfg.dtype, boxes["q"], swz["q"]))
    add(tensormap("tma_k", 0, "k", cfg.dtype, boxes["k"], swz["k"]))
    add(tensormap("tma_v", 0, "v", cfg.dtype, boxes["v"], swz["v"]))
    if cfg.paged_kv:
        add(i32_struct("kc_coords", 0, kv_rows + ["heads_kv", kv_outer]))
        add(i32_struct("vc_coords", 0, kv_rows + ["heads_kv", kv_outer]))
        add(tensormap("tma_k_chunk", 0, "k", cfg.dtype, boxes["kc"], swz["k"]))
        add(tensormap("tma_v_chunk", 0, "v", cfg.dtype, boxes["vc"], swz["v"]))
    add({"name": "softmax_scale_log2", "ordinal": 0, "kind": "scalar", "size": 4, "align": 4,
         "type": "f32", "value": scale_log2_value(cfg)})
    add(tensor_struct("seqused_k", 0, "seqused_k", ["batch"], []))
    if cfg.paged_kv:
        add(tensor_struct("page_table", 0, "page_table", ["batch", "max_pages"], [0]))
    add({"name": "tiled_mma_qk", "ordinal": 0, "kind": "struct", "size": 1, "align": 1, "fields": []})
    add({"name": "tiled_mma_pv", "ordinal": 0, "kind": "struct", "size": 1, "align": 1, "fields": []})
    if cfg.fp8:
        add(descale_param(0))
    # Keys per sequence are at most the cache's capacity: the window's reach on the left.
    # (After the descale, the kernel's argument order; FwdConfig never sets both.)
    var_params, var_scalars, var_tensors = variant_args(
        cfg, ["max_pages", "page_size", "*"] if cfg.paged_kv else "seqlen_k", "seqlen_q")
    for p in var_params:
        add(p)

    bshd = {"contiguous_dim": 3, "align_bytes": 16}
    heads_grid = "heads_kv" if cfg.pack_gqa else "heads_q"
    rows = ["seqlen_q", "heads_q", "heads_kv", "//", "*"] if cfg.pack_gqa else ["seqlen_q"]
    grid_x = rows + [cfg.tile_m, "ceil_div"] + (["num_splits", "*"] if cfg.split_kv else [])
    symbols = {
        "batch": {"tensor": "q", "dim": 0, "min": 1},
        "seqlen_q": {"tensor": "q", "dim": 1, "min": 1},
        "heads_q": {"tensor": "q", "dim": 2, "min": 1},
        "head_dim": {"tensor": "q", "dim": 3, "fixed": d},
        "heads_kv": {"tensor": "k", "dim": 2, "min": 1},
    }
    kv_dims = [kv_outer] + kv_rows + ["heads_kv", "head_dim"]
    symbols[kv_outer] = symbols.get(kv_outer, {"tensor": "k", "dim": 0, "min": 1})
    symbols[kv_rows[0]] = {"tensor": "k", "dim": 1, "min": 1}
    tensors = {
        "q": {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd},
        "k": {"role": "input", "dtype": cfg.dtype, "dims": kv_dims, **bshd},
        "v": {"role": "input", "dtype": cfg.dtype, "dims": kv_dims, **bshd},
        "seqused_k": {"role": "input", "dtype": "i32", "dims": ["batch"], "contiguous_dim": 0, "align_bytes": 4},
    }
    if cfg.paged_kv:
        symbols["max_pages"] = {"tensor": "page_table", "dim": 1, "min": 1}
        tensors["page_table"] = {"role": "input", "dtype": "i32", "dims": ["batch", "max_pages"],
                                 "contiguous_dim": 1, "align_bytes": 4}
    if cfg.split_kv:
        symbols["num_splits"] = {"tensor": o_name, "dim": 0, "min": 1}
        tensors[o_name] = {"role": "output", "dtype": "f32",
                           "dims": ["num_splits", "batch", "seqlen_q", "heads_q", "head_dim"],
                           "contiguous_dim": 4, "align_bytes": 16}
        tensors[lse_name] = {"role": "output", "dtype": "f32", "dims": ["num_splits", "batch", "heads_q", "seqlen_q"],
                             "contiguous_dim": 3, "align_bytes": 4}
    else:
        tensors[o_name] = {"role": "output", "dtype": cfg.out_dtype,
                           "dims": ["batch", "seqlen_q", "heads_q", "head_dim"], **bshd}
        tensors[lse_name] = {"role": "output", "dtype": "f32", "dims": ["batch", "heads_q", "seqlen_q"],
                             "contiguous_dim": 2, "align_bytes": 4}
    tensors.update(var_tensors)
    checks = [
        {"expr": ["heads_q", "heads_kv", "%", 0, "=="],
         "message": "heads_q must be a multiple of heads_kv (MHA, GQA or MQA)"},
        {"expr": [heads_grid, 65535, "<="], "message": f"{heads_grid} must be at most 65535 (grid y)"},
        {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
    ]
    if cfg.paged_kv:
        from .config import PAGE_CHUNK
        checks.append({"expr": ["page_size", PAGE_CHUNK, "%", 0, "=="],
                       "message": f"page_size must be a multiple of {PAGE_CHUNK} for this variant"})
    if cfg.fp8:
        tensors["descale"] = DESCALE_TENSOR
    return {
        "grid": [grid_x, [heads_grid], ["batch"]],
        "symbols": symbols,
        "tensors": tensors,
        "scalars": {"softmax_scale": {"type": "f32", "default": ["head_dim", "rsqrt"]}, **var_scalars},
        "checks": checks,
        "params": lay_out(params, PARAM_BANK_BASE),
    }


def _tensormap_3d(name: str, tensor: str, dtype: str, box: tuple[int, int], swizzle: int) -> dict:
    """A tensor map over a packed (total, heads, d) tensor: the kernel's (total, d, heads) view,
    d innermost, a box of (one swizzle atom of columns, rows, one head)."""
    p = tensormap(name, 0, tensor, dtype, box, swizzle)
    p["dims"], p["box"], p["element_strides"] = [2, 0, 1], [box[0], box[1], 1], [1, 1, 1]
    return p


def ragged_o_params(dtype: str, box: tuple[int, int], swizzle: int) -> list[dict]:
    """o_tma_ragged's two kernel arguments, last: the coordinate tensor of O's ragged view
    (total_q, d, heads_q, total_q + 1; its dynamic shapes) and the ragged tensor map over o
    (runtime/tensormap.py: ragged_dim 0, total_q, adds the outer dimension)."""
    coords = {"name": "o_tma_coords", "ordinal": 0, "kind": "struct", "size": 12, "align": 4, "fields": [
        {"offset": 0, "type": "i32", "value": ["total_q"]},
        {"offset": 4, "type": "i32", "value": ["heads_q"]},
        # tensormap.ragged_extent(total_q) (tests/test_varlen_tma_o.py holds the two together)
        {"offset": 8, "type": "i32", "value": ["total_q", 1, "+"]}]}
    tmap = _tensormap_3d("tma_o", "o", dtype, box, swizzle)
    tmap["ragged_dim"] = 0
    tmap["box"].append(1)
    tmap["element_strides"].append(1)
    return [coords, tmap]


def varlen_contract(cfg: FwdConfig, boxes: dict[str, tuple[int, int]], swizzle: int | dict[str, int]) -> dict:
    """The contract of a varlen variant (inference.FlashFwdSm90Inference with varlen=True).

    Tensors: q and o packed (total_q, heads_q, d); k and v packed (total_k, heads_kv, d), or the
    paged cache (num_pages, page_size, heads_kv, d) with page_table (batch, max_pages); lse
    (heads_q, total_q); cu_seqlens_q / cu_seqlens_k int32 (batch + 1,); seqused_q / seqused_k
    int32 (batch,), read only where the scalars has_seqused_q / has_seqused_k are 1 (the
    runtime binds a view of cu_seqlens otherwise). Grid: schedule.varlen_ctas (the bound's
    tiles times heads_q, 1-D; persistent: at most sm_count of them).
    """
    swz = swizzle if isinstance(swizzle, dict) else {t: swizzle for t in "qkvo"}
    d = cfg.head_dim
    dv_sym = "head_dim_v" if cfg.head_dim_v != d else "head_dim"  # as family_contract's
    params: list[dict] = []

    def add(p):
        p["ordinal"] = len(params)
        params.append(p)

    if cfg.paged_kv:
        kv_coords = ["page_size", "heads_kv", "num_pages"]
        kv_dims = ["num_pages", "page_size", "heads_kv", "head_dim"]
    else:
        kv_coords = ["total_k", "heads_kv"]
        kv_dims = ["total_k", "heads_kv", "head_dim"]
    v_dims = kv_dims[:-1] + [dv_sym]
    add(i32_struct("q_coords", 0, ["total_q", "heads_q"]))
    add(i32_struct("k_coords", 0, kv_coords))
    add(i32_struct("v_coords", 0, kv_coords))
    add(tensor_struct("o", 0, "o", ["total_q", "heads_q"], [0, 1]))
    add(tensor_struct("lse", 0, "lse", ["heads_q", "total_q"], [0]))
    add(_tensormap_3d("tma_q", "q", cfg.dtype, boxes["q"], swz["q"]))
    if cfg.paged_kv:
        add(tensormap("tma_k", 0, "k", cfg.dtype, boxes["k"], swz["k"]))
        add(tensormap("tma_v", 0, "v", cfg.dtype, boxes["v"], swz["v"]))
        add(i32_struct("kc_coords", 0, kv_coords))
        add(i32_struct("vc_coords", 0, kv_coords))
        add(tensormap("tma_k_chunk", 0, "k", cfg.dtype, boxes["kc"], swz["k"]))
        add(tensormap("tma_v_chunk", 0, "v", cfg.dtype, boxes["vc"], swz["v"]))
    else:
        add(_tensormap_3d("tma_k", "k", cfg.dtype, boxes["k"], swz["k"]))
        add(_tensormap_3d("tma_v", "v", cfg.dtype, boxes["v"], swz["v"]))
    add({"name": "softmax_scale_log2", "ordinal": 0, "kind": "scalar", "size": 4, "align": 4,
         "type": "f32", "value": scale_log2_value(cfg)})
    add(tensor_struct("seqused_k", 0, "seqused_k", ["batch"], []))
    if cfg.paged_kv:
        add(tensor_struct("page_table", 0, "page_table", ["batch", "max_pages"], [0]))
    add(tensor_struct("cu_seqlens_q", 0, "cu_seqlens_q", ["batch_plus_1"], []))
    add(tensor_struct("cu_seqlens_k", 0, "cu_seqlens_k", ["batch_plus_1"], []))
    add(tensor_struct("seqused_q", 0, "seqused_q", ["batch"], []))
    for flag in ("has_seqused_q", "has_seqused_k"):
        add({"name": flag, "ordinal": 0, "kind": "scalar", "size": 4, "align": 4, "type": "i32", "value": [flag]})
    add({"name": "tiled_mma_qk", "ordinal": 0, "kind": "struct", "size": 1, "align": 1, "fields": []})
    add({"name": "tiled_mma_pv", "ordinal": 0, "kind": "struct", "size": 1, "align": 1, "fields": []})
    if cfg.fp8:
        add(descale_param(0))  # row b: sequence b's
    # Every sequence's keys fit total_k (or the page table's capacity), its queries total_q.
    var_params, var_scalars, var_tensors = variant_args(
        cfg, ["max_pages", "page_size", "*"] if cfg.paged_kv else "total_k", "total_q")
    for p in var_params:
        add(p)
    if cfg.o_tma_ragged:
        for p in ragged_o_params(cfg.out_dtype, boxes["o"], swz["o"]):
            add(p)
    if cfg.varlen_dynamic:
        add(tensor_struct("tile_counter", 0, "tile_counter", [], []))

    thd = {"contiguous_dim": 2, "align_bytes": 16}
    i32_vec = {"role": "input", "dtype": "i32", "contiguous_dim": 0, "align_bytes": 4}
    symbols = {
        "total_q": {"tensor": "q", "dim": 0, "min": 1},
        "heads_q": {"tensor": "q", "dim": 1, "min": 1},
        "head_dim": {"tensor": "q", "dim": 2, "fixed": d},
        **({dv_sym: {"tensor": "v", "dim": len(v_dims) - 1, "fixed": cfg.head_dim_v}} if dv_sym != "head_dim" else {}),
        "heads_kv": {"tensor": "k", "dim": len(kv_dims) - 2, "min": 1},
        "batch": {"tensor": "seqused_q", "dim": 0, "min": 1},
        "batch_plus_1": {"tensor": "cu_seqlens_q", "dim": 0, "min": 2},
    }
    if cfg.paged_kv:
        symbols["num_pages"] = {"tensor": "k", "dim": 0, "min": 1}
        symbols["page_size"] = {"tensor": "k", "dim": 1, "min": 1}
        symbols["max_pages"] = {"tensor": "page_table", "dim": 1, "min": 1}
    else:
        symbols["total_k"] = {"tensor": "k", "dim": 0, "min": 1}
    tensors = {
        "q": {"role": "input", "dtype": cfg.dtype, "dims": ["total_q", "heads_q", "head_dim"], **thd},
        "k": {"role": "input", "dtype": cfg.dtype, "dims": kv_dims, "contiguous_dim": len(kv_dims) - 1,
              "align_bytes": 16},
        "v": {"role": "input", "dtype": cfg.dtype, "dims": v_dims, "contiguous_dim": len(v_dims) - 1,
              "align_bytes": 16},
        "o": {"role": "output", "dtype": cfg.out_dtype, "dims": ["total_q", "heads_q", dv_sym], **thd},
        "lse": {"role": "output", "dtype": "f32", "dims": ["heads_q", "total_q"], "contiguous_dim": 1,
                "align_bytes": 4},
        "cu_seqlens_q": {**i32_vec, "dims": ["batch_plus_1"]},
        "cu_seqlens_k": {**i32_vec, "dims": ["batch_plus_1"]},
        "seqused_q": {**i32_vec, "dims": ["batch"]},
        "seqused_k": {**i32_vec, "dims": ["batch"]},
    }
    if cfg.paged_kv:
        tensors["page_table"] = {**i32_vec, "dims": ["batch", "max_pages"], "contiguous_dim": 1}
    if cfg.fp8:
        tensors["descale"] = DESCALE_TENSOR
    if cfg.varlen_dynamic:
        # The walk's tile counter (inference.py fetch_tile): the runtime's, zero before the first
        # launch and left zero by every launch (the last CTA resets it), so a plan keeps one.
        symbols["tile_counter_slots"] = {"tensor": "tile_counter", "dim": 0, "fixed": 2}
        tensors["tile_counter"] = {"role": "output", "dtype": "i32", "dims": ["tile_counter_slots"],
                                   "contiguous_dim": 0, "align_bytes": 4}
    tensors.update(var_tensors)
    checks = [
        {"expr": ["batch_plus_1", "batch", 1, "+", "=="],
         "message": "cu_seqlens_q and cu_seqlens_k must have batch + 1 entries (seqused_q / seqused_k batch)"},
        {"expr": ["heads_q", "heads_kv", "%", 0, "=="],
         "message": "heads_q must be a multiple of heads_kv (MHA, GQA or MQA)"},
    ]
    if cfg.paged_kv:
        from .config import PAGE_CHUNK
        checks.append({"expr": ["page_size", PAGE_CHUNK, "%", 0, "=="],
                       "message": f"page_size must be a multiple of {PAGE_CHUNK} for this variant"})
    tm = cfg.tile_m
    return {
        "grid": [varlen_grid_expr(tm, cfg.scheduler == "persistent"), [1], [1]],
        "symbols": symbols,
        "tensors": tensors,
        "scalars": {"softmax_scale": {"type": "f32", "default": ["head_dim", "rsqrt"]},
                    "has_seqused_q": {"type": "i32", "default": [0]},
                    "has_seqused_k": {"type": "i32", "default": [0]}, **var_scalars},
        "checks": checks,
        "params": lay_out(params, PARAM_BANK_BASE),
    }
