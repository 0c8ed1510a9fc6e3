"""Helpers more than one kernel package uses: launch-contract pieces and the fake-tensor set-up
of a cross-compile. No cutlass at module level (contracts are built and tested without it).

The content key hashes this module into every package that imports it
(content_key.shared_modules), so editing it rebuilds exactly those packages' variants.
"""

from __future__ import annotations

import math
import os
import tempfile
from types import SimpleNamespace

SWIZZLE_NAMES = {128: "128B", 64: "64B", 32: "32B", 0: "none"}
# (batch, seqlen, heads, head_dim) -> tensor-map order, innermost first.
TMA_DIM_ORDER = [3, 1, 2, 0]


def i32_struct(name: str, ordinal: int, values: list[str]) -> dict:
    """A coordinate tensor as the DSL lowers it: its dynamic shapes, i32 each."""
    return {
        "name": name, "ordinal": ordinal, "kind": "struct", "size": 4 * len(values), "align": 4,
        "fields": [{"offset": 4 * i, "type": "i32", "value": [v]} for i, v in enumerate(values)],
    }


def tensor_struct(name: str, ordinal: int | None, tensor: str, shapes: list[str], strides: list[int]) -> dict:
    """A CuTe tensor parameter: pointer, its dynamic shapes (i32) in the kernel's mode order,
    then its dynamic strides (i64, `tensor.stride.i` of the caller's dimension i)."""
    fields = [{"offset": 0, "type": "ptr", "value": [f"{tensor}.ptr"]}]
    fields += [{"offset": 8 + 4 * i, "type": "i32", "value": [s]} for i, s in enumerate(shapes)]
    start = (8 + 4 * len(shapes) + 7) // 8 * 8
    fields += [{"offset": start + 8 * i, "type": "i64", "value": [f"{tensor}.stride.{d}"]} for i, d in enumerate(strides)]
    size = start + 8 * len(strides)
    return {"name": name, "ordinal": ordinal, "kind": "struct", "size": size, "align": 8, "fields": fields}


def tensormap(name: str, ordinal: int, tensor: str, dtype: str, box: tuple[int, int], swizzle: int) -> dict:
    """A TMA atom's 128-byte tensor map over a (batch, seqlen, heads, head_dim) tensor."""
    return {
        "name": name, "ordinal": ordinal, "kind": "tensormap", "size": 128, "align": 64,
        "tensor": tensor, "dtype": dtype, "dims": TMA_DIM_ORDER,
        "box": [box[0], box[1], 1, 1], "element_strides": [1, 1, 1, 1],
        "interleave": "none", "swizzle": SWIZZLE_NAMES[swizzle],
        "l2_promotion": "128B", "oob_fill": "none",
    }


def lay_out(params: list[dict], base: int = 0, number: bool = False) -> list[dict]:
    """Give each parameter the offset the compiler uses: the next slot aligned in the constant
    bank, whose parameters start at `base` (alignment holds for bank addresses); with
    `number`, its ordinal too (its place in the list)."""
    end = 0
    for n, p in enumerate(params):
        if number:
            p["ordinal"] = n
        addr = (base + end + p["align"] - 1) // p["align"] * p["align"]
        p["offset"] = addr - base
        end = p["offset"] + p["size"]
    return params


def dsl_environment(arch: str) -> None:
    """Set the DSL's target and dump folder before cutlass is imported.

    --keep-cubin also writes a copy of each cubin into CUTE_DSL_DUMP_DIR (read when cutlass
    is imported; the working directory by default). The bytes come from compiled.__cubin__,
    so the copies go to scratch unless a caller chose a place. The directory must exist:
    where it does not, the DSL hands back the path instead of bytes."""
    os.environ.setdefault("CUTE_DSL_ARCH", arch)
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", os.path.join(tempfile.gettempdir(), "cubinforge-dsl-dump"))
    os.makedirs(os.environ["CUTE_DSL_DUMP_DIR"], exist_ok=True)


def aot_compile(fn, *args, options: str, **kwargs):
    """`cute.compile` for a cubin only: without the host execution engine.

    By default the DSL also JIT-compiles the host launcher into an MLIR ExecutionEngine so
    that the result can be called from Python. Nothing here calls it (the bytes come from
    `--keep-cubin`'s file, the entry from kernel_info), and building it and looking up its entry
    cost ~0.07 s CPU a variant (~2% of the default set's build, a quarter of a small kernel's).
    The engine is built after the device pipeline, so the cubin is the same either way."""
    import cutlass.cute as cute

    return cute.compile(fn, *args, options=options, no_jit_engine=True, **kwargs)


def fake_problem(dt, head_dim: int, elem_bytes: int) -> SimpleNamespace:
    """The symbolic problem of an attention forward: batch, seqlen_q/k and heads_q/kv are
    symbols, and so is every stride but the head dim's, so one cubin serves every size.
    Gives `sym(div)` (a symbolic i64 stride), `bshd(seqlen, heads, dim)` (a fake
    (batch, seqlen, heads, dim) tensor with 16-byte aligned strides, as TMA requires),
    `lse` (a (batch, heads_q, seqlen_q) float32 tensor, made on call) and `scale_log2`."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    align_elems = 16 // elem_bytes

    def sym(div=1):
        return cute.sym_int64(divisibility=div)

    batch, seqlen_q, seqlen_k = cute.sym_int(), cute.sym_int(), cute.sym_int()
    heads_q, heads_kv = cute.sym_int(), cute.sym_int()

    def bshd(seqlen, heads, dim=head_dim):
        return make_fake_tensor(
            dt, (batch, seqlen, heads, dim),
            stride=(sym(align_elems), sym(align_elems), sym(align_elems), 1),
            assumed_align=16,
        )

    def lse():
        return make_fake_tensor(cutlass.Float32, (batch, heads_q, seqlen_q), stride=(sym(), sym(), 1), assumed_align=4)

    return SimpleNamespace(
        sym=sym, bshd=bshd, lse=lse, batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
        heads_q=heads_q, heads_kv=heads_kv, align_elems=align_elems,
        scale_log2=lambda: cutlass.Float32(1.0 / math.sqrt(head_dim) * math.log2(math.e)),
    )
