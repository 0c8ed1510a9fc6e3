"""The launch-contract sections of fp8_quant_sm90 (docs/launch-contract.md).

The kernel takes its three tensors as CuTe tensor structs {pointer, i32 dynamic shapes,
i64 dynamic strides} in their declared order, then three i32 scalars. The grid is one CTA
per (token block, head, batch): the descale tensor's shape gives the block count, so the
caller sizes it ceil(seqlen / block_tokens) (runtime/fp8.py does).
"""

from __future__ import annotations

from .config import QuantConfig


def _bshd(name: str, ordinal: int, dims: tuple[str, str, str]) -> dict:
    return {
        "name": name, "ordinal": ordinal, "kind": "struct", "size": 48, "align": 8,
        "fields": [
            {"offset": 0, "type": "ptr", "value": [f"{name}.ptr"]},
            {"offset": 8, "type": "i32", "value": [dims[0]]},
            {"offset": 12, "type": "i32", "value": [dims[1]]},
            {"offset": 16, "type": "i32", "value": [dims[2]]},
            {"offset": 24, "type": "i64", "value": [f"{name}.stride.0"]},
            {"offset": 32, "type": "i64", "value": [f"{name}.stride.1"]},
            {"offset": 40, "type": "i64", "value": [f"{name}.stride.2"]},
        ],
    }


def contract(cfg: QuantConfig) -> dict:
    bshd = ["batch", "seqlen", "heads", "head_dim"]
    params = [
        _bshd("x", 0, ("batch", "seqlen", "heads")),
        _bshd("y", 1, ("batch", "seqlen", "heads")),
        {
            "name": "descale", "ordinal": 2, "offset": 96, "kind": "struct", "size": 40, "align": 8,
            "fields": [
                {"offset": 0, "type": "ptr", "value": ["descale.ptr"]},
                {"offset": 8, "type": "i32", "value": ["batch"]},
                {"offset": 12, "type": "i32", "value": ["heads"]},
                {"offset": 16, "type": "i32", "value": ["blocks"]},
                {"offset": 24, "type": "i64", "value": ["descale.stride.0"]},
                {"offset": 32, "type": "i64", "value": ["descale.stride.1"]},
            ],
        },
        {"name": "block_tokens", "ordinal": 3, "offset": 136, "kind": "scalar", "size": 4, "align": 4,
         "type": "i32", "value": ["block_tokens"]},
        {"name": "hadamard", "ordinal": 4, "offset": 140, "kind": "scalar", "size": 4, "align": 4,
         "type": "i32", "value": ["hadamard"]},
        {"name": "seed", "ordinal": 5, "offset": 144, "kind": "scalar", "size": 4, "align": 4,
         "type": "i32", "value": ["seed"]},
    ]
    params[0]["offset"], params[1]["offset"] = 0, 48
    return {
        "grid": [["blocks"], ["heads"], ["batch"]],
        "symbols": {
            "batch": {"tensor": "x", "dim": 0, "min": 1},
            "seqlen": {"tensor": "x", "dim": 1, "min": 1},
            "heads": {"tensor": "x", "dim": 2, "min": 1},
            "head_dim": {"tensor": "x", "dim": 3, "fixed": cfg.head_dim},
            "blocks": {"tensor": "descale", "dim": 2, "min": 1},
        },
        "tensors": {
            "x": {"role": "input", "dtype": cfg.dtype, "dims": bshd, "contiguous_dim": 3, "align_bytes": 16},
            "y": {"role": "output", "dtype": "e4m3", "dims": bshd, "contiguous_dim": 3, "align_bytes": 16},
            "descale": {"role": "output", "dtype": "f32", "dims": ["batch", "heads", "blocks"],
                        "contiguous_dim": 2, "align_bytes": 4},
        },
        # Per-head scales by default: one block of every token.
        "scalars": {
            "block_tokens": {"type": "i32", "default": ["seqlen"]},
            "hadamard": {"type": "i32", "default": [0]},
            "seed": {"type": "i32", "default": [0]},
        },
        "checks": [
            {"expr": ["heads", 65535, "<="], "message": "heads must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
        ],
        "params": params,
    }
