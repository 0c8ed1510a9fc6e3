"""Cross-compile one variant to a cubin with fake tensors: no GPU needed.

Batch, sequence lengths, head counts and every stride but the head dim's stay symbolic, so
one cubin serves every problem size of the variant.
"""

from __future__ import annotations

import math
import time

from ..common import aot_compile, dsl_environment, fake_problem
from .config import FwdConfig


def compile_cubin(cfg: FwdConfig):
    """Return (compiled object, kernel instance, seconds)."""
    dsl_environment(cfg.arch)
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .kernel import DTYPES, FlashFwdSm90

    dt = DTYPES[cfg.dtype]
    fake = fake_problem(dt, cfg.head_dim, cfg.elem_bytes)
    sym, bshd, align_elems = fake.sym, fake.bshd, fake.align_elems
    batch, seqlen_q, seqlen_k, heads_q, heads_kv = fake.batch, fake.seqlen_q, fake.seqlen_k, fake.heads_q, fake.heads_kv
    d = cfg.head_dim
    scale = fake.scale_log2()
    options = f"--gpu-arch {cfg.arch} --keep-cubin"
    if cfg.inference:
        return _compile_inference(cfg, dt, fake, scale, options)
    dv = cfg.head_dim_v
    q, k, v, o = bshd(seqlen_q, heads_q), bshd(seqlen_k, heads_kv), bshd(seqlen_k, heads_kv, dv), bshd(seqlen_q, heads_q, dv)
    lse = fake.lse()
    extra = variant_args(cfg, heads_q)
    if cfg.fp8:
        # O in bf16; V column-major (batch, heads_kv, head_dim_v, seqlen_k) or row-major like k
        # (transposed in smem); the descales of
        # q, k and v stacked as (3, batch, heads_kv) float32.
        o = make_fake_tensor(DTYPES[cfg.out_dtype], (batch, seqlen_q, heads_q, dv),
                             stride=(sym(8), sym(8), sym(8), 1), assumed_align=16)
        if cfg.v_layout == "colmajor":
            v = make_fake_tensor(dt, (batch, heads_kv, dv, seqlen_k),
                                 stride=(sym(align_elems), sym(align_elems), sym(align_elems), 1), assumed_align=16)
        extra["mDescale"] = fake_descale(fake.batch, fake.heads_kv, fake.sym)
        if cfg.descale_blocks[1]:
            # Per-block q and k descales, quantize_fp8's (batch, heads, blocks); left out otherwise.
            extra["mDescaleQ"] = fake_block_descale(fake.batch, heads_q, fake.sym)
            extra["mDescaleK"] = fake_block_descale(fake.batch, heads_kv, fake.sym)
    kernel = FlashFwdSm90(cfg)
    t0 = time.perf_counter()
    compiled = aot_compile(kernel, q, k, v, o, lse, scale, **extra, options=options)
    return compiled, kernel, time.perf_counter() - t0


def fake_descale(batch, heads_kv, sym):
    """e4m3: the q, k and v descales stacked, (3, batch, heads_kv) float32 (descale.py)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    return make_fake_tensor(cutlass.Float32, (3, batch, heads_kv), stride=(sym(), sym(), 1), assumed_align=4)


def fake_block_descale(batch, heads, sym):
    """descale_block: (batch, heads, blocks) float32, blocks contiguous."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    return make_fake_tensor(cutlass.Float32, (batch, heads, cute.sym_int()), stride=(sym(), sym(), 1),
                            assumed_align=4)


def variant_args(cfg: FwdConfig, heads_q) -> dict:
    """The model variants' runtime values, by the kernels' keyword names (the dense and the
    inference forms take the same); left out (None) when off, so those cubins stay as they were."""
    import cutlass
    from cutlass.cute.runtime import make_fake_tensor

    extra = {}
    if cfg.softcap:
        extra["softcap_pre"] = cutlass.Float32(1.0 / math.sqrt(cfg.head_dim) / 30.0)
    if cfg.local:
        extra["window_left"], extra["window_right"] = cutlass.Int32(128), cutlass.Int32(0)
    if cfg.learnable_sink:
        extra["mSink"] = make_fake_tensor(cutlass.Float32, (heads_q,), stride=(1,), assumed_align=4)
    return extra


def _compile_inference(cfg, dt, fake, scale, options):
    """The split_kv / pack_gqa / paged_kv form: inference.FlashFwdSm90Inference's arguments."""
    sym, bshd = fake.sym, fake.bshd
    batch, seqlen_q, seqlen_k, heads_q, heads_kv = fake.batch, fake.seqlen_q, fake.seqlen_k, fake.heads_q, fake.heads_kv
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .inference import FlashFwdSm90Inference

    d = cfg.head_dim
    if cfg.varlen:
        return _compile_varlen(cfg, dt, sym, heads_q, heads_kv, scale, options)
    q = bshd(seqlen_q, heads_q)
    if cfg.paged_kv:
        num_pages, page_size = cute.sym_int(), cute.sym_int()
        k = make_fake_tensor(dt, (num_pages, page_size, heads_kv, d),
                             stride=(sym(8), sym(8), sym(8), 1), assumed_align=16)
        v = make_fake_tensor(dt, (num_pages, page_size, heads_kv, d),
                             stride=(sym(8), sym(8), sym(8), 1), assumed_align=16)
    else:
        k, v = bshd(seqlen_k, heads_kv), bshd(seqlen_k, heads_kv)
    if cfg.split_kv:
        splits = cute.sym_int()
        o = make_fake_tensor(cutlass.Float32, (splits, batch, seqlen_q, heads_q, d),
                             stride=(sym(4), sym(4), sym(4), sym(4), 1), assumed_align=16)
        lse = make_fake_tensor(cutlass.Float32, (splits, batch, heads_q, seqlen_q),
                               stride=(sym(), sym(), sym(), 1), assumed_align=4)
    else:
        o = bshd(seqlen_q, heads_q)
        if cfg.fp8:  # e4m3 q/k/v, O in out_dtype
            from .kernel import DTYPES
            o = make_fake_tensor(DTYPES[cfg.out_dtype], (batch, seqlen_q, heads_q, d),
                                 stride=(sym(8), sym(8), sym(8), 1), assumed_align=16)
        lse = fake.lse()
    seqused_k = make_fake_tensor(cutlass.Int32, (batch,), stride=(1,), assumed_align=4)
    extra = []
    if cfg.paged_kv:
        extra.append(make_fake_tensor(cutlass.Int32, (batch, cute.sym_int()), stride=(sym(), 1), assumed_align=4))
    # Left out (None) unless e4m3, so the bf16/fp16 cubins stay as they were.
    fp8 = {"mDescale": fake_descale(batch, heads_kv, sym)} if cfg.fp8 else {}
    kernel = FlashFwdSm90Inference(cfg)
    t0 = time.perf_counter()
    compiled = aot_compile(kernel, q, k, v, o, lse, scale, seqused_k, *extra, **fp8, **variant_args(cfg, heads_q),
                            options=options)
    return compiled, kernel, time.perf_counter() - t0


def _compile_varlen(cfg, dt, sym, heads_q, heads_kv, scale, options):
    """The varlen form: packed q (total_q, heads_q, d), o (total_q, heads_q, dv), lse (heads_q,
    total_q), k (total_k, heads_kv, d) and v (total_k, heads_kv, dv) packed or the paged cache;
    cu_seqlens_q/k (batch + 1,), seqused_q/k (batch,), the two has_seqused flags."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    from .inference import FlashFwdSm90Inference

    d, dv = cfg.head_dim, cfg.head_dim_v
    batch, batch1, total_q, total_k = cute.sym_int(), cute.sym_int(), cute.sym_int(), cute.sym_int()

    def thd(rows, heads, width=d):
        return make_fake_tensor(dt, (rows, heads, width), stride=(sym(8), sym(8), 1), assumed_align=16)

    def i32(*shape):
        stride = (1,) if len(shape) == 1 else (sym(), 1)
        return make_fake_tensor(cutlass.Int32, shape, stride=stride, assumed_align=4)

    q, o = thd(total_q, heads_q), thd(total_q, heads_q, dv)
    if cfg.fp8:  # e4m3 q/k/v, O in out_dtype
        from .kernel import DTYPES
        o = make_fake_tensor(DTYPES[cfg.out_dtype], (total_q, heads_q, d), stride=(sym(8), sym(8), 1),
                             assumed_align=16)
    if cfg.paged_kv:
        num_pages, page_size = cute.sym_int(), cute.sym_int()
        k, v = [make_fake_tensor(dt, (num_pages, page_size, heads_kv, d), stride=(sym(8), sym(8), sym(8), 1),
                                 assumed_align=16) for _ in range(2)]
        page_table = i32(batch, cute.sym_int())
    else:
        k, v = thd(total_k, heads_kv), thd(total_k, heads_kv, dv)
        page_table = None
    lse = make_fake_tensor(cutlass.Float32, (heads_q, total_q), stride=(sym(), 1), assumed_align=4)
    kernel = FlashFwdSm90Inference(cfg)
    t0 = time.perf_counter()
    fp8 = {"mDescale": fake_descale(batch, heads_kv, sym)} if cfg.fp8 else {}
    if cfg.varlen_dynamic:  # the walk's tile counter: two int32, a fixed shape (a bare pointer)
        fp8["mTileCounter"] = make_fake_tensor(cutlass.Int32, (2,), stride=(1,), assumed_align=4)
    compiled = aot_compile(kernel, q, k, v, o, lse, scale, i32(batch), page_table, i32(batch1), i32(batch1),
                            i32(batch), cutlass.Int32(0), cutlass.Int32(0), **fp8, **variant_args(cfg, heads_q),
                            options=options)
    return compiled, kernel, time.perf_counter() - t0
