"""A/B of kernel configurations: each FA3 piece measured by leaving it out.

    python -m cubinforge.bench.ab build --home .cubinforge-ab      # here, no GPU: compile
    python3 -m bench.ab run --home .cubinforge-ab --out DIR        # on the GPU (PYTHONPATH=repo)

`build` compiles the experiments below through the same steps as `make kernels` (contract
checked against the cubin, metadata from the ELF) into a registry of their own, one variant
per experiment, named `<variant>+<label>`. `run` checks each against an fp32 reference
(check_variant: O and LSE, outputs poisoned), then times it beside the other variants of its form,
cuDNN, and FA4 where importable, in the same process, their calls interleaved, on the FA3
grid's cells, and writes ab.json and ab.md.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

# Named sets of (label, FwdConfig overrides); "default" is the shipped configuration.
LEAVE_ONE_OUT = [
    ("default", dict(head_dim=128, causal=False)),
    ("no-intra-wg-overlap", dict(head_dim=128, causal=False, intra_wg_overlap=False)),
    ("no-pingpong", dict(head_dim=128, causal=False, pingpong=False)),
    ("rescale-o-early", dict(head_dim=128, causal=False, rescale_o_early=True)),
    ("default", dict(head_dim=128, causal=True)),
    ("no-pingpong", dict(head_dim=128, causal=True, pingpong=False)),
    ("default", dict(head_dim=256, causal=True)),
    ("no-pingpong+rescale-o-early", dict(head_dim=256, causal=True, pingpong=False, rescale_o_early=True)),
    ("default", dict(head_dim=64, causal=False)),
    ("tile-128x128", dict(head_dim=64, causal=False, tile_m=128, tile_n=128)),
]
SCHEDULER = [
    (label, dict(head_dim=hd, causal=causal, scheduler=sched))
    for hd, causal in ((128, False), (128, True), (64, False), (256, False))
    for label, sched in (("default", "single"), ("persistent", "persistent"))
]
# Candidates for the short-sequence gap (NOTES.md): O in its own shared-memory buffer so the
# next tile's Q loads under the epilogue, and causal work made persistent with a balanced
# static order (longest first, zigzag rounds).
PERSISTENT = [
    *[(label, dict(head_dim=hd, causal=False, scheduler="persistent", separate_o_smem=sep))
      for hd in (64, 96, 128) for label, sep in (("persistent", False), ("persistent+separate-o", True))],
    *[(label, dict(head_dim=hd, causal=True, **over))
      for hd in (64, 128, 256)
      for label, over in (
          ("default", dict(scheduler="single")),
          ("persistent-lpt", dict(scheduler="persistent")),
      )],
    ("persistent-lpt+separate-o", dict(head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True)),
    # One tile per CTA, a 1-D grid in LPT order with L2 sections: block dispatch balances it.
    *[("lpt", dict(head_dim=hd, causal=True, scheduler="lpt")) for hd in (64, 128, 256)],
    # hd64 causal at s512 is the worst cell (0.65): 192-row tiles cover 576 rows there.
    ("tile-128x128", dict(head_dim=64, causal=True, tile_m=128, tile_n=128)),
    ("persistent-lpt+tile-128x128", dict(head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128)),
]
# The row sum in order, as FA4's SM90 loop has it: same instruction counts, but ptxas then
# hoists the FFMAs and ~10 exp2s above the PV GEMM's wait (tests/test_fa3_schedule.py).
SOFTMAX = [
    *[(label, dict(head_dim=hd, causal=False, scheduler="persistent", in_order_row_sum=io))
      for hd in (64, 128, 256) for label, io in (("persistent", False), ("persistent+in-order-sum", True))],
    *[(label, dict(head_dim=hd, causal=True, in_order_row_sum=io))
      for hd in (128, 256) for label, io in (("default", False), ("in-order-sum", True))],
    ("persistent+in-order-sum+separate-o",
     dict(head_dim=128, causal=False, scheduler="persistent", in_order_row_sum=True, separate_o_smem=True)),
]
# Each consumer warpgroup stores its own O (no cross-warpgroup sync at the end of a tile).
EPILOGUE = [
    *[("persistent+separate-o+wg-epilogue",
       dict(head_dim=hd, causal=False, scheduler="persistent", separate_o_smem=True, wg_epilogue=True))
      for hd in (64, 128)],
    ("persistent+in-order-sum+separate-o+wg-epilogue",
     dict(head_dim=128, causal=False, scheduler="persistent", in_order_row_sum=True, separate_o_smem=True,
          wg_epilogue=True)),
    ("lpt+separate-o+wg-epilogue",
     dict(head_dim=128, causal=True, scheduler="lpt", separate_o_smem=True,
          wg_epilogue=True)),
]
# Causal diagonal blocks masked with a bit mask per row (R2P) instead of 32 compares per row.
MASK = [
    *[(label, dict(head_dim=hd, causal=True, mask_bits=mb))
      for hd in (64, 128, 256) for label, mb in (("default", False), ("mask-bits", True))],
    ("lpt+mask-bits", dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True)),
]
# Tile shapes and pipeline depth FA3's table allows, where they build without spills
# (hd64 at 192x160 or 192x192 spills with three consumer warpgroups, so it is left out).
TILES = [
    *[("persistent", dict(head_dim=hd, causal=False, scheduler="persistent")) for hd in (64, 96, 128, 256)],
    *[(f"persistent+tile-128x{n}", dict(head_dim=128, causal=False, scheduler="persistent", tile_m=128, tile_n=n))
      for n in (160, 176)],
    ("persistent+tile-128x160", dict(head_dim=96, causal=False, scheduler="persistent", tile_m=128, tile_n=160)),
    ("persistent+tile-128x64", dict(head_dim=256, causal=False, scheduler="persistent", tile_m=128, tile_n=64)),
    *[("persistent+stages-3", dict(head_dim=hd, causal=False, scheduler="persistent", stages=3)) for hd in (64, 96, 128)],
    ("stages-3", dict(head_dim=128, causal=True, stages=3)),
]
# Per-block instruction savings found in the SASS (fa4-sass-comparison.md).
OVERHEAD = [
    *[(label, dict(head_dim=hd, causal=False, scheduler="persistent", chunked_p_convert=cp))
      for hd in (192, 256) for label, cp in (("persistent", False), ("persistent+chunked-p", True))],
    ("chunked-p", dict(head_dim=256, causal=True, chunked_p_convert=True)),
]
# Short causal prefill, the gap left after the 2026-12-01 promotion (hd64 0.69-0.75, hd128 0.76
# at 512-1k): the smaller tile and the short-sequence variants with the epilogue overlaps
# that won for non-causal.
SHORT_CAUSAL = [
    ("persistent-lpt+tile-128x128", dict(head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128)),
    ("persistent-lpt+tile-128x128+separate-o",
     dict(head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128, separate_o_smem=True)),
    ("persistent-lpt+tile-128x128+separate-o+wg-epilogue",
     dict(head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128, separate_o_smem=True,
          wg_epilogue=True)),
    ("persistent-lpt+tile-128x128+separate-o+wg-epilogue+mask-bits",
     dict(head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128, separate_o_smem=True,
          wg_epilogue=True, mask_bits=True)),
    ("persistent-lpt+separate-o+wg-epilogue",
     dict(head_dim=64, causal=True, scheduler="persistent", separate_o_smem=True, wg_epilogue=True)),
    ("persistent-lpt+separate-o", dict(head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True)),
    ("persistent-lpt+separate-o+wg-epilogue",
     dict(head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True, wg_epilogue=True)),
    ("persistent-lpt+separate-o+wg-epilogue+mask-bits",
     dict(head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True, wg_epilogue=True,
          mask_bits=True)),
    ("lpt+mask-bits", dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True)),
]
# e4m3 hd128 (issue 13: 891 TFLOPS at 16k non-causal against a 1,000 target). The shipped
# e4m3 configuration is "default" (128 x 128, 2 stages, ping-pong, intra-warpgroup overlap,
# O in its own buffer, V column-major); each candidate changes what its label names. FP8
# halves the GEMM time, so the per-block costs that do not scale with the GEMM (O's rescale,
# the row max/sum, the pipeline waits, the schedule barriers) weigh twice as much as for
# bf16: wider key blocks amortise them (FA3 takes 128 x 192 for column-major V, 128 x 224
# for row-major). hd128 causal (lpt): the default, 128 x 192, and row-major V (mask_bits has no
# counting rule for 192-key blocks).
_E4M3 = dict(dtype="e4m3", head_dim=128, separate_o_smem=True)
_E4M3_NC = dict(_E4M3, causal=False, scheduler="persistent", v_layout="colmajor")
FP8_HD128 = [
    ("default", _E4M3_NC),
    # (128 x 256 spills 144 B: S alone is 128 registers a thread.)
    *[(f"tile-128x{n}", dict(_E4M3_NC, tile_m=128, tile_n=n)) for n in (160, 192, 224)],
    ("stages-3", dict(_E4M3_NC, stages=3)),
    ("tile-128x192+stages-3", dict(_E4M3_NC, tile_m=128, tile_n=192, stages=3)),
    ("no-pingpong", dict(_E4M3_NC, pingpong=False)),
    ("tile-128x192+no-pingpong", dict(_E4M3_NC, tile_m=128, tile_n=192, pingpong=False)),
    ("no-intra-wg-overlap", dict(_E4M3_NC, intra_wg_overlap=False)),
    ("in-order-sum", dict(_E4M3_NC, in_order_row_sum=True)),
    ("tile-128x192+in-order-sum", dict(_E4M3_NC, tile_m=128, tile_n=192, in_order_row_sum=True)),
    ("rescale-o-early", dict(_E4M3_NC, rescale_o_early=True)),
    # V row-major, transposed in shared memory (v_transpose.py) with sVt's keys in the
    # accumulator's order, so P needs no shuffle (fp8_local_p, the SET=fp8 variants); and the
    # same transpose with the column-major path's shuffled P, for comparison; FA3's tiles.
    ("v-rowmajor", dict(_E4M3_NC, v_layout="rowmajor")),
    ("v-rowmajor+shuffled-p", dict(_E4M3_NC, v_layout="rowmajor", fp8_local_p=False)),
    *[(f"v-rowmajor+tile-128x{n}", dict(_E4M3_NC, v_layout="rowmajor", tile_m=128, tile_n=n)) for n in (192, 224)],
    ("v-rowmajor+stages-3", dict(_E4M3_NC, v_layout="rowmajor", stages=3)),
    ("default", dict(_E4M3, causal=True, scheduler="lpt", v_layout="colmajor")),
    ("lpt+tile-128x192", dict(_E4M3, causal=True, scheduler="lpt", v_layout="colmajor", tile_m=128, tile_n=192)),
    ("lpt+v-rowmajor", dict(_E4M3, causal=True, scheduler="lpt", v_layout="rowmajor")),
    ("lpt+v-rowmajor+tile-128x192", dict(_E4M3, causal=True, scheduler="lpt", v_layout="rowmajor", tile_m=128,
                                         tile_n=192)),
]
# Model variants (issue 12) against the all-off builds they shipped as on 2026-12-01: the
# window (4096, 0) at 16k ran at 0.82x our causal cell, (192, 128) causal at 0.93x FA4. Timed
# by bench/model_variants.py --ab-home on each variant's own case (run refuses them: the
# FA3 grid's cells have no window, sink or narrower V).
_W = dict(head_dim=128, causal=False, local=True)
_DV = dict(head_dim=192, head_dim_v=128, causal=True)
_SINK = dict(head_dim=128, causal=True, learnable_sink=True)
MODEL_VARIANTS = [
    ("persistent", dict(_W, scheduler="persistent")),  # shipped 2026-12-01
    ("persistent+mask-bits", dict(_W, scheduler="persistent", mask_bits=True)),
    ("persistent+separate-o+in-order-sum", dict(_W, scheduler="persistent", separate_o_smem=True,
                                                in_order_row_sum=True)),
    ("persistent+separate-o+in-order-sum+mask-bits",  # TUNED_VARIANTS now
     dict(_W, scheduler="persistent", separate_o_smem=True, in_order_row_sum=True, mask_bits=True)),
    ("persistent+separate-o+wg-epilogue+in-order-sum+mask-bits",
     dict(_W, scheduler="persistent", separate_o_smem=True, wg_epilogue=True, in_order_row_sum=True,
          mask_bits=True)),
    # FA4's choice for a window: one tile per CTA, hardware dispatch.
    ("single+in-order-sum+mask-bits", dict(_W, scheduler="single", in_order_row_sum=True, mask_bits=True)),
    ("default", dict(_DV, scheduler="single")),  # shipped 2026-12-01
    ("lpt", dict(_DV, scheduler="lpt")),
    ("lpt+mask-bits", dict(_DV, scheduler="lpt", mask_bits=True)),  # TUNED_VARIANTS now
    ("lpt+mask-bits+in-order-sum", dict(_DV, scheduler="lpt", mask_bits=True, in_order_row_sum=True)),
    ("lpt+mask-bits+tile-128x96", dict(_DV, scheduler="lpt", mask_bits=True, tile_m=128, tile_n=96)),
    ("lpt+mask-bits+chunked-p+tile-128x96",
     dict(_DV, scheduler="lpt", mask_bits=True, chunked_p_convert=True, tile_m=128, tile_n=96)),
    ("lpt+mask-bits", dict(_SINK, scheduler="lpt", mask_bits=True)),  # TUNED_VARIANTS now
    ("default", dict(_SINK, scheduler="single")),  # SET=variants' build
]
# Varlen prefill (issue 11's cells: 16 sequences of 1-4096 tokens, hd128): the shipped form
# (one tile per CTA, 3 stages, all switches off, O from registers) ran at 0.80x FA4 non-causal
# and 0.88x causal on 2026-12-01. Each candidate changes what its label names; the switches
# the inference form takes are the softmax's, the mask's, the pipeline depth, the tile and
# the two overlaps' knobs (no O buffer: O leaves from registers unless o-smem stages it
# through Q's buffer). 128 x 176 (the dense kernel's candidate) spills 152 B here (the
# register epilogue's addressing), so it is left out. Timed by bench/inference.py --ab-home beside the shipped variant and FA4.
_VL = dict(head_dim=128, varlen=True)
VARLEN = [
    *[(label, dict(_VL, causal=c, **over)) for c in (False, True) for label, over in (
        ("default", {}),  # the shipped build
        ("in-order-sum", dict(in_order_row_sum=True)),
        ("stages-2", dict(stages=2)),
        ("tile-128x160", dict(tile_m=128, tile_n=160)),
        ("no-pingpong", dict(pingpong=False)),
        ("rescale-o-early", dict(rescale_o_early=True)),
        ("o-smem", dict(o_smem_store=True)),
        ("o-smem+in-order-sum", dict(o_smem_store=True, in_order_row_sum=True)),
        ("o-smem+tile-128x160", dict(o_smem_store=True, tile_m=128, tile_n=160)),
        ("o-smem+stages-2", dict(o_smem_store=True, stages=2)),
    )],
    ("mask-bits", dict(_VL, causal=True, mask_bits=True)),
    ("mask-bits+in-order-sum", dict(_VL, causal=True, mask_bits=True, in_order_row_sum=True)),
    ("o-smem+mask-bits", dict(_VL, causal=True, o_smem_store=True, mask_bits=True)),
]
# The softmax's MUFU (16 ex2/clk/SM) against the tensor cores' work per score: hd64 16-bit and
# hd128 e4m3 need about as many exp2 per clock as it gives. Candidates (softmax.py): part of
# each row's exp2 on the FMA pipe (emu-<k>of8: k of every 8 columns, a degree-3 polynomial;
# -deg2 for e4m3, whose P is rounded to 3 mantissa bits anyway), FA4's conditional rescaling
# (lazy-rescale-8: the stale row max kept until it is 8 log2 units behind, O's rescale
# skipped when no row of a warp moved), and both. The first row of each base is the shipped
# configuration (config.TUNED / TUNED_FP8 / the default and fp8 sets), all switches named.
# An emulated exp2 costs ~7.7 more issue slots than a MUFU one (bench/mufu_sass.py), and one
# warp issues one instruction a clock while its MUFU takes 8 clocks a warp: the SASS counts put
# the balance near 1/8 of the columns for e4m3 hd128 (703 instructions against 98 MUFU per
# block) and 1/8-1/4 for bf16 hd64 (358 against 66), hence 1-3 eighths.
_MUFU_CANDIDATES = [
    *[(f"emu-{k}of8", dict(exp2_emu_eighths=k)) for k in (1, 2, 3)],
    ("lazy-rescale-8", dict(rescale_threshold=8.0)),
    *[(f"emu-{k}of8+lazy-rescale-8", dict(exp2_emu_eighths=k, rescale_threshold=8.0)) for k in (1, 2, 3)],
]
_MUFU_DEG2 = [
    *[(f"emu-{k}of8-deg2+lazy-rescale-8", dict(exp2_emu_eighths=k, exp2_emu_degree=2, rescale_threshold=8.0))
      for k in (1, 2)],
]


def _with_candidates(base_label: str, base: dict, extra=()) -> list:
    return [(base_label, base), *[(f"{base_label}+{label}", dict(base, **over))
                                  for label, over in (*_MUFU_CANDIDATES, *extra)]]


MUFU_FP8 = [
    # TUNED_FP8: column-major V, 128 x 192, in-order row sum (952 TFLOPS at 16k).
    *_with_candidates("tile-128x192+in-order-sum", dict(_E4M3_NC, tile_m=128, tile_n=192, in_order_row_sum=True),
                      _MUFU_DEG2),
    # SET=fp8's row-major V at 128 x 224.
    *_with_candidates("v-rowmajor+tile-128x224", dict(_E4M3_NC, v_layout="rowmajor", tile_m=128, tile_n=224),
                      _MUFU_DEG2),
    # The default set's causal e4m3 hd128 (lpt, column-major V, 128 x 128).
    *_with_candidates("default", dict(_E4M3, causal=True, scheduler="lpt", v_layout="colmajor"), _MUFU_DEG2),
]
_HD64 = dict(head_dim=64, scheduler="persistent", separate_o_smem=True, wg_epilogue=True)
MUFU_BF16 = [
    # config.TUNED's hd64 non-causal, hd64 causal (192 x 128 and the 128 x 128 short-sequence
    # one, with bit masks) and hd128 non-causal.
    *_with_candidates("persistent+separate-o+wg-epilogue", dict(_HD64, causal=False)),
    *_with_candidates("persistent-lpt+separate-o+wg-epilogue", dict(_HD64, causal=True)),
    *_with_candidates("persistent-lpt+tile-128x128+separate-o+wg-epilogue+mask-bits",
                      dict(_HD64, causal=True, tile_m=128, tile_n=128, mask_bits=True)),
    *_with_candidates("persistent+in-order-sum+separate-o",
                      dict(head_dim=128, causal=False, scheduler="persistent", in_order_row_sum=True,
                           separate_o_smem=True)),
]
# The few a short device call can time: the shipped base of e4m3 hd128 (column-major,
# 128 x 192) and of bf16 hd64 (non-causal and causal 192 x 128) with 1 or 2 eighths emulated,
# the lazy rescale, and 1 eighth with it (e4m3: also its degree-2 form).
_MUFU_LITE_LABELS = ("", "+emu-1of8", "+emu-2of8", "+lazy-rescale-8", "+emu-1of8+lazy-rescale-8",
                     "+emu-1of8-deg2+lazy-rescale-8")
MUFU_LITE = [(label, over) for base, rows in (("tile-128x192+in-order-sum", MUFU_FP8),
                                               ("persistent+separate-o+wg-epilogue", MUFU_BF16),
                                               ("persistent-lpt+separate-o+wg-epilogue", MUFU_BF16))
             for label, over in rows if label in {base + t for t in _MUFU_LITE_LABELS}]
# The persistent varlen scheduler (check2/NOTES.md: one tile per CTA leaves each tile's
# prologue and epilogue exposed): min(tiles, SMs) CTAs walk the (tile, head) list in zigzag
# rounds, non-causal tiles ordered by their sequence's key blocks, causal in the shipped
# rounds of descending m block (schedule.varlen_persistent_walk); alone and with the two
# switches that gained 2-3% one tile per CTA. The paged form is built for the GPU tests
# (tests/gpu/test_varlen_persist_gpu.py); --ab-home times the packed ones.
VARLEN_PERSIST = [
    *[(label, dict(_VL, causal=c, scheduler="persistent", **over)) for c in (False, True) for label, over in (
        ("persistent", {}),
        ("persistent+in-order-sum", dict(in_order_row_sum=True)),
        ("persistent+o-smem", dict(o_smem_store=True)),
        ("persistent+o-smem+in-order-sum", dict(o_smem_store=True, in_order_row_sum=True)),
        ("persistent+stages-2", dict(stages=2)),
    )],
    ("persistent+mask-bits", dict(_VL, causal=True, scheduler="persistent", mask_bits=True)),
    ("persistent+o-smem+mask-bits+in-order-sum",
     dict(_VL, causal=True, scheduler="persistent", o_smem_store=True, mask_bits=True, in_order_row_sum=True)),
    *[("persistent", dict(_VL, causal=c, scheduler="persistent", paged_kv=True)) for c in (False, True)],
]
# varlen O by TMA (issue 11: non-causal at 0.97-0.98x FA4; check5/check7: O in its own buffer,
# Q in two stages and the lane cache gained nothing): the shipped persistent forms
# (config.TUNED_VARLEN) beside the same builds storing O by one TMA store per tile through a
# ragged tensor map (FwdConfig.o_tma_ragged), as FA4 stores varlen O, instead of each thread's
# predicated row stores from Q's buffer; and staged in O's own buffer instead (Q back after the
# last QK^T, the store waited for only by the next tile's O: the dense kernel's overlap; 2 K/V
# stages then fit, not 3). Timed by bench/inference.py --ab-home.
_VLP_NC = dict(_VL, causal=False, scheduler="persistent", o_smem_store=True)
_VLP_C = dict(_VL, causal=True, scheduler="persistent", o_smem_store=True, mask_bits=True, in_order_row_sum=True)
_OWN_O = dict(o_smem_store=False, separate_o_smem=True, o_tma_ragged=True)
VARLEN_TMA_O = [
    ("persistent+o-smem", _VLP_NC),  # shipped
    ("persistent+o-smem+o-tma-ragged", dict(_VLP_NC, o_tma_ragged=True)),
    ("persistent+separate-o+o-tma-ragged", dict(_VLP_NC, **_OWN_O)),
    ("persistent+o-smem+mask-bits+in-order-sum", _VLP_C),  # shipped
    ("persistent+o-smem+mask-bits+in-order-sum+o-tma-ragged", dict(_VLP_C, o_tma_ragged=True)),
    ("persistent+separate-o+mask-bits+in-order-sum+o-tma-ragged", dict(_VLP_C, **_OWN_O)),
]
# Short prefill's per-tile fixed cost (issue 10; thousands of tiles of 2-8 key blocks at
# 512-1k): each shipped configuration of the short cells (config.TUNED, runtime/dispatch.py)
# beside the same build with Q double-buffered (the next tile's Q loads while this tile runs)
# and then the O store deferred under the next tile's first QK^T. hd128's shipped short
# variants store O with both warpgroups at once; their wg-epilogue rows add the per-
# warpgroup store, which lets the deferred store's barrier couple one warpgroup only.
_QDB = dict(q_double_buffer=True)
_DEF = dict(q_double_buffer=True, deferred_o_store=True)
_SHORT_SHIPPED = [
    # (label of the shipped build, its switches)
    ("persistent-lpt+tile-128x128+separate-o+wg-epilogue+mask-bits",  # hd64 causal <= 1536 rows
     dict(head_dim=64, causal=True, scheduler="persistent", tile_m=128, tile_n=128, separate_o_smem=True,
          wg_epilogue=True, mask_bits=True)),
    ("persistent-lpt+separate-o+wg-epilogue",  # hd64 causal from 1537 rows (192 x 128)
     dict(head_dim=64, causal=True, scheduler="persistent", separate_o_smem=True, wg_epilogue=True)),
    ("persistent-lpt+separate-o",  # hd128 causal <= 768 rows
     dict(head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True)),
    ("persistent+in-order-sum+separate-o",  # hd128 non-causal
     dict(head_dim=128, causal=False, scheduler="persistent", in_order_row_sum=True, separate_o_smem=True)),
    ("persistent+separate-o+wg-epilogue",  # hd64 non-causal (192 x 128)
     dict(head_dim=64, causal=False, scheduler="persistent", separate_o_smem=True, wg_epilogue=True)),
]
SHORT_OVERLAP = [
    *[row for label, base in _SHORT_SHIPPED for row in (
        (label, base),
        (f"{label}+q-double-buffer", dict(base, **_QDB)),
        (f"{label}+q-double-buffer+deferred-o", dict(base, **_DEF)),
    )],
    *[(f"{label}+wg-epilogue+q-double-buffer+deferred-o", dict(base, wg_epilogue=True, **_DEF))
      for label, base in _SHORT_SHIPPED if base["head_dim"] == 128],
    # hd64 causal's short tile has room for a third K/V stage: the producer then runs one more
    # block ahead, so the next tile's first K is in flight earlier too.
    *[(f"{label}+stages-3{extra}", dict(base, stages=3, **over))
      for label, base in _SHORT_SHIPPED[:1] for extra, over in (("", {}), ("+q-double-buffer+deferred-o", _DEF))],
]
# Model variants, second round (issue 12's targets still open on 2026-12-01, check2/: the
# window (4096, 0) at 16k 674 TFLOPS = 0.995x FA4 and 0.93x our causal cell; (192, 128)
# causal b2 x 8k 739 = 0.965x FA4): session 5's overlaps (Q double-buffered, O stored under
# the next tile's first QK^T) and a third K/V stage, against the shipped builds
# (TUNED_VARIANTS: the window one tile per CTA with the in-order sum and the bit mask;
# (192, 128) lpt with both). The overlaps need a persistent CTA (FwdConfig refuses them one
# tile per CTA), so the window's go on the persistent walk (its tiles cost nearly the same:
# 33 key blocks each from m block 32 on, at (4096, 0)). Pruned on the CPU by bench/loop_sass.py (bench/results/2026-12-01-cpu/
# variant-speed-2.md says which fit and why the others are left out); timed by
# bench/model_variants.py --ab-home beside the shipped variant and FA4.
_WS = dict(_W, in_order_row_sum=True, mask_bits=True)  # the shipped window's switches
_WP = dict(_WS, scheduler="persistent", separate_o_smem=True)  # the same on the persistent walk
_DVS = dict(_DV, mask_bits=True, in_order_row_sum=True)  # the shipped (192, 128)'s switches
MODEL_VARIANTS_2 = [
    # The window: a third K/V stage one tile per CTA (the loop is the shipped one, 488
    # instructions per unmasked block); the persistent walk with O's own buffer (624 TFLOPS on
    # 2026-12-01, here the same-run control for the overlaps), then Q double-buffered, then
    # the O store deferred too (hd128 non-causal's winners in session 5).
    ("single+in-order-sum+mask-bits+stages-3", dict(_WS, scheduler="single", stages=3)),
    ("persistent+separate-o+in-order-sum+mask-bits", _WP),
    ("persistent+separate-o+in-order-sum+mask-bits+q-double-buffer", dict(_WP, **_QDB)),
    ("persistent+separate-o+in-order-sum+mask-bits+q-double-buffer+deferred-o", dict(_WP, **_DEF)),
    # (192, 128): neither overlap nor a third stage fits beside 128 x 128 (FwdConfig refuses
    # them), nor O's own buffer; at 128 x 112 O's buffer does, and P then needs the chunked
    # conversion (without it F2FP 32 -> 56 and 28 PRMT a block: 549 instructions against 477).
    ("lpt+mask-bits+in-order-sum+chunked-p+tile-128x112",
     dict(_DVS, scheduler="lpt", chunked_p_convert=True, tile_m=128, tile_n=112)),
    ("persistent-lpt+mask-bits+in-order-sum", dict(_DVS, scheduler="persistent")),
    ("persistent-lpt+mask-bits+in-order-sum+chunked-p+tile-128x112",
     dict(_DVS, scheduler="persistent", chunked_p_convert=True, tile_m=128, tile_n=112)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum+chunked-p+tile-128x112",
     dict(_DVS, scheduler="persistent", separate_o_smem=True, chunked_p_convert=True, tile_m=128, tile_n=112)),
]
# The window, third round: the persistent walk in the causal (longest first, zigzag) order
# (schedule.TileScheduler.local). In m order the static stride had left one CTA in eight
# with only full tiles, 17% over the mean at (4096, 0) x 16k under the blocks-visited cost
# model: the persistent forms' 621-630 TFLOPS against one tile per CTA's 672 (check6/d2).
# One tile per CTA is the same-run control (the shipped switches).
MODEL_VARIANTS_3 = [
    ("single+in-order-sum+mask-bits", dict(_WS, scheduler="single")),
    ("persistent-lpt+separate-o+in-order-sum+mask-bits", _WP),
    ("persistent-lpt+separate-o+in-order-sum+mask-bits+q-double-buffer", dict(_WP, **_QDB)),
    ("persistent-lpt+separate-o+in-order-sum+mask-bits+q-double-buffer+deferred-o", dict(_WP, **_DEF)),
]
# (192, 128) causal, third round: FA4's SM90 kernel drops the ping-pong schedule barrier for
# head dims over 128 (flash_fwd_sm90.py: use_scheduler_barrier only for tile_hdim <= 128)
# and rescales O before the PV GEMM only for dv > 128; ours keeps both warpgroups on the
# barrier for every causal head dim (config: only hd192/256 non-causal drop it). The first
# row is the shipped (192, 128) (config.TUNED_VARIANTS); hd192 causal (dv 192) the same way
# against its shipped lpt + bit mask + P in pairs (config.TUNED), timed by bench.ab run.
_DV_NOPP = dict(_DVS, scheduler="lpt", pingpong=False)
_H192C = dict(head_dim=192, causal=True, scheduler="lpt", mask_bits=True, chunked_p_convert=True)
DV128_NOPINGPONG = [
    ("lpt+mask-bits+in-order-sum", dict(_DVS, scheduler="lpt")),
    ("lpt+mask-bits+in-order-sum+no-pingpong", _DV_NOPP),
    ("lpt+mask-bits+no-pingpong", dict(_DV_NOPP, in_order_row_sum=False)),
    ("lpt+mask-bits+in-order-sum+no-pingpong+rescale-o-early", dict(_DV_NOPP, rescale_o_early=True)),
]
# lpt's L2 sections sized as FA4 sizes them (50 MiB, a power of two pairs): (192, 128) and
# hd192 at 8k keys take 6 and 5 pairs a section at our 32 MiB, FA4 8 (hd128, hd256: the same
# pairs either way). 40 MiB gives (192, 128) 8 pairs and hd192 6; 48 MiB gives 9 and 8.
DV128_L2 = [
    ("lpt+mask-bits+in-order-sum+l2-40", dict(_DVS, scheduler="lpt", lpt_section_mib=40)),
    ("lpt+mask-bits+in-order-sum+l2-48", dict(_DVS, scheduler="lpt", lpt_section_mib=48)),
    # FA4's conditional rescale (softmax.OnlineSoftmax, threshold 8): O's 64 fp32 multiplies a
    # thread per key block skipped while no row of a warp moves; neutral at bf16 hd64 (check5),
    # not yet timed where QK^T is 1.5x PV's work.
    ("lpt+mask-bits+in-order-sum+lazy-rescale-8", dict(_DVS, scheduler="lpt", rescale_threshold=8.0)),
    ("lpt+mask-bits+in-order-sum+l2-48+lazy-rescale-8",
     dict(_DVS, scheduler="lpt", lpt_section_mib=48, rescale_threshold=8.0)),
]
# After 40 MiB's promotion (check8/l2: 757.9, 48 MiB 755.4, 32 MiB 741.5): 4, 12 and 16 pairs.
DV128_L2_3 = [(f"lpt+mask-bits+in-order-sum+l2-{mib}", dict(_DVS, scheduler="lpt", lpt_section_mib=mib))
              for mib in (20, 60, 80)]
# FA4's SASS beside ours (bench/results/2026-12-01-cpu/dv128-sass.md): NVVM rebuilds the QK^T
# GEMM's Q descriptors, K's and V's descriptor bases and the release lane test every key block
# (516 / 601 instructions a block unmasked / masked against FA4's 489 / 581). Pinned
# (FwdConfig.pin_loop_invariants): 475 / 589, the softmax's split around the PV wait as
# shipped; with the Q descriptors too (pin_q_desc) 461 / 576, but ptxas then leaves fewer exp2
# under the PV GEMM; without the ping-pong barrier too (FA4's choice above hd128). 168
# registers and no spills each. The first row is the shipped cubin (sha256-equal): an A/A
# control beside the shipped variant.
_DV40 = dict(_DVS, scheduler="lpt", lpt_section_mib=40)
_DVP = dict(_DV40, pin_loop_invariants=True)
DV128_SASS = [
    ("lpt+mask-bits+in-order-sum+l2-40", _DV40),
    ("lpt+mask-bits+in-order-sum+l2-40+pin", _DVP),
    ("lpt+mask-bits+in-order-sum+l2-40+pin+pin-q", dict(_DVP, pin_q_desc=True)),
    ("lpt+mask-bits+in-order-sum+l2-40+pin+no-pingpong", dict(_DVP, pingpong=False)),
]
HD192_L2 = [
    ("lpt+mask-bits+chunked-p+l2-48", dict(_H192C, lpt_section_mib=48)),
]
HD192_NOPINGPONG = [
    ("lpt+mask-bits+chunked-p", _H192C),
    ("lpt+mask-bits+chunked-p+no-pingpong", dict(_H192C, pingpong=False)),
    ("lpt+mask-bits+chunked-p+no-pingpong+rescale-o-early", dict(_H192C, pingpong=False, rescale_o_early=True)),
]
# e4m3 paged decode (issue 13): hd128 causal pack-GQA split-KV, the default set's form (64 x
# 128, 3 stages of K, V and the transposed V, 152 KiB). Decode is memory-bound: what can move
# it is bytes in flight per SM (stages, key tile) and the transposer's hop (V lands, warps
# 1..3 transpose it, the consumers read sVt); local-p-off is the shuffled P (fp8_p.py).
# Timed by bench/inference.py --ab-home beside the shipped e4m3 and bf16 decode.
_FD = dict(dtype="e4m3", head_dim=128, causal=True, tile_m=64, pack_gqa=True, paged_kv=True, split_kv=True)
FP8_DECODE = [
    ("default", _FD),
    ("stages-2", dict(_FD, stages=2)),
    ("stages-4", dict(_FD, stages=4)),
    ("tile-64x64", dict(_FD, tile_n=64)),
    ("tile-64x64+stages-6", dict(_FD, tile_n=64, stages=6)),
    ("tile-64x192", dict(_FD, tile_n=192)),
    ("local-p-off", dict(_FD, fp8_local_p=False)),
]
# Short causal prefill after session 5 (issue 10; check6: causal 512 at 0.83 / 0.83 / 0.84 / 0.86
# of the best anchor for hd96 / 128 / 192 / 256). ncu on hd128 causal 512 (check6/c1/ncu):
# cuDNN's persistent kernel, as wide as ours (132 x 384 threads, 168 registers), takes 232,448 B
# of shared memory, room for Q and three K/V stages with O out through Q's buffer, where ours
# keeps two stages and a separate O (197,632 B). Each row is a form the dispatcher serves at
# 512-1k keys (runtime/dispatch.py, spec SETS "default") or that form with a third stage in
# place of (or beside) the separate O; the shipped forms are the unsuffixed baselines. Where
# the third stage does not fit (hd192 at 128 x 96 needs 264 KiB, hd256 at 128 x 80 272 KiB;
# a separate O neither: 240 / 288 KiB) the rows take what does: the per-block savings that
# won elsewhere, and for hd192 a 128 x 64 tile, where a persistent CTA has room for its own O.
_P = dict(causal=True, scheduler="persistent")
SHORT_CAUSAL_STAGES = [
    # hd128 <= 768 rows: persistent + separate O (shipped); 3 stages, O through Q's buffer.
    ("persistent-lpt+separate-o", dict(_P, head_dim=128, separate_o_smem=True)),
    ("persistent-lpt+stages-3", dict(_P, head_dim=128, stages=3)),
    ("persistent-lpt+stages-3+mask-bits", dict(_P, head_dim=128, stages=3, mask_bits=True)),
    ("persistent-lpt+stages-3+mask-bits+in-order-sum",
     dict(_P, head_dim=128, stages=3, mask_bits=True, in_order_row_sum=True)),
    # hd128 from 769 rows: lpt + bit mask (shipped, 0.91 at 1k), with a third stage.
    ("lpt+mask-bits+stages-3", dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True, stages=3)),
    # hd96: one tile per CTA, all off (shipped); persistent with the separate O that won for
    # non-causal hd96 (1.06 / 1.09 at 512 / 1k), and with a third stage beside it (192 KiB).
    ("default", dict(head_dim=96, causal=True)),
    ("persistent-lpt+separate-o", dict(_P, head_dim=96, separate_o_smem=True)),
    ("persistent-lpt+separate-o+stages-3", dict(_P, head_dim=96, separate_o_smem=True, stages=3)),
    # hd192 / hd256 (lpt, all off, shipped): the bit mask and chunked P conversion on lpt; hd192
    # persistent with its own O at 128 x 64 (192 KiB).
    ("lpt+mask-bits+chunked-p", dict(head_dim=192, causal=True, scheduler="lpt", mask_bits=True,
                                     chunked_p_convert=True)),
    ("persistent-lpt+tile-128x64+separate-o+chunked-p",
     dict(_P, head_dim=192, tile_m=128, tile_n=64, separate_o_smem=True, chunked_p_convert=True)),
    ("lpt+mask-bits+chunked-p", dict(head_dim=256, causal=True, scheduler="lpt", mask_bits=True,
                                     chunked_p_convert=True)),
]
# hd96 at long sequences (issue 10; check6/c2/grid.log, ours / FA4 at 8k-16k: non-causal
# 0.85-0.90, causal 0.84). Shipped, the first row of each mask: 128 x 128, non-causal
# persistent + separate O (config.TUNED), causal one tile per CTA with all off. The earlier
# A/B (2026-12-01 ab-tiles-overhead.md, without separate O) had 128 x 160 3-4% behind at
# 8k-16k and 3 stages 2-4% ahead. Key tiles as wide as FA3's (hd96's K/V rows are small):
# 128 x 176 and 128 x 192, causal with the bit mask of one mask per 32 columns (mask.py
# keep_count_chunks). FA3's 192-row tiles spill here, where P stays in registers (three
# consumer warpgroups of 160 registers; FA3 passes P through shared memory): 192 x 112 4 B,
# 192 x 128 144 B, 192 x 144 224 B, so they are left out. Instruction counts are per key
# block of the unmasked loop (bench/mufu_sass.py).
_H96 = dict(head_dim=96, causal=False, scheduler="persistent", separate_o_smem=True)
_H96C = dict(head_dim=96, causal=True, scheduler="lpt", mask_bits=True)
HD96 = [
    ("persistent+separate-o", _H96),  # shipped
    ("persistent+separate-o+stages-3", dict(_H96, stages=3)),
    # Wider than 128 keys, P converts element by element through the A-operand view (F2FP 96
    # a block at 128 x 192, 597 instructions = 398 per 128 keys against 372); in runs, in
    # pairs (F2FP 48, 517 = 345 per 128 keys).
    *[(f"persistent+separate-o+chunked-p+tile-128x{n}", dict(_H96, chunked_p_convert=True, tile_m=128, tile_n=n))
      for n in (176, 192)],
    ("persistent+separate-o+q-double-buffer+deferred-o", dict(_H96, **_DEF)),  # hd128's winner
    ("persistent+separate-o+stages-3+q-double-buffer+deferred-o", dict(_H96, stages=3, **_DEF)),
    ("default", dict(head_dim=96, causal=True, scheduler="single")),  # shipped
    ("lpt+mask-bits", _H96C),  # hd128 causal's winner
    ("lpt+mask-bits+in-order-sum", dict(_H96C, in_order_row_sum=True)),
    ("lpt+mask-bits+stages-3", dict(_H96C, stages=3)),
    ("lpt+mask-bits+chunked-p+tile-128x192",  # FA3's hd96 causal tile
     dict(_H96C, chunked_p_convert=True, tile_m=128, tile_n=192)),
    ("persistent-lpt+separate-o", dict(head_dim=96, causal=True, scheduler="persistent", separate_o_smem=True)),
]
# P shifted up by 2^k before its e4m3 rounding (issue 13's error; FwdConfig.p_scale_log2): the
# exp2 subtracts (max - k), the fp32 row sum is of the same shifted P, so 2^k cancels in O /
# rowsum; P * 2^k <= 2^(threshold + k) must fit e4m3 (<= 8). CPU emulation
# (bench/fp8_p_emulate.py): on outlier inputs P's rounding alone costs RMSE 8.7e-3 at the
# shipped threshold 8 (the stale maximum leaves a row's largest P inexact), 3.5e-3 at
# threshold 0, 2.5e-3 with k = 8. Timed and error-studied by bench/fp8.py --ab-home: each
# group's first row is its base (FP8_P_SCALE_BASES), the others are read against it.
_P128 = dict(_E4M3_NC, tile_m=128, tile_n=192, in_order_row_sum=True)
_P128_ROW = dict(_E4M3_NC, v_layout="rowmajor", tile_m=128, tile_n=224)  # SET=fp8's
_P256 = dict(_E4M3_NC, head_dim=256, tile_m=128, tile_n=128)  # the default set's
FP8_P_SCALE = [
    ("tile-128x192+in-order-sum+lazy-rescale-8", dict(_P128, rescale_threshold=8.0)),  # TUNED_FP8
    *[(f"tile-128x192+in-order-sum{f'+lazy-rescale-{t}' if t else ''}+p-scale-{k}",
       dict(_P128, rescale_threshold=float(t), p_scale_log2=float(k))) for t, k in ((4, 4), (2, 6), (0, 8))],
    ("v-rowmajor+tile-128x224", _P128_ROW),
    ("v-rowmajor+tile-128x224+p-scale-8", dict(_P128_ROW, p_scale_log2=8.0)),
    ("tile-128x128", _P256),
    ("tile-128x128+p-scale-8", dict(_P256, p_scale_log2=8.0)),
    # hd128 speed (960 TFLOPS at 16k against a 1,000 target): a wider key block or a third
    # K/V stage at the shipped switches (built only where ptxas spills nothing).
    ("tile-128x192+in-order-sum+lazy-rescale-8+stages-3", dict(_P128, rescale_threshold=8.0, stages=3)),
    ("tile-128x224+in-order-sum+lazy-rescale-8", dict(_P128, tile_n=224, rescale_threshold=8.0)),
    ("tile-128x224+in-order-sum+lazy-rescale-4+p-scale-4",
     dict(_P128, tile_n=224, rescale_threshold=4.0, p_scale_log2=4.0)),
    # The bf16 kernel on plain Gaussian inputs, the issue's yardstick (config.TUNED's hd128).
    ("persistent+in-order-sum+separate-o+q-double-buffer+deferred-o",
     dict(head_dim=128, causal=False, scheduler="persistent", in_order_row_sum=True, separate_o_smem=True,
          q_double_buffer=True, deferred_o_store=True)),
]
FP8_P_SCALE_BASES = ("tile-128x192+in-order-sum+lazy-rescale-8", "v-rowmajor+tile-128x224", "tile-128x128")
# hd128 e4m3 at 16k, second round (942-960 TFLOPS, 65% of the e4m3 ceiling, against 1,000). A
# 128 x 192 key block costs each consumer warp ~787 instructions, 98 of them MUFU (8 clocks a warp
# each), while the tensor work per block at the e4m3 peak is about the two warpgroups' MUFU time:
# the softmax's issue slots and its serial head (row max) and tail (P's quad exchange) are what
# the loop waits on (bench/results/2026-12-01-cpu/fp8-hd128-2.md). The candidate: FA3's
# one-shuffle-per-word P exchange (pair-shuffle: 787 -> 719) on the shipped base (TUNED_FP8), beside
# SET=fp8's row-major and the default set's causal lpt bases. H200 check8/l7/: pair-shuffle 957.1
# against 907.9 (1.054x, gate ok), promoted in TUNED_FP8; the tensor-core row sum and speculative
# exp2 rows failed the gate (rel 0.314, lse 0.32: a bug, not rounding) and their switches were
# removed.
_H2 = dict(_E4M3_NC, tile_m=128, tile_n=192, rescale_threshold=8.0)
FP8_HD128_2 = [
    ("tile-128x192+in-order-sum+lazy-rescale-8", dict(_H2, in_order_row_sum=True)),  # TUNED_FP8 as timed
    ("tile-128x192+in-order-sum+lazy-rescale-8+pair-shuffle", dict(_H2, in_order_row_sum=True,
                                                                  fp8_p_pair_shuffle=True)),
    ("v-rowmajor+tile-128x224", _P128_ROW),  # SET=fp8's
    ("lpt", dict(_E4M3, causal=True, scheduler="lpt", v_layout="colmajor")),  # the default set's
]
# Each (head dim, causal, V layout) group's base in bench.fp8 --ab-home.
FP8_HD128_2_BASES = ("tile-128x192+in-order-sum+lazy-rescale-8", "v-rowmajor+tile-128x224", "lpt")
# e4m3 hd128 causal at 16k (issue 13: causal >= 0.95x non-causal; check9/n1 0.85x: lpt 128 x 128
# column-major 856.7 TFLOPS, row-major lpt 128 x 192 872.9, against the non-causal column-major
# 1,011.7). TUNED_FP8 gives the causal forms none of the non-causal winner's switches (128 x 192,
# in-order sum, lazy rescale 8, pair shuffle: +4.5%, +3.7%, +5.4% there, check/check5/check8), nor
# bf16 hd128 causal's bit mask (TUNED). In the SASS (bench/loop_sass.py --sets fp8-causal) the
# shipped causal unmasked loop costs 565 instructions per 128 keys against the non-causal
# winner's 479 (719 per 192), 0.85x, the measured ratio; with the winner's switches the causal
# unmasked loop is the winner's (718), and the bit mask takes its masked loop 967 -> 889.
# Candidates: those on the lpt form with the bit mask; the loop invariants pinned ((192, 128)'s
# +0.6%; 719 -> 709 here); the persistent walk in the causal order (longest tiles first: a tile's
# prologue and O store under the next one's loads), each with and without the pin. One 32 MiB
# lpt section holds 8 (head, batch) pairs of e4m3 16k K and V (FA4's 50 MiB rounds to the same
# 8), so the section size is not a candidate. Row-major (SET=fp8, V transposed, P local, no pair
# shuffle): the bit mask, and the in-order sum + lazy rescale on top. Controls, timed in the
# same process so causal / non-causal is one run's: both shipped causal forms and both shipped
# non-causal ones (sha256-equal to the default set's and SET=fp8's cubins).
_C = dict(_E4M3, causal=True, scheduler="lpt", v_layout="colmajor")
_C_WIN = dict(_C, tile_m=128, tile_n=192, in_order_row_sum=True, rescale_threshold=8.0, fp8_p_pair_shuffle=True,
              mask_bits=True)
_C_ROW = dict(_E4M3, causal=True, scheduler="lpt", v_layout="rowmajor", tile_m=128, tile_n=192)  # SET=fp8's
_WIN = "tile-128x192+in-order-sum+lazy-rescale-8+pair-shuffle"
FP8_CAUSAL = [
    (_WIN, dict(_E4M3_NC, tile_m=128, tile_n=192, in_order_row_sum=True, rescale_threshold=8.0,
                fp8_p_pair_shuffle=True)),  # TUNED_FP8 (the default set's), control
    ("v-rowmajor+tile-128x224", _P128_ROW),  # SET=fp8's, control
    ("lpt", _C),  # the default set's causal, control
    *[(f"{sched}+{_WIN}+mask-bits{pin}", dict(_C_WIN, scheduler=sched.split("-")[0],
                                               pin_loop_invariants=bool(pin)))
      for sched in ("lpt", "persistent-lpt") for pin in ("", "+pin-loop-invariants")],
    ("v-rowmajor+lpt+tile-128x192", _C_ROW),  # SET=fp8's causal, control
    ("v-rowmajor+lpt+tile-128x192+mask-bits", dict(_C_ROW, mask_bits=True)),
    ("v-rowmajor+lpt+tile-128x192+in-order-sum+lazy-rescale-8+mask-bits",
     dict(_C_ROW, in_order_row_sum=True, rescale_threshold=8.0, mask_bits=True)),
]
# The shipped forms among them: each (head dim, causal, V layout) group's base in bench.fp8 --ab-home.
FP8_CAUSAL_BASES = (_WIN, "v-rowmajor+tile-128x224", "lpt", "v-rowmajor+lpt+tile-128x192")
# e4m3 hd64 (issue 13, secondary: check9/n1 561 TFLOPS non-causal, 565 causal, 38% of the e4m3
# ceiling). Shipped: persistent 192 x 128 (three consumer warpgroups), O in its own buffer, all
# else off, both masks. Per key block and warp (bench/loop_sass.py --sets fp8-hd64) the
# unmasked loop issues 521 instructions for 64 scores a thread (8.1 a score); the pair shuffle
# takes it to 477, the in-order sum + lazy rescale on top 494; 128 x 192 674 for 96 scores
# (7.0), 128 x 256 855 for 128 (6.7). Candidates: those on the shipped form, the wider key
# blocks at 128 rows, and causal with the bit mask (masked loop 693 -> 608).
_H64 = dict(_E4M3, head_dim=64, scheduler="persistent", v_layout="colmajor")
_H64_W = dict(in_order_row_sum=True, rescale_threshold=8.0, fp8_p_pair_shuffle=True)
FP8_HD64 = [
    ("default", dict(_H64, causal=False)),  # shipped, control
    ("pair-shuffle", dict(_H64, causal=False, fp8_p_pair_shuffle=True)),
    ("in-order-sum+lazy-rescale-8+pair-shuffle", dict(_H64, causal=False, **_H64_W)),
    *[(f"tile-128x{n}+in-order-sum+lazy-rescale-8+pair-shuffle",
       dict(_H64, causal=False, tile_m=128, tile_n=n, **_H64_W)) for n in (192, 256)],
    ("default", dict(_H64, causal=True)),  # shipped, control
    ("pair-shuffle+mask-bits", dict(_H64, causal=True, fp8_p_pair_shuffle=True, mask_bits=True)),
    ("in-order-sum+lazy-rescale-8+pair-shuffle+mask-bits", dict(_H64, causal=True, mask_bits=True, **_H64_W)),
]
FP8_HD64_BASES = ("default",)
# hd96 after its session-6 promotion (check6/e2: bf16 non-causal 128 x 176 0.90 / 0.97 at 8k /
# 16k, causal persistent + separate O 0.89 / 0.86): the shipped forms as baselines, then the
# overlaps and masks that won on hd128 / hd64 on top of each.
_H96W = dict(_H96, chunked_p_convert=True, tile_m=128, tile_n=176)
_H96P = dict(head_dim=96, causal=True, scheduler="persistent", separate_o_smem=True)
HD96_2 = [
    ("persistent+separate-o+chunked-p+tile-128x176", _H96W),  # shipped (bf16)
    ("persistent+separate-o+chunked-p+tile-128x176+q-double-buffer+deferred-o", dict(_H96W, **_DEF)),
    ("persistent+separate-o+chunked-p+tile-128x176+in-order-sum", dict(_H96W, in_order_row_sum=True)),
    ("persistent-lpt+separate-o", _H96P),  # shipped
    ("persistent-lpt+separate-o+mask-bits", dict(_H96P, mask_bits=True)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum", dict(_H96P, mask_bits=True, in_order_row_sum=True)),
    ("persistent-lpt+separate-o+q-double-buffer+deferred-o", dict(_H96P, **_DEF)),
]
# bf16 hd128 decode (issue 11's --decode cells and spec / GQA decode at 0.99 of FA4 / cuDNN,
# bench/results/2026-12-01-h200/check5/a2/grid.log, check/inference.log). The shipped form is
# 64 x 128 with 3 stages (208 KiB, 255 registers: one CTA an SM), so 256 tiles on 132 SMs run
# as two waves, each CTA restarting the K/V stream (Q row loads, first TMA round trip) at the
# wave boundary; bench/decode_ab.py says why (figures per cell). Candidates, each causal and
# not, split and unsplit (timed by bench/decode_ab.py --ab-home at forced split counts beside
# the shipped forms and the anchors): the same 208 KiB in flight in 64-key blocks (finer
# stages), 64 x 64 at the default 3 stages, and two CTAs an SM (64 x 64, 2 stages, 80 KiB, the
# registers halved): 256 tiles then fit one wave of 264 slots.
_DEC = dict(head_dim=128, tile_m=64, pack_gqa=True)
DECODE_HD128 = [
    (label, dict(_DEC, causal=c, split_kv=sp, **over))
    for label, over in (
        ("tile-64x64", dict(tile_n=64)),
        ("tile-64x64+stages-6", dict(tile_n=64, stages=6)),
        ("tile-64x64+stages-2+2cta", dict(tile_n=64, stages=2, ctas_per_sm=2)),
        # Between the two: 96-key blocks at the shipped bytes in flight, and two CTAs an SM
        # with three stages of 48-key blocks (88 KiB each: 144 KiB in flight an SM, not 128).
        ("tile-64x96+stages-4", dict(tile_n=96, stages=4)),
        ("tile-64x48+stages-3+2cta", dict(tile_n=48, stages=3, ctas_per_sm=2)),
    )
    for c in (False, True) for sp in (False, True)
]
# hd64 decode (session 20, check20/c1 on an H100: the non-causal q16 / q64 --decode cells at
# 0.957-0.978x cuDNN, 3.0 TB/s against its 3.08-3.12, with the shipped 64 x 128 pack-GQA form,
# three stages of K and V (96 KiB in flight an SM, one CTA: 255 registers)). More bytes in flight:
# six stages in one CTA, or two CTAs an SM as hd128's decode forms (config.TUNED_DECODE). The
# first row of each group is the shipped form rebuilt (an A/A control). Timed by
# bench/decode_ab.py --head-dim 64 --ab-home. Session 21 (check21/a1, an H100; float64 tests a2):
# 64 x 64 with two CTAs an SM 1.020-1.026x the shipped form on the six 32k-key cells (one wave
# of 128 CTAs) and 0.985-0.999x on the 8k non-causal ones (512 CTAs); six stages and three
# stages at two CTAs lost or tied everywhere. Not promoted: it needs a wave-count rule.
_DEC64 = dict(head_dim=64, tile_m=64, pack_gqa=True)
DECODE_HD64 = [
    (label, dict(_DEC64, causal=c, split_kv=sp, **over))
    for label, over in (
        ("default", {}),
        ("stages-6", dict(stages=6)),
        ("stages-3+2cta", dict(stages=3, ctas_per_sm=2)),
        ("tile-64x64+stages-4+2cta", dict(tile_n=64, stages=4, ctas_per_sm=2)),
    )
    for c in (False, True) for sp in (False, True)
]
# Issue 10's long cells (hd64 / hd128 / hd256 at 8k-16k, 0.95-0.99 of FA4): the (192, 128)
# session's two wins applied to the shipped long forms (config.TUNED; the first row of each
# group is that form rebuilt, an A/A control): the loop invariants pinned
# (pin_loop_invariants), lpt's L2 sections at 40 MiB (hd128: 10 pairs at 8k keys where 32 MiB
# takes 8; hd256 5 where it takes 4), and the persistent walk's tile decode by multiply-high
# and shift (fast_divmod). Rows whose loops the pin leaves unchanged in the SASS are left out
# (bench/results/2026-12-01-cpu/long-ab.md lists the counts).
_L128C = dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True)
_L128N = dict(head_dim=128, causal=False, scheduler="persistent", separate_o_smem=True, in_order_row_sum=True,
              q_double_buffer=True, deferred_o_store=True)
_L256C = dict(head_dim=256, causal=True, scheduler="lpt")
_L256N = dict(head_dim=256, causal=False, scheduler="persistent", chunked_p_convert=True)
_L64 = dict(head_dim=64, scheduler="persistent", separate_o_smem=True, wg_epilogue=True, q_double_buffer=True)
_PIN, _FDM = dict(pin_loop_invariants=True), dict(fast_divmod=True)
# Every candidate of the three knobs on the six forms, for the SASS counts; `long-ab` is the
# timed set: each form's control, + pin, and + pin with the other knob (the pair against
# + pin isolates it): 6 controls and 12 candidates.
LONG_AB_ALL = [
    ("lpt+mask-bits", _L128C),
    ("lpt+mask-bits+pin", dict(_L128C, **_PIN)),
    ("lpt+mask-bits+l2-40", dict(_L128C, lpt_section_mib=40)),
    ("lpt+mask-bits+l2-40+pin", dict(_L128C, lpt_section_mib=40, **_PIN)),
    ("lpt", _L256C),
    ("lpt+pin", dict(_L256C, **_PIN)),
    ("lpt+l2-48", dict(_L256C, lpt_section_mib=48)),
    ("lpt+l2-48+pin", dict(_L256C, lpt_section_mib=48, **_PIN)),
    *[(f"{base}{tail}", dict(form, **over))
      for base, form in (("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o", _L128N),
                         ("persistent+chunked-p", _L256N),
                         ("persistent+separate-o+wg-epilogue+q-double-buffer", dict(_L64, causal=True)),
                         ("persistent+separate-o+wg-epilogue+q-double-buffer", dict(_L64, causal=False)))
      for tail, over in (("", {}), ("+pin", _PIN), ("+fast-divmod", _FDM), ("+pin+fast-divmod", dict(_PIN, **_FDM)))],
]
# The sections alone and fast_divmod alone change no loop (l2 is the tile order; the decode
# is outside the key-block loops), and the pin changes every form's loops, so they are left out.
LONG_AB = [(label, over) for label, over in LONG_AB_ALL
           if not (label.endswith(("+l2-40", "+l2-48", "+fast-divmod")) and "+pin" not in label)]
# Short causal hd128's per-tile epilogue (issue 10, 0.83 / 0.87 of cuDNN at 512 / 1k): cuDNN runs
# the same 132 x 384-thread geometry and stores O in 16 TMA boxes a tile (one per warp and
# swizzle atom of columns) where the shipped form has both warpgroups meet at two 256-thread
# barriers around one store. warp_o_store has each warp store its own 16 rows after a warp
# sync only; with it, the switches that moved other short cells (the bit mask, the Q double
# buffer, the deferred store), and without ping-pong. The second control is the form the
# dispatcher serves from 769 rows (lpt + bit mask, 0.89-0.92 of cuDNN at 1k in check6): a
# candidate above it at 1k moves the crossover too.
_SEPI = dict(head_dim=128, causal=True, scheduler="persistent", separate_o_smem=True)
_WO = dict(_SEPI, warp_o_store=True)
SHORT_EPI = [
    ("persistent-lpt+separate-o", _SEPI),  # shipped (<= 768 rows) until check9/n4, the control
    ("lpt+mask-bits", dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True)),  # shipped > 768 rows
    ("persistent-lpt+separate-o+warp-o-store", _WO),  # promoted in check9/n4 (config.TUNED)
    ("persistent-lpt+separate-o+warp-o-store+mask-bits", dict(_WO, mask_bits=True)),
    ("persistent-lpt+separate-o+warp-o-store+q-double-buffer", dict(_WO, **_QDB)),
    ("persistent-lpt+separate-o+warp-o-store+q-double-buffer+deferred-o", dict(_WO, **_DEF)),
    # Ping-pong makes a warpgroup wait for its partner's GEMMs every key block; a tile here
    # has 1-4 blocks, each tile's first QK^T and last PV run outside it anyway.
    ("persistent-lpt+separate-o+warp-o-store+no-pingpong", dict(_WO, pingpong=False)),
]
# fp16's long non-causal cells (check10/p3: hd64 8k 0.90 and hd128 16k 0.93 of FA4, where bf16
# is 1.00 / 0.96): the tables were measured on bf16 only, and ptxas lays fp16's loop out
# differently (the hd64 form's key-block loop is 436 instructions against bf16's 417, with a
# barrier-wait retry inlined), so fp16 may want switches of its own. Each fp16 form beside its
# bf16 twin (the shipped switches, rebuilt) and the variations that change the loop.
_F16 = dict(dtype="fp16")
FP16_LONG = [
    *[(label, dict(form, **_F16, **over))
      for form, variations in ((dict(_L64, causal=False), (("persistent+separate-o+wg-epilogue+q-double-buffer", {}),
                                                           ("persistent+separate-o+wg-epilogue", dict(q_double_buffer=False)),
                                                           ("persistent+separate-o+wg-epilogue+q-double-buffer+in-order-sum",
                                                            dict(in_order_row_sum=True)),
                                                           ("persistent+separate-o+wg-epilogue+q-double-buffer+pin", _PIN))),
                               (_L128N, (("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o", {}),
                                         ("persistent+separate-o+in-order-sum",
                                          dict(q_double_buffer=False, deferred_o_store=False)),
                                         ("persistent+separate-o", dict(q_double_buffer=False, deferred_o_store=False,
                                                                        in_order_row_sum=False)),
                                         ("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o+fast-divmod",
                                          _FDM),
                                         ("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o+pin", _PIN))))
      for label, over in variations],
    ("persistent+separate-o+wg-epilogue+q-double-buffer", dict(_L64, causal=False)),  # the bf16 twins
    ("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o", _L128N),
]
# hd96 at FA4's SM90 tiles (issue 10; check6's long cells: non-causal 0.90 / 0.97 of FA4 at 8k /
# 16k, causal 0.89 / 0.86): 192 x 144 non-causal and 192 x 128 causal, three consumer
# warpgroups, with P through shared memory (p_smem: the PV GEMM's A from a descriptor, FA4's
# mma_pv_is_rs=False), and the same tiles with P in registers where they build (what RS
# costs there). 192 x 144 with its own O buffer needs 240 KiB: O goes out through Q's buffer.
_PSS_NC = dict(head_dim=96, causal=False, scheduler="persistent", tile_m=192, tile_n=144)
_PSS_C = dict(head_dim=96, causal=True, scheduler="persistent", separate_o_smem=True, mask_bits=True,
              in_order_row_sum=True, tile_m=192, tile_n=128)
HD96_PSS = [
    ("persistent+separate-o+chunked-p+tile-128x176", _H96W),  # shipped (bf16)
    ("persistent+p-smem+tile-192x144", dict(_PSS_NC, p_smem=True)),
    ("persistent+p-smem+in-order-sum+tile-192x144", dict(_PSS_NC, p_smem=True, in_order_row_sum=True)),
    ("persistent+chunked-p+tile-192x144", dict(_PSS_NC, chunked_p_convert=True)),  # RS
    ("persistent+separate-o+p-smem+tile-192x128", dict(_PSS_NC, tile_n=128, separate_o_smem=True, p_smem=True)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum", dict(_H96P, mask_bits=True, in_order_row_sum=True)),  # shipped
    ("persistent-lpt+separate-o+mask-bits+in-order-sum+p-smem+tile-192x128", dict(_PSS_C, p_smem=True)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum+tile-192x128", _PSS_C),  # RS
    ("lpt+mask-bits+in-order-sum+p-smem+tile-192x128",
     dict(_PSS_C, scheduler="lpt", separate_o_smem=False, p_smem=True)),
]
# Second round (check10/r2): fp16 hd128 non-causal gained 1.5-6.5% at 4k-16k over three runs
# without the short-sequence overlaps (Q double buffer, deferred O); whether that holds at
# 512-2k and for bf16's 16k cell, and hd96's p_smem forms in fp16 (bf16's won 7-10% at 8k-16k).
_F16_96NC = dict(head_dim=96, causal=False, scheduler="persistent", separate_o_smem=True, dtype="fp16")  # fp16 ships 128 x 128
FP16_2 = [
    ("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o", _L128N),  # shipped (bf16 and fp16)
    ("persistent+separate-o+in-order-sum", dict(_L128N, q_double_buffer=False, deferred_o_store=False)),
    ("persistent+separate-o+in-order-sum+q-double-buffer+deferred-o", dict(_L128N, **_F16)),
    ("persistent+separate-o+in-order-sum", dict(_L128N, **_F16, q_double_buffer=False, deferred_o_store=False)),
    ("persistent+separate-o", _F16_96NC),  # shipped fp16
    ("persistent+p-smem+in-order-sum+tile-192x144", dict(_PSS_NC, **_F16, p_smem=True, in_order_row_sum=True)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum", dict(_H96P, **_F16, mask_bits=True, in_order_row_sum=True)),
    ("persistent-lpt+separate-o+mask-bits+in-order-sum+p-smem+tile-192x128", dict(_PSS_C, **_F16, p_smem=True)),
]
# Short causal hd128 (issue 10): in check11/a4's ncu source counters (bf16 hd128 causal 512, the
# shipped persistent form) the consumers' wait for the next tile's Q is the largest single stall
# site (11.5% of all warp samples), the last V and the loop's K waits 3% and 2%: a tile's first
# loads go out only about one key block before they are needed, as two K/V stages allow. Half-
# width key blocks (128 x 64) with three or four stages issue them further ahead in the same
# shared memory; each against the shipped form (the control) and lpt's (shipped beyond 1,536 rows).
_N64 = dict(tile_m=128, tile_n=64)
SHORT_N64 = [
    ("persistent-lpt+separate-o+warp-o-store", _WO),
    ("persistent-lpt+separate-o+warp-o-store+tile-128x64+stages-3", dict(_WO, **_N64, stages=3)),
    ("persistent-lpt+separate-o+warp-o-store+tile-128x64+stages-4", dict(_WO, **_N64, stages=4)),
    ("lpt+mask-bits+tile-128x64+stages-3", dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True,
                                                **_N64, stages=3)),
    ("lpt+mask-bits+tile-128x64+stages-4", dict(head_dim=128, causal=True, scheduler="lpt", mask_bits=True,
                                                **_N64, stages=4)),
]
# check11/a6: the K/V pipeline's bytes in flight limit the short causal cell (a5's 128 x 64 at 3-4
# stages holds as many keys as the shipped 2 x 128). Tiles whose stages hold more keys in the
# same shared memory, with O still in its own buffer: 3 x 96 = 288 and 4 x 80 = 320 keys.
SHORT_KEYS = [
    ("persistent-lpt+separate-o+warp-o-store", _WO),
    ("persistent-lpt+separate-o+warp-o-store+tile-128x96+stages-3", dict(_WO, tile_m=128, tile_n=96, stages=3)),
    ("persistent-lpt+separate-o+warp-o-store+tile-128x80+stages-4", dict(_WO, tile_m=128, tile_n=80, stages=4)),
    ("persistent-lpt+separate-o+warp-o-store+mask-bits+tile-128x96+stages-3",
     dict(_WO, tile_m=128, tile_n=96, stages=3, mask_bits=True)),
]
# Short causal (issue 10: 0.86-0.89 of cuDNN at 512 for hd128-256). The persistent causal walk
# took every (head, batch) pair's last m block before any pair's next (causal_order "all"), so
# a pair's K and V come back a pass over all pairs later: at 512 keys hd128 that read 128 MiB of
# K and V ~2.5 times from HBM (check13/a1's ncu: DRAM reads twice cuDNN's). short-pairs (check13
# a1, b1) ran each shipped causal form against the same walking one pair's m blocks in a row
# (its label's "+pair-major", causal_order "pairs": the same order), and persistent forms for
# the head dims that ship lpt; short-sections adds causal_order "sections", which keeps the
# static stride's balance where "pairs" loses it (tests/test_causal_order.py).
# TUNED keys promoted after the sets built on _shipped ran (check13 / check14): _shipped leaves
# them out, so each row stays the build it was timed as (tests/test_ab_sets.py).
_PROMOTED_SINCE = ("causal_order", "rescale_threshold")


def _shipped(head_dim: int, scheduler: str, tile=None) -> tuple[str, dict]:
    """(label, overrides) of the shipped causal form config.TUNED keys (head_dim, True,
    scheduler, tile): its switches by name, so the row means what it says."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import TUNED

    # The forms as these sets ran them, whatever TUNED took on since: the causal walk (check13)
    # and the conditional rescale (hd192 lpt, check14/h1).
    over = {k: v for k, v in TUNED.get((head_dim, True, scheduler, tile), {}).items() if k not in _PROMOTED_SINCE}
    label = scheduler + "".join(f"+{k.replace('_', '-')}" for k in sorted(over) if over[k] is True)
    label += f"+stages-{over['stages']}" if "stages" in over else ""
    label += f"+tile-{tile[0]}x{tile[1]}" if tile else ""
    return label, dict(head_dim=head_dim, causal=True, scheduler=scheduler, **over,
                       **(dict(tile_m=tile[0], tile_n=tile[1]) if tile else {}))


def _with_order(rows, *orders, tag=None):
    """Each row, then the row with each causal_order (labelled `+pair-major` for "pairs" where
    tag says so, as short-pairs was; else `+<order>`)."""
    out = []
    for label, over in rows:
        out.append((label, over))
        for order in orders:
            name = "pair-major" if (order == "pairs" and tag == "pair-major") else f"order-{order}"
            out.append((f"{label}+{name}", dict(over, causal_order=order)))
    return out


_P256 = dict(head_dim=256, causal=True, scheduler="persistent")
_P192 = dict(head_dim=192, causal=True, scheduler="persistent", mask_bits=True, chunked_p_convert=True)
SHORT_PAIRS = [
    *_with_order([_shipped(128, "persistent"), _shipped(64, "persistent", (128, 128)),
                  _shipped(64, "persistent"), _shipped(96, "persistent")], "pairs", tag="pair-major"),
    _shipped(128, "lpt"), _shipped(192, "lpt"), _shipped(256, "lpt"),
    ("persistent+pair-major", dict(_P256, causal_order="pairs")),
    ("persistent+pin-loop-invariants+pair-major", dict(_P256, pin_loop_invariants=True, causal_order="pairs")),
    ("persistent+chunked-p-convert+mask-bits+pair-major", dict(_P192, causal_order="pairs")),
]
SHORT_SECTIONS = [
    *_with_order([_shipped(128, "persistent")], "pairs", "sections"),
    *_with_order([_shipped(64, "persistent", (128, 128)), _shipped(96, "persistent")], "sections"),
    _shipped(128, "lpt"), _shipped(192, "lpt"), _shipped(256, "lpt"),
    *[(f"persistent+pin-loop-invariants+order-{o}", dict(_P256, pin_loop_invariants=True, causal_order=o))
      for o in ("pairs", "sections")],
    *[(f"persistent+chunked-p-convert+mask-bits+order-{o}", dict(_P192, causal_order=o)) for o in ("pairs", "sections")],
]
# check13/c1: on cells where one section holds every pair (K and V fit 32 MiB, or num_m odd) the
# sectioned decode cost hd96 2.4-4%, hd64 0.5-3%, hd128 0.5-2% against the shipped all-pairs
# walk. d1 ran these rows with the kernel branching to the all-pairs decode there (commit
# ac6a80a): no better there, and 3-13% slower on the sectioned cells, so the branch was removed.
SHORT_SECTIONS_2 = [*_with_order([_shipped(128, "persistent"), _shipped(64, "persistent", (128, 128)),
                                 _shipped(96, "persistent")], "sections"),
                    # the forms the dispatcher serves beyond the short ones' ranges, as controls
                    _shipped(128, "lpt"), _shipped(64, "persistent"), _shipped(96, "persistent", (192, 128))]
# Short causal hd192 / hd256 (issue 10: 0.87-0.89 of cuDNN at 512 keys, check13/f1). Their key
# blocks (96 / 80 keys) do not divide a 128-row tile's diagonal: at 512 keys a pair's four m
# blocks take 2+3+4+6 blocks of 96 or 2+4+5+7 of 80, 1,440 key columns either way, where the
# causal rows need 1,280 (12.5% more GEMM work; 6% at 1k, 3% at 2k: the gap's shape). 64-key
# blocks divide the diagonal. Each shipped lpt form (the control) against itself at 128 x 64,
# with a third stage where it fits (hd192), FA4's conditional rescale (O's rescale is 2x the
# exp2 count a block at 64 keys), and the sectioned persistent walk.
_N64W = dict(tile_m=128, tile_n=64)
SHORT_N64_WIDE = [
    _shipped(192, "lpt"),
    ("lpt+chunked-p-convert+mask-bits+tile-128x64", dict(_shipped(192, "lpt")[1], **_N64W)),
    ("lpt+chunked-p-convert+mask-bits+stages-3+tile-128x64", dict(_shipped(192, "lpt")[1], **_N64W, stages=3)),
    ("lpt+chunked-p-convert+mask-bits+lazy-rescale-8+tile-128x64",
     dict(_shipped(192, "lpt")[1], **_N64W, rescale_threshold=8.0)),
    ("persistent+chunked-p-convert+mask-bits+separate-o+order-sections+tile-128x64",
     dict(_P192, **_N64W, separate_o_smem=True, causal_order="sections")),
    _shipped(256, "lpt"),
    ("lpt+pin-loop-invariants+tile-128x64", dict(_shipped(256, "lpt")[1], **_N64W)),
    ("lpt+pin-loop-invariants+mask-bits+chunked-p-convert+tile-128x64",
     dict(_shipped(256, "lpt")[1], **_N64W, mask_bits=True, chunked_p_convert=True)),
    ("lpt+pin-loop-invariants+lazy-rescale-8+tile-128x64",
     dict(_shipped(256, "lpt")[1], **_N64W, rescale_threshold=8.0)),
    ("persistent+pin-loop-invariants+order-sections+tile-128x64",
     dict(_P256, **_N64W, pin_loop_invariants=True, causal_order="sections")),
]
# Round 2 (check14/a1: hd256 lpt 128 x 64 + lazy rescale 325 / 492 / 629 / 719 TFLOPS at 512-4k
# against the shipped 305 / 465 / 598 / 691; hd192's sectioned persistent 128 x 64 340 / 479 at
# 512 / 1k and 307 against 254 at 8 x 777, lpt keeping 2k-4k): the winners at 512-16k, the lazy
# rescale on the persistent forms too, and hd256 non-causal (0.95 of FA4 at 16k) at 128 x 64.
_L256N64 = dict(_shipped(256, "lpt")[1], **_N64W, rescale_threshold=8.0)
_P192N64 = dict(_P192, **_N64W, separate_o_smem=True, causal_order="sections")
SHORT_N64_WIDE_2 = [
    _shipped(256, "lpt"),
    ("lpt+pin-loop-invariants+lazy-rescale-8+tile-128x64", _L256N64),
    ("lpt+pin-loop-invariants+lazy-rescale-8+mask-bits+tile-128x64", dict(_L256N64, mask_bits=True)),
    ("persistent+pin-loop-invariants+lazy-rescale-8+order-sections+tile-128x64",
     dict(_P256, **_N64W, pin_loop_invariants=True, rescale_threshold=8.0, causal_order="sections")),
    _shipped(192, "lpt"),
    ("lpt+chunked-p-convert+mask-bits+lazy-rescale-8+tile-128x64",
     dict(_shipped(192, "lpt")[1], **_N64W, rescale_threshold=8.0)),
    ("persistent+chunked-p-convert+mask-bits+separate-o+order-sections+tile-128x64", _P192N64),
    ("persistent+chunked-p-convert+mask-bits+separate-o+lazy-rescale-8+order-sections+tile-128x64",
     dict(_P192N64, rescale_threshold=8.0)),
]
_N256 = dict(head_dim=256, causal=False, scheduler="persistent", chunked_p_convert=True)  # TUNED's
SHORT_N64_WIDE_NC = [
    ("persistent+chunked-p-convert", _N256),
    ("persistent+chunked-p-convert+lazy-rescale-8+tile-128x64", dict(_N256, **_N64W, rescale_threshold=8.0)),
    ("persistent+chunked-p-convert+lazy-rescale-8", dict(_N256, rescale_threshold=8.0)),
]
# Non-causal hd192 / hd256 at 512 keys (check14/f1: 0.94 / 0.96 of cuDNN): 512 keys take 6
# blocks of 96 or 7 of 80 (576 / 560 key columns, +12.5% / +9%), 8 of 64 exactly; at 1k the
# waste is 6% / 1.6%. check14/c1 had hd256 at 128 x 64 + lazy rescale 540 against 525 at 512,
# even at 1k and 5% behind at 16k: each shipped form against 128 x 64 at the short lengths.
_N192 = dict(head_dim=192, causal=False, scheduler="persistent", chunked_p_convert=True)  # TUNED's
SHORT_N64_NC = [
    ("persistent+chunked-p-convert", _N192),
    ("persistent+chunked-p-convert+tile-128x64", dict(_N192, **_N64W)),
    ("persistent+chunked-p-convert+lazy-rescale-8+tile-128x64", dict(_N192, **_N64W, rescale_threshold=8.0)),
    ("persistent+chunked-p-convert+stages-3+tile-128x64", dict(_N192, **_N64W, stages=3)),
    ("persistent+chunked-p-convert", _N256),
    ("persistent+chunked-p-convert+tile-128x64", dict(_N256, **_N64W)),
    ("persistent+chunked-p-convert+lazy-rescale-8+tile-128x64", dict(_N256, **_N64W, rescale_threshold=8.0)),
]
# The long cells still under the anchors after check14/f1 (hd64 causal 4k-16k 0.97-0.99 bf16,
# 0.94-0.96 fp16, and fp16 hd64 non-causal 0.95-0.97 at 8k-16k; hd192 causal 8k / 16k 0.99, FA4
# the anchor each time): FA4's conditional rescale, which won on every hd192 / hd256 causal form
# at 64 keys (check14/c1), on each shipped form, beside it (the control, rebuilt).
LONG_LAZY = [
    _shipped(192, "lpt"),
    ("lpt+chunked-p-convert+mask-bits+lazy-rescale-8", dict(_shipped(192, "lpt")[1], rescale_threshold=8.0)),
    # TUNED's hd64 forms (both masks: _L64's switches), bf16 then fp16.
    *[("persistent+separate-o+wg-epilogue+q-double-buffer" + tag, dict(_L64, causal=causal, **dt, **over))
      for dt in ({}, _F16) for causal in (True, False)
      for tag, over in (("", {}), ("+lazy-rescale-8", dict(rescale_threshold=8.0)))],
]
# (192, 128) causal b2 x 8k at 0.994x FA4 (check14/b1). FA4's conditional rescale gained 2-3%
# on hd192 (dv 192) lpt at 8k-16k (check14/h1) where check8/l2 had it lose on (192, 128) without
# the pin (708.6 against 757.9): on the shipped form (pinned, 40 MiB sections), with and
# without the in-order row sum.
DV128_LAZY = [
    ("lpt+mask-bits+in-order-sum+l2-40+pin", _DVP),  # shipped (config.TUNED_VARIANTS)
    ("lpt+mask-bits+in-order-sum+l2-40+pin+lazy-rescale-8", dict(_DVP, rescale_threshold=8.0)),
    ("lpt+mask-bits+l2-40+pin+lazy-rescale-8", dict(_DVP, in_order_row_sum=False, rescale_threshold=8.0)),
]
# Packed varlen at (192, 128) and hd256 (spec.VARLEN_WIDE, shipped on the persistent walk with
# no switch): 0.97 / 0.89 and 0.92 / 0.82 of FA4 non-causal / causal (check15/b1). The dense
# forms' winners that the inference kernel takes (P converted in pairs, the bit mask, the
# in-order row sum; not the conditional rescale), and one tile per CTA. Timed by
# bench/inference.py --ab-home beside the shipped variant and FA4 on its head dims. (When
# check15/c1 ran them the inference kernel ignored chunked_p_convert; it takes it since session
# 17, so a rebuild of these rows differs from c1's cubins.)
_VW = dict(varlen=True, scheduler="persistent")
_VW_FORMS = (dict(head_dim=192, head_dim_v=128), dict(head_dim=256))  # spec.VARLEN_WIDE's head dims
VARLEN_WIDE_AB = [
    (f"{walk}{tag}", dict(form, **{**_VW, "scheduler": walk}, causal=causal, **over))
    for form in _VW_FORMS
    for causal in (False, True)
    for walk, tag, over in (
        ("persistent", "", {}), ("persistent", "+chunked-p-convert", dict(chunked_p_convert=True)),
        ("persistent", "+in-order-sum", dict(in_order_row_sum=True)), ("single", "", {}),
        *((("persistent", "+mask-bits", dict(mask_bits=True)),
           ("persistent", "+mask-bits+chunked-p-convert", dict(mask_bits=True, chunked_p_convert=True)),
           ("persistent", "+mask-bits+chunked-p-convert+in-order-sum",
            dict(mask_bits=True, chunked_p_convert=True, in_order_row_sum=True))) if causal else ()))
]
# Round 2 (after c1): O staged in shared memory and stored by 16-byte rows (o_smem_store, hd128
# varlen's winner; (192, 128) through a (tile_m, 128) view of Q's buffer), and by one TMA store
# through the ragged map (o_tma_ragged); FA4's conditional rescale (now built for varlen), alone
# and with the staged O. Each beside its control (the shipped walk, as in c1).
VARLEN_WIDE_2 = [
    (f"persistent{tag}", dict(form, **_VW, causal=causal, **over))
    for form in _VW_FORMS
    for causal in (False, True)
    for tag, over in (("", {}), ("+o-smem", dict(o_smem_store=True)),
                      ("+o-smem+tma-o", dict(o_smem_store=True, o_tma_ragged=True)),
                      ("+lazy-rescale-8", dict(rescale_threshold=8.0)),
                      ("+o-smem+lazy-rescale-8", dict(o_smem_store=True, rescale_threshold=8.0)))
]
# Round 3 (after the promotion of e1's O store, bf16): the same store on fp16 beside fp16's
# shipped register store, and hd256 causal at 128 x 64 (the dense form's tile) with it, alone
# and with the conditional rescale, beside the promoted bf16 form.
_VWO = dict(o_smem_store=True, o_tma_ragged=True)
VARLEN_WIDE_3 = [
    *[(f"persistent{tag}", dict(form, **_VW, causal=causal, dtype="fp16", **over))
      for form in _VW_FORMS for causal in (False, True)
      for tag, over in (("", {}), ("+o-smem+tma-o", _VWO))],
    ("persistent+o-smem+tma-o+tile-128x64", dict(head_dim=256, **_VW, causal=True, **_VWO, tile_m=128, tile_n=64)),
    ("persistent+o-smem+tma-o+tile-128x64+lazy-rescale-8",
     dict(head_dim=256, **_VW, causal=True, **_VWO, tile_m=128, tile_n=64, rescale_threshold=8.0)),
]
# Round 4: the dense forms' pinned loop invariants (pin_loop_invariants: hd256 causal lpt 541 ->
# 490 loop instructions, (192, 128) +0.6%) in the varlen kernel, alone and on i1's best hd256
# causal candidate (128 x 64 with the conditional rescale, 1.037x), and that candidate with the
# bit mask as the dense 128 x 64 form has it, each beside the shipped bf16 form.
_VWP = dict(_VWO, pin_loop_invariants=True)
_T64 = dict(tile_m=128, tile_n=64, rescale_threshold=8.0)
VARLEN_WIDE_4 = [
    *[(f"persistent+o-smem+tma-o{tag}", dict(form, **_VW, causal=causal, **over))
      for form in _VW_FORMS for causal in (False, True)
      for tag, over in (("", _VWO), ("+pin", _VWP))],
    *[(f"persistent+o-smem+tma-o+tile-128x64+lazy-rescale-8{tag}", dict(head_dim=256, **_VW, causal=True, **_T64, **over))
      for tag, over in (("", _VWO), ("+pin", _VWP), ("+pin+mask-bits", dict(_VWP, mask_bits=True)))],
]
# The tile counter (varlen_dynamic): each CTA's next tile from an atomicAdd, in
# varlen_tile_by_keys's order for both masks, against the static zigzag stride (whose causal
# rounds keep every sequence's K/V in flight: 3.4x FA4's DRAM bytes at hd256, check16/n1). Each
# row is a shipped form as session 16 ships it (its tile, stages and switches written out, so
# the row keeps its meaning), plus the counter.
_O_SQ = dict(o_smem_store=True, o_tma_ragged=True)
_O_OWN = dict(separate_o_smem=True, o_tma_ragged=True)
_CM = dict(mask_bits=True, in_order_row_sum=True)
_SHIPPED_VARLEN_S16 = [  # (dtype, causal, form)
    ("bf16", True, dict(head_dim=256, tile_m=128, tile_n=64, stages=2, mask_bits=True, pin_loop_invariants=True,
                        rescale_threshold=8.0, **_O_SQ)),
    ("bf16", False, dict(head_dim=256, stages=2, **_O_SQ)),
    ("bf16", True, dict(head_dim=192, head_dim_v=128, stages=2, **_O_SQ)),
    ("bf16", False, dict(head_dim=192, head_dim_v=128, stages=2, **_O_SQ)),
    ("bf16", True, dict(head_dim=128, stages=2, **_O_OWN, **_CM)),
    ("bf16", False, dict(head_dim=128, stages=2, **_O_OWN)),
    ("fp16", True, dict(head_dim=256, stages=2, **_O_SQ)),
    ("fp16", False, dict(head_dim=256, stages=2, **_O_SQ)),
    ("fp16", True, dict(head_dim=192, head_dim_v=128, stages=2)),
    ("fp16", False, dict(head_dim=192, head_dim_v=128, stages=2)),
    ("fp16", True, dict(head_dim=128, stages=3, o_smem_store=True, **_CM)),
    ("fp16", False, dict(head_dim=128, stages=3, o_smem_store=True)),
]
_FORM_TOKENS = (("o_smem_store", "o-smem"), ("separate_o_smem", "separate-o"), ("o_tma_ragged", "tma-o"),
                ("in_order_row_sum", "in-order-sum"), ("mask_bits", "mask-bits"), ("pin_loop_invariants", "pin"))


def _form_label(form: dict) -> str:
    """The label tokens of a written-out form, so the label names every switch that is on."""
    tile = f"+tile-{form['tile_m']}x{form['tile_n']}" if "tile_m" in form else ""
    lazy = f"+lazy-rescale-{form['rescale_threshold']:g}" if "rescale_threshold" in form else ""
    return tile + lazy + "".join(f"+{token}" for switch, token in _FORM_TOKENS if form.get(switch))


# (check16/p1 ran these rows as "persistent+dynamic" before the labels named their switches.)
VARLEN_DYNAMIC = [
    (f"persistent+dynamic{_form_label(form)}", dict(form, dtype=dtype, causal=causal, varlen=True,
                                                    scheduler="persistent", varlen_dynamic=True))
    for dtype, causal, form in _SHIPPED_VARLEN_S16
]
# The dense hd192/256 non-causal winner (chunked_p_convert: S's registers converted to P in
# their own order, in pairs; bench.ab chunked-p, 0.96 -> 1.00 of the best anchor) in the
# inference kernel, which ignored the switch until session 17 (check15/c1's rows were A/A
# controls): the shipped wide varlen forms (with the counter; each rebuilds sha256-equal to its
# shipped cubin without the switch) with it. SASS: bf16 hd256 non-causal's key-block loop 499 ->
# 451 instructions; the other seven loops move by 0-3. Not run yet.
VARLEN_WIDE_5 = [
    (f"persistent+dynamic{_form_label(form)}+chunked-p", dict(form, dtype=dtype, causal=causal, varlen=True,
                                                             scheduler="persistent", varlen_dynamic=True,
                                                             chunked_p_convert=True))
    for dtype, causal, form in _SHIPPED_VARLEN_S16 if form["head_dim"] > 128
]
# The counter where varlen still runs one tile per CTA: paged varlen (chunked prefill against
# a paged cache: 0.94-1.12x FA4 across checks 14-16), the static persistent walk and the
# counter's, alone and with the packed hd128 forms' switches (O by one ragged TMA store from its
# own buffer; causal's bit mask and in-order sum); and packed hd64, bf16 and fp16. Not run yet.
_PG = dict(_VL, scheduler="persistent", paged_kv=True)
_PG_DYN = dict(_PG, varlen_dynamic=True)
_PG_TMA_O = dict(separate_o_smem=True, o_tma_ragged=True, stages=2)
VARLEN_DYNAMIC_2 = [
    *[(label, dict(base, causal=c)) for c in (False, True) for label, base in (
        ("persistent", _PG), ("persistent+dynamic", _PG_DYN),
        ("persistent+dynamic+separate-o+tma-o", dict(_PG_DYN, **_PG_TMA_O)))],
    ("persistent+dynamic+in-order-sum+mask-bits", dict(_PG_DYN, causal=True, **_CM)),
    ("persistent+dynamic+separate-o+tma-o+in-order-sum+mask-bits", dict(_PG_DYN, causal=True, **_PG_TMA_O, **_CM)),
    *[(label, dict(head_dim=64, varlen=True, scheduler="persistent", dtype=dt, causal=c, **over))
      for dt in ("bf16", "fp16") for c in (False, True)
      for label, over in (("persistent", {}), ("persistent+dynamic", dict(varlen_dynamic=True)))],
]
# The model variants on the persistent walk (one tile per CTA until session 17, which threads the
# window, softcap and sink through the walk): the shipped window varlen prefill (bf16 hd128,
# Mistral) on the static walk, with the counter, and with the packed hd128 forms' switches;
# softcap (Gemma-2) and the gpt-oss sink forms (full and windowed, hd64) with the counter.
# bench.inference --ab-home times them on the 16-sequence case with the axis (VARLEN_AB_MODEL).
# Not run yet.
_VM = dict(varlen=True, scheduler="persistent", head_dim=128)
_VM_O = dict(separate_o_smem=True, o_tma_ragged=True, stages=2)
VARLEN_MODEL = [
    ("persistent", dict(_VM, causal=False, local=True)),
    ("persistent+dynamic", dict(_VM, causal=False, local=True, varlen_dynamic=True)),
    ("persistent+dynamic+separate-o+tma-o", dict(_VM, causal=False, local=True, varlen_dynamic=True, **_VM_O)),
    ("persistent+dynamic+separate-o+tma-o+in-order-sum+mask-bits",
     dict(_VM, causal=False, local=True, varlen_dynamic=True, **_VM_O, **_CM)),
    ("persistent+dynamic+separate-o+tma-o+in-order-sum+mask-bits",
     dict(_VM, causal=True, softcap=True, varlen_dynamic=True, **_VM_O, **_CM)),
    ("persistent+dynamic", dict(_VM, head_dim=64, causal=True, learnable_sink=True, varlen_dynamic=True)),
    # (at hd64's default 192 x 128 the window's two-edge mask spills 224 B: spec.py's 128 x 128)
    ("persistent+dynamic+tile-128x128", dict(_VM, head_dim=64, causal=False, local=True, learnable_sink=True,
                                            varlen_dynamic=True, tile_m=128, tile_n=128)),
]
# The varlen forms SET=inference still builds one tile per CTA, on the walk with the counter:
# the paged chunked prefill forms other than bf16 hd128 (fp16 hd128 with and without the bf16
# winner's switches; hd64 bf16/fp16 with every switch off, as packed hd64 won), the fp16
# window (with bf16's winning switches), the hd64 windows at 128 x 128 (as the windowed sink
# form) and gpt-oss's non-causal hd64 sink. All 13 built here with no spills but the 12 B the
# shipped bf16 hd128 paged walk has too (3 LDL/STL, the producer's walk). bench.inference
# --ab-home times each beside its one-tile form (SET=inference) and FA4. Not run yet.
_VR = dict(varlen=True, scheduler="persistent", varlen_dynamic=True)
_VR_128 = dict(tile_m=128, tile_n=128)
VARLEN_WALK_REST = [
    *[(label, dict(_VR, head_dim=128, dtype="fp16", paged_kv=True, causal=c, **over))
      for c, switches in ((False, _PG_TMA_O), (True, dict(_PG_TMA_O, **_CM)))
      for label, over in (("persistent+dynamic", {}),
                          ("persistent+dynamic+separate-o+tma-o" + ("+in-order-sum+mask-bits" if c else ""), switches))],
    *[("persistent+dynamic", dict(_VR, head_dim=64, dtype=dt, paged_kv=True, causal=c))
      for dt in ("bf16", "fp16") for c in (False, True)],
    ("persistent+dynamic", dict(_VR, head_dim=128, dtype="fp16", causal=False, local=True)),
    ("persistent+dynamic+separate-o+tma-o+in-order-sum+mask-bits",
     dict(_VR, head_dim=128, dtype="fp16", causal=False, local=True, **_VM_O, **_CM)),
    # (at hd64's default 192 x 128 the walk's window spills 228-232 B here: not a candidate)
    *[("persistent+dynamic+tile-128x128", dict(_VR, head_dim=64, dtype=dt, causal=False, local=True, **_VR_128))
      for dt in ("bf16", "fp16")],
    ("persistent+dynamic", dict(_VR, head_dim=64, causal=False, learnable_sink=True)),
    # Paged with a model axis, which the walk had not been built with (families.py refuses the
    # pair in a set until these are measured): the paged window (Mistral's chunked prefill) and
    # the paged softcap with the packed window's winning switches, hd64's paged window at 128 x 128.
    *[("persistent+dynamic+separate-o+tma-o+in-order-sum+mask-bits",
       dict(_VR, head_dim=128, dtype=dt, paged_kv=True, causal=False, local=True, **_VM_O, **_CM))
      for dt in ("bf16", "fp16")],
    ("persistent+dynamic+separate-o+tma-o+in-order-sum+mask-bits",
     dict(_VR, head_dim=128, paged_kv=True, causal=True, softcap=True, **_VM_O, **_CM)),
    *[("persistent+dynamic+tile-128x128", dict(_VR, head_dim=64, dtype=dt, paged_kv=True, causal=False, local=True,
                                               **_VR_128))
      for dt in ("bf16", "fp16")],
]
# K's stage released after the softmax (FwdConfig.late_k_release, issue 10's long cells): ptxas
# places the PV GEMM's wait right after K's release, so the shipped 192-row hd64 forms wait for
# PV before any exp2 and run 293-493 instructions a block after it; with the release tied to the
# rows' sums every exp2 of the block runs before the wait on every dense form, and 79-178
# instructions after it (SASS here, bench/results/2026-12-07-cpu/late-k-release.md; not timed).
# Each form the default set ships where a cell is under the best anchor (check14/f1, check21/c1),
# rebuilt exactly as shipped (the control: tests/test_bench_ab.py checks it equals the shipped
# FwdConfig), and the same with K released late. (dtype, head_dim, head_dim_v, causal,
# scheduler, tile or None.)
LATE_K_FORMS = [
    *[(dt, 64, 64, c, "persistent", None) for dt in ("bf16", "fp16") for c in (False, True)],
    ("bf16", 128, 128, True, "lpt", None), ("fp16", 128, 128, False, "persistent", None),
    ("fp16", 128, 128, True, "lpt", None),
    *[(dt, 192, 192, True, "lpt", None) for dt in ("bf16", "fp16")],
    ("bf16", 192, 128, True, "lpt", None),  # (192, 128): issue 12's 0.99x FA4 cell
    *[(dt, 256, 256, False, "persistent", None) for dt in ("bf16", "fp16")],
    ("bf16", 256, 256, True, "lpt", (128, 64)),
]


# The packed varlen forms of the default set on the persistent walk (bench/inference.py
# --ab-home times them on the 16-sequence case beside the shipped form and FA4): hd128 and hd256
# non-causal leave every exp2 after the PV wait there (0 under the PV GEMM, 327 / 348
# instructions after it; hd256 non-causal is issue 11's 0.93-0.96x FA4 cell, where the dense
# hd256 form has 17 exp2s under it and matches FA4). hd64 causal is left out: with the switch it
# spills (42 local-memory loads/stores). (dtype, head_dim, head_dim_v, causal, tile or None, paged_kv.)
LATE_K_VARLEN_FORMS = [
    *[("bf16", d, dv, c, tile, False) for d, dv, tile in ((128, 128, None), (192, 128, None)) for c in (False, True)],
    ("bf16", 256, 256, False, None, False), ("bf16", 256, 256, True, (128, 64), False),
    ("bf16", 64, 64, False, None, False),
    *[("bf16", 128, 128, c, None, True) for c in (False, True)],
]


def shipped_overrides(dtype: str, head_dim: int, head_dim_v: int, causal: bool, scheduler: str, tile,
                      **form) -> dict:
    """The overrides experiment_config turns into the shipped form (config.TUNED's switches,
    stages and orders resolved and written out, every other switch off); `form`: the varlen /
    paged_kv axes of an inference form."""
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig, default_tile
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import SWITCHES, VALUE_SWITCHES

    tm, tn = tile or default_tile(head_dim, causal, head_dim_v)
    cfg = FwdConfig(arch="sm_90a", dtype=dtype, head_dim=head_dim, head_dim_v=head_dim_v, causal=causal,
                    scheduler=scheduler, tile_m=tm, tile_n=tn, **form)
    return {"dtype": dtype, "head_dim": head_dim, "head_dim_v": head_dim_v, "causal": causal, **form,
            **({"v_layout": cfg.v_layout} if cfg.fp8 else {}),
            "scheduler": scheduler, "tile_m": tm, "tile_n": tn, "stages": cfg.stages,
            "lpt_section_mib": cfg.lpt_section_mib, "causal_order": cfg.causal_order, "ctas_per_sm": cfg.ctas_per_sm,
            **{s: True for s in SWITCHES if getattr(cfg, s)},
            **{v: getattr(cfg, v) for v, off in VALUE_SWITCHES.items() if getattr(cfg, v) != off}}


# The label token of each switch, in the order a label lists them.
_SWITCH_TOKENS = (("separate_o_smem", "separate-o"), ("wg_epilogue", "wg-epilogue"), ("warp_o_store", "warp-o-store"),
                  ("mask_bits", "mask-bits"), ("chunked_p_convert", "chunked-p"), ("in_order_row_sum", "in-order-sum"),
                  ("q_double_buffer", "q-double-buffer"), ("deferred_o_store", "deferred-o"),
                  ("pin_loop_invariants", "pin"), ("pin_q_desc", "pin-q"), ("fast_divmod", "fast-divmod"),
                  ("p_smem", "p-smem"), ("o_smem_store", "o-smem"), ("o_tma_ragged", "tma-o"),
                  ("varlen_dynamic", "dynamic"), ("fp8_p_pair_shuffle", "pair-shuffle"),
                  ("late_k_release", "late-k-release"), ("try_wait_first", "try-wait"))


def switch_label(over: dict) -> str:
    """A label naming the scheduler, the tile, the stages and every switch `over` turns on."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import VALUE_SWITCHES

    known = {switch for switch, _ in _SWITCH_TOKENS}
    unnamed = [k for k, v in over.items()
               if v is True and k not in known and k not in ("causal", "varlen", "paged_kv", "pack_gqa", "split_kv")]
    unnamed += [k for k, off in VALUE_SWITCHES.items() if k != "rescale_threshold" and over.get(k, off) != off]
    if unnamed:
        raise ValueError(f"switch_label has no token for {unnamed}")
    parts = [over["scheduler"], f"tile-{over['tile_m']}x{over['tile_n']}", f"stages-{over['stages']}"]
    if over.get("ctas_per_sm", 1) != 1:
        parts.append(f"{over['ctas_per_sm']}cta")
    if over.get("causal_order", "all") != "all":
        parts.append(over["causal_order"])
    if over.get("lpt_section_mib"):
        parts.append(f"l2-{over['lpt_section_mib']}")
    if over.get("rescale_threshold"):
        parts.append(f"lazy-rescale-{over['rescale_threshold']:g}")
    return "+".join(parts + [token for switch, token in _SWITCH_TOKENS if over.get(switch)])


def _late_k_rows(overrides):
    return [(switch_label(o), o) for over in overrides for o in (over, dict(over, late_k_release=True))]


# The forms the dispatcher serves short causal prefill with (up to 3,072 rows: runtime/dispatch.py),
# where issue 10's 512-row cells sit at 0.86-0.93 of cuDNN; a tile there has 1-4 key blocks, so
# the loop weighs less than at 8k. Timed at 512 / 1k / 2k.
LATE_K_SHORT_FORMS = [
    ("bf16", 64, 64, True, "persistent", (128, 128)), ("bf16", 128, 128, True, "persistent", None),
    ("bf16", 192, 192, True, "persistent", (128, 64)), ("bf16", 256, 256, True, "lpt", (128, 64)),
]
# The decode forms on a dense cache (pack-GQA, 64-row tiles, one consumer warpgroup: no ping-pong
# partner covers the softmax, so the overlap inside the warpgroup is all there is): hd64
# non-causal has 3 exp2s under the PV GEMM as shipped, all 66 with K released late (249 -> 75
# instructions after the wait); hd128 (64 x 64, two CTAs an SM) 2 -> 34 (all). Each head dim its
# own set, as bench/decode_ab.py --head-dim times one. (causal, split_kv.)
LATE_K_DECODE_FORMS = [(c, sp) for c in (False, True) for sp in (False, True)]


def _late_k_decode(head_dim: int) -> list:
    from cubinforge.generator.kernels.fa3_fwd_sm90 import default_tile
    from cubinforge.generator.spec import pack_gqa_tile

    overs = []
    for c, sp in LATE_K_DECODE_FORMS:
        tile = pack_gqa_tile(head_dim, sp, False)  # the tile axes the default set builds
        tn = tile.get("tile_n", [default_tile(head_dim, c, head_dim)[1]])[0]
        overs.append(shipped_overrides("bf16", head_dim, head_dim, c, "single", (tile["tile_m"][0], tn),
                                       pack_gqa=True, split_kv=sp))
    return _late_k_rows(overs)


# The dense e4m3 forms of the default set (issue 13, blocked at 891 of its 1,000 TFLOPS target):
# FP8 halves the GEMMs, so the softmax left after the PV wait weighs twice; hd128 non-causal runs
# 2 exp2s under the PV GEMM and 521 instructions after its wait as shipped, 98 and 103 with K
# released late. Timed by bench/fp8.py --ab-home. (head_dim, causal, scheduler, tile or None.)
LATE_K_FP8_FORMS = [(64, False, "persistent", (128, 192)), (64, True, "persistent", None),
                    (128, False, "persistent", (128, 192)), (128, True, "persistent", (128, 192)),
                    (256, False, "persistent", (128, 128)), (256, True, "lpt", (128, 128))]
LATE_K_RELEASE = _late_k_rows(shipped_overrides(*form) for form in LATE_K_FORMS)
LATE_K_RELEASE_FP8 = _late_k_rows(shipped_overrides("e4m3", d, d, c, sched, tile, v_layout="colmajor")
                                  for d, c, sched, tile in LATE_K_FP8_FORMS)
LATE_K_RELEASE_SHORT = _late_k_rows(shipped_overrides(*form) for form in LATE_K_SHORT_FORMS)
LATE_K_RELEASE_VARLEN = _late_k_rows(shipped_overrides(dt, d, dv, c, "persistent", tile, varlen=True, paged_kv=paged)
                                     for dt, d, dv, c, tile, paged in LATE_K_VARLEN_FORMS)
# The A/B of check23 (H100): K released after the softmax lost 1-7% on every dense and varlen
# form, where it only delays the refill of K's stage, so the producer runs short of K stages
# there. The shipped 192 x 128 hd64 forms (the long cells 0.91-0.97 of FA4 on the H100) keep two
# K/V stages in 112 KiB of their 227; packed varlen hd64 (192 x 128, three stages) matches or
# beats FA4. Each shipped form, and the same with three and with four stages.
K_STAGES_FORMS = [(dt, 64, 64, c, "persistent", None) for dt in ("bf16", "fp16") for c in (False, True)]
# Stages named in every row: since check24 the causal forms ship with 3 (config.TUNED), and the
# rows stay the ones that ran (two stages the control).
K_STAGES = [(switch_label(o), o) for over in (shipped_overrides(*form) for form in K_STAGES_FORMS)
            for o in (dict(over, stages=2), dict(over, stages=3), dict(over, stages=4))]
# The short causal cells on an H100 (check24/g1, calls interleaved: hd128 / hd256 causal 512 at
# 0.92 / 0.87 of cuDNN, where the H200 had hd128 at 1.00). At 512 keys the cell moves 268 MB
# (Q, K, V, O), 89 us at the H100's 3.0 TB/s copy rate against ~55 us of tensor-core work: it is
# bound by memory there, not on the H200 (63 us). So the overlaps the H200 did not reward may pay
# on the H100: Q double-buffered (and the O store deferred) on hd128's short persistent form, a
# third K/V stage in place of its separate O (cuDNN's layout; lost 5-8% on the H200, session 6),
# and hd256 at 128 x 64 on the sectioned persistent walk beside the shipped lpt.
def _short_h100_rows(dtype: str) -> list:
    hd128 = shipped_overrides(dtype, 128, 128, True, "persistent", None)
    hd256 = shipped_overrides(dtype, 256, 256, True, "lpt", (128, 64))
    rows = [hd128, dict(hd128, q_double_buffer=True), dict(hd128, q_double_buffer=True, deferred_o_store=True),
            dict(hd128, stages=3, separate_o_smem=False, warp_o_store=False),
            hd256, dict(hd256, scheduler="persistent", causal_order="sections")]
    return [(switch_label(o), o) for o in rows]


SHORT_H100 = _short_h100_rows("bf16") + _short_h100_rows("fp16")
# fp16 hd64, the grid's long cells at 0.96-0.98 of FA4 where bf16 ties it (check24/g1, H100;
# check14 had the same on the H200). In the SASS (session 25) fp16's loops differ from bf16's in
# two ways: ptxas places the K/V waits' retry inline in fp16's key-block loops, with the barrier
# addresses in vector registers, and rebuilds K's and V's descriptors in 32-bit halves (FP16_PIN
# below): 436 / 446 instructions a block, non-causal / causal, against bf16's 417 / 435. FA4,
# whose loops are the same in both dtypes, tries the wait once and blocks only where that failed
# (FwdConfig.try_wait_first), and so does each candidate here.
# The bf16 rows check that it costs bf16 nothing. Each shipped form, then with the switch; fp16
# also with the loop invariants pinned on top, whose loops then match bf16's shipped ones (417 /
# 433; the pin alone lost 2-4% on bf16 hd64 in check9/n5, where it cut bf16's loop to 408).
TRY_WAIT_FORMS = [(dt, 64, 64, c, "persistent", None) for dt in ("fp16", "bf16") for c in (False, True)]
TRY_WAIT = [(switch_label(o), o) for dt, over in ((form[0], shipped_overrides(*form)) for form in TRY_WAIT_FORMS)
            for o in (over, dict(over, try_wait_first=True),
                      *([dict(over, try_wait_first=True, pin_loop_invariants=True)] if dt == "fp16" else []))]
# fp16's non-causal loops run 13-43 instructions a key block over bf16's (hd96 / 128 / 192 / 256:
# 454 / 484 / 469 / 492 against 441 / 461 / 440 / 449; check25/fp16-loops.md): ptxas rebuilds
# K's and V's descriptors in 32-bit halves (UIADD3 + UIADD3.X and re-made UMOVs) for the f16
# GEMMs where it uses 64-bit adds for bf16, from the same PTX. Pinned (FwdConfig.
# pin_loop_invariants) they come out at or under bf16's (432 / 458 / 429 / 440). The pin lost
# 1-7% on bf16 hd64 / hd128 in check9/n5; fp16's loops gain more from it. Each shipped fp16
# non-causal form from hd128 up (hd64's is in try-wait), then pinned.
FP16_PIN = [(switch_label(o), o) for over in (shipped_overrides("fp16", d, d, False, "persistent", None)
                                              for d in (128, 192, 256))
            for o in (over, dict(over, pin_loop_invariants=True))]
EXPERIMENTS = {"leave-one-out": LEAVE_ONE_OUT, "scheduler": SCHEDULER, "persistent": PERSISTENT, "softmax": SOFTMAX,
               "epilogue": EPILOGUE, "mask": MASK,
               "tiles": TILES, "overhead": OVERHEAD, "short-causal": SHORT_CAUSAL,
               "fp8-hd128": FP8_HD128, "model-variants": MODEL_VARIANTS, "varlen": VARLEN,
               "mufu": MUFU_FP8 + MUFU_BF16, "mufu-fp8": MUFU_FP8, "mufu-bf16": MUFU_BF16,
               "mufu-lite": MUFU_LITE, "varlen-persist": VARLEN_PERSIST, "varlen-tma-o": VARLEN_TMA_O, "short-overlap": SHORT_OVERLAP,
               "fp8-decode": FP8_DECODE, "model-variants-2": MODEL_VARIANTS_2,
               "short-causal-stages": SHORT_CAUSAL_STAGES, "hd96": HD96, "fp8-p-scale": FP8_P_SCALE,
               "hd96-2": HD96_2,
               "model-variants-3": MODEL_VARIANTS_3, "dv128-no-pingpong": DV128_NOPINGPONG,
               "hd192-no-pingpong": HD192_NOPINGPONG, "decode-hd128": DECODE_HD128,
               "dv128-l2": DV128_L2, "hd192-l2": HD192_L2, "dv128-l2-3": DV128_L2_3,
               "fp8-hd128-2": FP8_HD128_2, "dv128-sass": DV128_SASS, "fp8-causal": FP8_CAUSAL,
               "fp8-hd64": FP8_HD64, "long-ab-all": LONG_AB_ALL, "long-ab": LONG_AB,
               "short-epi": SHORT_EPI, "fp16-long": FP16_LONG, "hd96-pss": HD96_PSS,
               "fp16-2": FP16_2, "short-n64": SHORT_N64, "short-keys": SHORT_KEYS,
               "short-n64-wide": SHORT_N64_WIDE, "short-n64-wide-2": SHORT_N64_WIDE_2,
               "short-n64-wide-nc": SHORT_N64_WIDE_NC, "short-n64-nc": SHORT_N64_NC, "long-lazy": LONG_LAZY,
               "dv128-lazy": DV128_LAZY,
               "short-pairs": SHORT_PAIRS, "short-sections": SHORT_SECTIONS,
               "short-sections-2": SHORT_SECTIONS_2, "varlen-wide": VARLEN_WIDE_AB,
               "varlen-wide-2": VARLEN_WIDE_2, "varlen-wide-3": VARLEN_WIDE_3,
               "varlen-wide-4": VARLEN_WIDE_4, "varlen-dynamic": VARLEN_DYNAMIC,
               "varlen-dynamic-2": VARLEN_DYNAMIC_2, "varlen-wide-5": VARLEN_WIDE_5,
               "varlen-model": VARLEN_MODEL, "varlen-walk-rest": VARLEN_WALK_REST,
               "decode-hd64": DECODE_HD64, "late-k-release": LATE_K_RELEASE, "late-k-release-short": LATE_K_RELEASE_SHORT,
               "late-k-release-fp8": LATE_K_RELEASE_FP8,
               "late-k-release-decode64": _late_k_decode(64), "late-k-release-decode128": _late_k_decode(128),
               "late-k-release-varlen": LATE_K_RELEASE_VARLEN, "k-stages": K_STAGES,
               "short-h100": SHORT_H100, "try-wait": TRY_WAIT, "fp16-pin": FP16_PIN}
# FwdConfig fields that are variant axes of their own (the runtime selects by them).
MODEL_AXES = ("softcap", "local", "learnable_sink", "head_dim_v")
# The inference forms' axes (runtime/varlen.py selects a varlen variant by them).
INFERENCE_AXES = ("split_kv", "pack_gqa", "paged_kv", "varlen")
SEQLENS = (512, 2048, 8192)


def experiment_config(overrides: dict):
    """The FwdConfig of one experiment (bf16 unless it names a dtype): every switch off unless
    it turns it on, so a label means what it says whatever the shipped configuration
    (config.TUNED) is."""
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import SWITCHES, VALUE_SWITCHES

    return FwdConfig(**{"arch": "sm_90a", "dtype": "bf16", **{s: False for s in SWITCHES}, **VALUE_SWITCHES,
                        "stages": 0, "lpt_section_mib": 0, "ctas_per_sm": 1, "causal_order": "all", **overrides})


def ab_name(cfg, label: str) -> str:
    """`<variant>+<label>`, the variant part with the model axes' name tokens (spec's order)."""
    mask = "causal" if cfg.causal else "noncausal"
    dv = f"-dv{cfg.head_dim_v}" if cfg.head_dim_v != cfg.head_dim else ""
    model = "".join(f"-{t}" for t, on in (("softcap", cfg.softcap), ("local", cfg.local),
                                           ("sink", cfg.learnable_sink)) if on)
    layout = "-colmajor" if cfg.v_layout == "colmajor" else ""  # e4m3's V column-major
    form = "".join(f"-{t}" for t, on in (("varlen", cfg.varlen), ("paged", cfg.paged_kv),
                                          ("packgqa", cfg.pack_gqa), ("splitkv", cfg.split_kv)) if on)
    return f"fa3-fwd-sm_90a-{cfg.dtype}-hd{cfg.head_dim}{dv}-{mask}{layout}{model}{form}+{label}"


def build(home: Path, experiments: str) -> int:
    from cubinforge.generator.compile_worker import describe_build
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant
    from cubinforge.registry import ArtifactInput, Registry

    reg = Registry(home=home)
    unknown = [e for e in experiments.split(",") if e not in EXPERIMENTS]
    if unknown:
        raise SystemExit(f"unknown experiment set(s) {unknown}; sets: {', '.join(EXPERIMENTS)}")
    todo = [item for e in experiments.split(",") for item in EXPERIMENTS[e]]
    done = set()
    for label, overrides in todo:
        cfg = experiment_config(overrides)
        name = ab_name(cfg, label)
        if name in done:  # the same baseline in two sets
            continue
        done.add(name)
        built = describe_build(name, cfg.arch, compile_variant(cfg))  # the checks `make kernels` runs
        axes = {"arch": cfg.arch, "dtype": cfg.dtype, "head_dim": cfg.head_dim, "causal": cfg.causal,
                "tile_m": cfg.tile_m, "tile_n": cfg.tile_n, **({"v_layout": cfg.v_layout} if cfg.fp8 else {})}
        if cfg.model_variant:  # the runtime selects a model variant by these axes
            axes.update({a: getattr(cfg, a) for a in MODEL_AXES}, scheduler=cfg.scheduler)
        if cfg.inference:
            axes.update({a: getattr(cfg, a) for a in INFERENCE_AXES}, scheduler=cfg.scheduler)
        reg.put_artifact(ArtifactInput(
            name=name, family="fa3_fwd", axes=axes, cubin=built.cubin, contract=built.contract,
            metadata=built.metadata, source=json.dumps(overrides), template="bench/ab.py",
            dsl_version="", ptxas_version=built.ptxas_version, compile_options=built.compile_options,
            content_key=name, build_seconds=built.seconds,
        ))
        m = built.metadata
        print(f"built {name}: {m.get('registers')} regs, {m.get('dynamic_smem_bytes')} B smem, "
              f"spills {m.get('spill_store_bytes')}/{m.get('spill_load_bytes')} B, sass {m.get('sass')}")
    return 0


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): a ragged GQA shape; one with more tiles
# (528) than SMs, so a persistent CTA walks several tiles (and causal rows that see no key);
# one with 64 (head, batch) pairs of 16k keys, so causal orders with L2 sections (3-4 pairs
# each) run several sections and a short last one; one with 128 pairs whose K and V (hd128: 98
# MB) take causal_order "sections"' multi-section walk (sections of 33, 33 and 62 pairs).
CHECK_SHAPES = ((2, 777, 1000, 8, 2), (2, 4097, 3000, 8, 2), (1, 1000, 16000, 64, 8), (4, 1000, 1500, 32, 8))


# Scores that rise as the kernel walks the key blocks (last to first): every 64 keys lift a
# row's max by ~16 log2 units until 50 (then flat), at a slope per row in [0.5, 1.5]: the
# conditional rescale's both branches (stale max kept, max moved) run, in warps that vote
# differently. Set on channel 0 of q and k; the rest stays Gaussian noise.
RISING_SHAPES = ((2, 777, 1000, 8, 2),)
RISING_LOG2_PER_KEY, RISING_CAP_LOG2 = 0.25, 50.0
# e4m3's largest finite value is 448; 400 leaves room for rounding up (hd128's peak k0 is 392, so
# its inputs are as before; hd256's 554 moves its excess to q0).
E4M3_RISING_K_MAX = 400.0


def rising(q, k, hd: int, generator, k_max: float | None = None):
    """q, k (float, (b, s, h, d)) with channel 0 set so that row i's score on key j rises as
    j falls: q0_i k0_j * hd^-0.5 = u_i * min((sk - 1 - j) * 0.25, 50) log2 units. `k_max`: the
    largest k0 the inputs' dtype holds (e4m3: hd256's peak k0, 554, is past its 448 and would
    turn to NaN); the excess moves to q0, so the scores stay the same."""
    import math

    import torch

    sk = k.shape[1]
    r = torch.clamp((sk - 1 - torch.arange(sk, device=k.device)) * RISING_LOG2_PER_KEY, max=RISING_CAP_LOG2)
    per_log2 = math.sqrt(hd) / math.log2(math.e)  # k0 for one log2 unit of score at q0 = 1
    k0 = r * per_log2
    shift = max(1.0, RISING_CAP_LOG2 * per_log2 / k_max) if k_max else 1.0
    q = q.clone()
    k = k.clone()
    u = torch.rand(q.shape[0], q.shape[1], q.shape[2], device=q.device, generator=generator) + 0.5
    q[..., 0] = (u * shift).to(q.dtype)
    k[..., 0] = (k0 / shift)[None, :, None].to(k.dtype)
    return q, k


def torch_dtype(dtype: str):
    """torch's dtype of a 16-bit variant's inputs ("bf16" / "fp16")."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def check_variant(ours, name: str, hd: int, causal: bool, device: str = "cuda", shapes=CHECK_SHAPES,
                  rising_scores: bool = False, dtype: str = "bf16"):
    """(max rel err of O, max LSE err, passed) of one variant against the fp32 reference,
    outputs poisoned with NaN before each launch (`rising_scores`: the inputs of rising())."""
    import torch

    tdtype = torch_dtype(dtype)

    from .reference import attention_torch

    rel, lse_err, ok = 0.0, 0.0, True
    for b_, sq, sk, hq, hkv in shapes:
        g = torch.Generator(device=device).manual_seed(sq)
        q = torch.randn(b_, sq, hq, hd, device=device, dtype=tdtype, generator=g)
        k, v = (torch.randn(b_, sk, hkv, hd, device=device, dtype=tdtype, generator=g) for _ in range(2))
        if rising_scores:
            q, k = rising(q, k, hd, g)
        o = torch.full_like(q, float("nan"))
        lse = torch.full((b_, hq, sq), float("nan"), device=device)
        ours.launch(q, k, v, causal, o, lse, variant=name)
        ref_o, ref_lse = attention_torch(q, k, v, causal)
        err = float((o.float() - ref_o).norm() / ref_o.norm())
        ref_lse = ref_lse.reshape(lse.shape)
        seen = torch.isfinite(ref_lse)  # causal rows with no visible key: LSE = -inf
        l_err = float((lse[seen] - ref_lse[seen]).abs().max()) if bool(seen.any()) else 0.0
        unseen_ok = bool((lse[~seen] == float("-inf")).all())
        rel, lse_err = max(rel, err), max(lse_err, l_err)
        ok = (ok and err <= 2.5e-3 and l_err <= 1e-3 and unseen_ok
              and not bool(o.isnan().any()) and not bool(lse.isnan().any()))
    return rel, lse_err, ok


def fp8_inputs(b_, sq, sk, hq, hkv, hd, v_layout, seed, device="cuda", rising_scores=False):
    """e4m3 q, k, v (v as the layout wants it: colmajor (b, hkv, d, sk) with seqlen_k storage
    padded to 16 B) and v row-major for the reference (`rising_scores`: rising()'s q and k)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(b_, s, h, hd, device=device, generator=g)
               for s, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    if rising_scores:
        q, k = rising(q, k, hd, g, k_max=E4M3_RISING_K_MAX)
    q, k, v = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
    v_in = v
    if v_layout == "colmajor":
        pad = -(-sk // 16) * 16
        store = torch.zeros(b_, hkv, hd, pad, device=device, dtype=torch.uint8)
        store[..., :sk] = v.view(torch.uint8).permute(0, 2, 3, 1)
        v_in = store.view(torch.float8_e4m3fn)[..., :sk]
    return q, k, v_in, v


def fp8_call(ours, name: str, causal: bool, v_layout: str, q, k, v_in, out, lse):
    """A closure launching one e4m3 experiment (pinned), arrays wrapped once."""
    from .anchors import _stream_handle

    rt = ours.rt
    stream = _stream_handle()  # torch's current stream, as Ours.prepare launches on
    import torch

    # e4m3 travels as its bytes (uint8 views, dtype= names them), as bench/fp8.py does.
    args = [rt.as_device_array(x.view(torch.uint8), dtype="e4m3", stream=stream) for x in (q, k, v_in)]
    args += [rt.as_device_array(x, stream=stream) for x in (out, lse)]
    pin = ours._source(name)
    return lambda: ours.fn(*args[:3], causal=causal, out=args[3], lse=args[4], v_layout=v_layout,
                           stream=stream, **pin)


def check_fp8_variant(ours, name: str, hd: int, causal: bool, v_layout: str, shapes=CHECK_SHAPES,
                      rising_scores: bool = False, lse_tol: float = 2e-2):
    """check_variant for e4m3: against the fp32 reference on the same e4m3 values; P rounded to
    e4m3 costs ~2e-2 relative (tests/gpu/test_fp8_gpu.py), so 4e-2 / LSE `lse_tol` (2e-2; the
    rising-score case passes inf and bounds the LSE error against its group base's)."""
    import torch

    from .reference import attention_torch

    rel, lse_err, ok = 0.0, 0.0, True
    for b_, sq, sk, hq, hkv in shapes:
        q, k, v_in, v = fp8_inputs(b_, sq, sk, hq, hkv, hd, v_layout, seed=sq, rising_scores=rising_scores)
        o = torch.full((b_, sq, hq, hd), float("nan"), device="cuda", dtype=torch.bfloat16)
        lse = torch.full((b_, hq, sq), float("nan"), device="cuda")
        fp8_call(ours, name, causal, v_layout, q, k, v_in, o, lse)()
        if ours.last_variant() != name:
            raise RuntimeError(f"{name}: the runtime ran {ours.last_variant()}")
        ref_o, ref_lse = attention_torch(q, k, v, causal)
        err = float((o.float() - ref_o).norm() / ref_o.norm())
        ref_lse = ref_lse.reshape(lse.shape)
        seen = torch.isfinite(ref_lse)
        l_err = float((lse[seen] - ref_lse[seen]).abs().max()) if bool(seen.any()) else 0.0
        unseen_ok = bool((lse[~seen] == float("-inf")).all())
        rel, lse_err = max(rel, err), max(lse_err, l_err)
        ok = (ok and err <= 4e-2 and l_err <= lse_tol and unseen_ok
              and not bool(o.isnan().any()) and not bool(lse.isnan().any()))
    return rel, lse_err, ok


def run(home: Path, out: Path, seqlens, shapes=(), rounds: int = 5) -> int:
    """Gate and time every variant of `home` at the FA3 grid's `seqlens` and at `shapes`
    ((batch, seqlen, heads) each, square and non-GQA: cells off the grid), beside the anchors.
    The variants of one form (dtype, head dim, mask, V layout: a control and its candidates) are
    timed on each cell together with the anchors, their calls interleaved on the same inputs,
    so a drift over the run (clocks, power) hits them alike: check23 timed each variant apart,
    and FA4 on one cell then ranged 542-578 TFLOPS between them."""
    import torch

    from .anchors import Fa4, Ours, Sdpa, Unavailable

    os.environ["CUBINFORGE_HOME"] = str(home)
    ours = Ours()
    anchors = {"cudnn": Sdpa("cudnn")}
    try:  # FA4 when importable (PYTHONPATH with its wheels, as bench/h200_session.sh sets)
        anchors["fa4"] = Fa4()
    except Unavailable as e:
        print(f"fa4 not timed: {e}", flush=True)
    names = sorted(p.stem for p in (home / "manifests").glob("*.json"))
    forms: dict[tuple, list[tuple[str, tuple]]] = {}  # form -> [(name, (rel, lse err, ok))]
    failed = 0
    for name in names:
        manifest = json.loads((home / "manifests" / f"{name}.json").read_text())
        if any(manifest["axes"].get(a) not in (None, False, manifest["axes"]["head_dim"]) for a in MODEL_AXES):
            print(f"{name}: a model variant, timed by bench/model_variants.py --ab-home {home}", flush=True)
            continue
        if any(manifest["axes"].get(a) for a in INFERENCE_AXES):
            print(f"{name}: an inference form, timed by bench/inference.py --ab-home {home}", flush=True)
            continue
        ax = manifest["axes"]
        form = (ax["dtype"], ax["head_dim"], ax["causal"], ax.get("v_layout", "rowmajor"))
        gate = gate_variant(ours, name, *form)
        failed += not gate[2]
        forms.setdefault(form, []).append((name, gate))
    rows = [row for form, variants in forms.items() for spec in [*seqlens, *shapes]
            for row in time_form(ours, anchors, form, variants, spec, rounds)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "anchors": list(anchors),
                                             "rounds": rounds, "rows": rows}, indent=1))
    (out / "ab.md").write_text(ab_table(rows, list(anchors)))
    return 1 if failed else 0


def gate_variant(ours, name: str, dtype: str, hd: int, causal: bool, v_layout: str) -> tuple[float, float, bool]:
    """One variant's correctness gate: CHECK_SHAPES against the reference, and the rising-score
    case where the conditional rescale is on. (rel err, LSE err, ok)."""
    fp8 = dtype == "e4m3"
    if fp8:
        rel, lse_err, ok = check_fp8_variant(ours, name, hd, causal, v_layout)
    else:
        rel, lse_err, ok = check_variant(ours, name, hd, causal, dtype=dtype)
    if "lazy-rescale" in name:  # the conditional rescale's own case (rising()), in the same gate
        rise = (check_fp8_variant(ours, name, hd, causal, v_layout, RISING_SHAPES, rising_scores=True) if fp8
                else check_variant(ours, name, hd, causal, shapes=RISING_SHAPES, rising_scores=True, dtype=dtype))
        print(f"{name}: rising scores rel {rise[0]:.2e} lse {rise[1]:.1e} {'ok' if rise[2] else 'FAIL'}", flush=True)
        rel, lse_err, ok = max(rel, rise[0]), max(lse_err, rise[1]), ok and rise[2]
    return rel, lse_err, ok


def time_form(ours, anchors: dict, form: tuple, variants: list, spec, rounds: int) -> list[dict]:
    """The rows of one form's variants on one cell (`spec`: a seqlen of the FA3 grid, or
    (batch, seqlen, heads)), every variant and anchor timed on the same inputs with their calls
    interleaved (timing.time_interleaved), in `rounds` rounds; each row keeps its per-round
    milliseconds."""
    import torch

    from .flops import tflops
    from .grid import Cell, fa3_cell
    from .timing import median, rounds_of, time_interleaved

    dtype, hd, causal, v_layout = form
    fp8 = dtype == "e4m3"
    # e4m3 rows: the anchors run bf16 on the same cell, for scale; fp16 rows run everything in fp16.
    if isinstance(spec, tuple):
        b_, s, h_ = spec
        cell = Cell("bf16" if fp8 else dtype, hd, causal, b_, h_, h_, s, s)
        where = f"b{b_}xh{h_}xs{s}"
    else:
        s = spec
        cell = fa3_cell("bf16" if fp8 else dtype, hd, s, causal)
        where = f"s{s}"
    q = torch.randn(cell.batch, s, cell.heads, hd, device="cuda", dtype=torch_dtype(cell.dtype))
    k, v = torch.randn_like(q), torch.randn_like(q)
    if fp8:
        q8, k8, v8_in, _v8 = fp8_inputs(cell.batch, s, s, cell.heads, cell.heads, hd, v_layout, seed=s)
        fns = {}
        for name, _ in variants:
            o8 = torch.empty_like(q)
            l8 = torch.empty(cell.batch, cell.heads, s, device="cuda")
            fns[name] = fp8_call(ours, name, causal, v_layout, q8, k8, v8_in, o8, l8)
    else:
        fns = {name: ours.prepare(cell, q, k, v, variant=name)[0] for name, _ in variants}
    contexts = {name: ours.context for name in fns}
    for b, a in anchors.items():
        fns[b] = a.prepare(cell, q, k, v)[0]
        contexts[b] = a.context
    # Each round the calls interleaved, the order rotating which leads.
    samples, errors = rounds_of(lambda group: time_interleaved(group, contexts, budget_s=0.3), fns, rounds)
    if errors:  # every row is compared with every other: none can be missing
        raise RuntimeError(f"failed while timed at {where}: " + "; ".join(f"{n}: {e}" for n, e in errors.items()))
    ms = {b: [t.median_ms for t in ts] for b, ts in samples.items()}
    t = {b: tflops(cell.flops, median(v)) for b, v in ms.items()}
    an = {b: t[b] for b in anchors}
    best = max(an.values(), default=float("nan"))
    rows = []
    for name, (rel, lse_err, ok) in variants:
        rows.append({"variant": name, "seqlen": s, "rel_err": rel, "lse_err": lse_err, "ok": ok,
                     "ours": t[name], **an, "ratio_cudnn": t[name] / t["cudnn"], "ratio_best": t[name] / best,
                     "ms_rounds": ms[name], **{f"{b}_ms_rounds": ms[b] for b in anchors},
                     **({"shape": where} if isinstance(spec, tuple) else {})})
        print(f"{name:60s} {where:<7s} ours {t[name]:6.1f} " + " ".join(f"{b} {an[b]:6.1f}" for b in anchors)
              + f"  x{t[name] / best:.2f} of best  rel {rel:.2e} lse {lse_err:.1e} {'ok' if ok else 'FAIL'}",
              flush=True)
    del q, k, v
    return rows


def ab_table(rows: list[dict], anchors: list[str]) -> str:
    head = ["variant", "seqlen", "ours TFLOPS", *[f"{a} TFLOPS" for a in anchors], "ours/best", "rel err",
            "LSE err", "correct"]
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: |" + " ---: |" * (len(head) - 3) + " --- |"]
    for r in rows:
        cells = [r["variant"], r.get("shape", str(r["seqlen"])), f"{r['ours']:.1f}", *[f"{r[a]:.1f}" for a in anchors],
                 f"{r['ratio_best']:.2f}", f"{r['rel_err']:.2e}", f"{r['lse_err']:.1e}", "yes" if r["ok"] else "NO"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def compare_rows(rows: list[dict], control: str | None = None, candidate: str | None = None) -> list[dict]:
    """Each candidate against its control, from one `run`'s rows (ab.json), per form and cell.
    A form's control is its variant whose label has the token `control`, or else the one whose
    label lacks `candidate` (label tokens: the "+"-separated parts after the variant's name).
    ratio: candidate TFLOPS over control TFLOPS; round_min / round_max: the same ratio round by
    round (rows with `ms_rounds`, timed in the same rounds), how far one round can mislead."""
    if (control is None) == (candidate is None):
        raise ValueError("pass --control TOKEN (the label token of each form's control) or --candidate TOKEN "
                         "(the token the candidates have and the control lacks), one of the two")

    def tokens(variant):
        return variant.partition("+")[2].split("+")

    def is_control(variant):
        return control in tokens(variant) if control is not None else candidate not in tokens(variant)

    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["variant"].partition("+")[0], r.get("shape", r["seqlen"])), []).append(r)
    out = []
    for (form, cell), group in cells.items():
        controls = [r for r in group if is_control(r["variant"])]
        if len(controls) != 1:
            raise ValueError(f"{form} at {cell}: {len(controls)} controls among "
                             f"{[r['variant'].partition('+')[2] for r in group]}")
        ctl = controls[0]
        for r in group:
            if r is ctl:
                continue
            per_round = [c / m for c, m in zip(ctl.get("ms_rounds", []), r.get("ms_rounds", []))]
            out.append({"form": form, "cell": cell, "control": ctl["variant"].partition("+")[2],
                        "candidate": r["variant"].partition("+")[2], "ratio": r["ours"] / ctl["ours"],
                        "round_min": min(per_round, default=None), "round_max": max(per_round, default=None),
                        "ok": r["ok"]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.ab", description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("build", "run", "compare"))
    ap.add_argument("--home", type=Path, default=Path(".cubinforge-ab"))
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--shapes", default="", help="cells off the grid, BATCH:SEQLEN:HEADS,... (square, non-GQA)")
    ap.add_argument("--rounds", type=int, default=5, help="run: timing rounds per cell (calls interleaved in each)")
    ap.add_argument("--experiments", default="leave-one-out",
                    help=f"comma-separated sets: {', '.join(EXPERIMENTS)}")
    ap.add_argument("--json", type=Path, help="compare: a run's ab.json")
    ap.add_argument("--control", help="compare: the label token that marks each form's control")
    ap.add_argument("--candidate", help="compare: the label token the candidates have and the control lacks")
    a = ap.parse_args(argv)
    if a.step == "build":
        return build(a.home, a.experiments)
    if a.step == "compare":
        if a.json is None:
            raise SystemExit("compare reads a run's ab.json: pass --json PATH")
        try:
            found = compare_rows(json.loads(a.json.read_text())["rows"], a.control, a.candidate)
        except ValueError as e:
            raise SystemExit(f"compare: {e}") from None
        for c in found:
            spread = (f"  rounds {c['round_min']:.3f}-{c['round_max']:.3f}" if c["round_min"] is not None else "")
            print(f"{c['form']:44s} {str(c['cell']):>14s}  {c['candidate']} / {c['control']}: {c['ratio']:.3f}"
                  f"{spread}{'' if c['ok'] else '  (candidate FAILED its gate)'}")
        return 0
    shapes = [tuple(int(x) for x in sh.split(":")) for sh in a.shapes.split(",") if sh]
    if any(len(sh) != 3 for sh in shapes):
        raise SystemExit(f"--shapes takes BATCH:SEQLEN:HEADS entries, got {a.shapes!r}")
    if a.rounds < 1:
        raise SystemExit(f"--rounds takes a count of at least 1, got {a.rounds}")
    return run(a.home, a.out, [int(x) for x in a.seqlens.split(",") if x], shapes, a.rounds)


if __name__ == "__main__":
    raise SystemExit(main())
