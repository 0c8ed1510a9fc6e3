"""Compile-time configuration of one SM90 FlashAttention-3 forward variant.

Everything here is fixed when the cubin is built; problem sizes (batch, sequence lengths,
head counts) stay symbolic so one cubin serves them all.
"""

from __future__ import annotations

from dataclasses import dataclass

# Tile shapes (tile_m, tile_n) per head dim. FA3's table was the starting point; on the
# H200, hd64 at 128x128 was 14% slower than 192x128 (three consumer warpgroups) at 8k
# (bench/results/2026-11-29-h200/ab.md); hd96 at 192x128 and hd128 at 128x176 ran at 0.72x
# and 0.80x cuDNN in early dev runs (figures not kept), so they stay at 128x128.
DEFAULT_TILES = {64: (192, 128), 96: (128, 128), 128: (128, 128), 192: (128, 96), 256: (128, 80)}
# (head_dim, head_dim_v) pairs with a value head dim of their own (DeepSeek MLA prefill is
# (192, 128)) and their tiles: V's smaller rows leave room for FA4's wider key blocks.
HEAD_DIM_V_TILES = {(192, 128): (128, 128), (128, 64): (128, 128), (96, 64): (128, 128)}

# The switches each shipped (head_dim, causal, scheduler) builds with: the winners of the
# H200 A/B of 2026-12-01 (../shared/measurements/2026-12-01-h200/ab-summary.txt, every
# candidate beside cuDNN and FA4 in one run, all through the correctness gate), as ours /
# best anchor at 512 / 1k / 2k / 8k keys:
# - hd64 non-causal: separate O + per-warpgroup epilogue, 0.93/0.97/1.00/0.97 (was 0.79-0.95);
# - hd96 non-causal: separate O, 1.06/1.09/0.97/0.87 (was 0.92/1.00/0.92/0.90);
# - hd128 non-causal: in-order row sum + separate O, 0.98/1.02/1.02/1.02 (was 0.85-0.98);
# - hd192/256 non-causal: chunked P conversion, 0.94-1.00 and 0.96/1.00/1.00 (was 0.91-0.98);
# - hd128 causal: lpt + bit-mask masking, 0.76/0.92/0.98/1.00 (was 0.80/0.92/0.94/0.96);
# - hd256 causal: lpt alone, 0.87/0.98/0.98/0.97 (was 0.88/0.93/0.90/0.90);
# - hd64 causal: persistent (longest first), 0.69/0.74/0.92/0.93 (was 0.65/0.71/0.90/0.93);
#   then (short-causal A/B, same day, ours / cuDNN: bench/results/2026-12-01-h200/short-causal/)
#   persistent + separate O + per-
#   warpgroup epilogue 0.79 / 0.83 / 1.01 / 1.19 (528 TFLOPS at 8k, was 501); its 128x128 short-
#   sequence variant with bit masks too 0.88 / 0.92 / 0.96 / 1.09 (was 0.75 / 0.81 / 0.87 / 0.98).
# Which scheduler each ships with is the set's business (spec.SETS "default"); the key's last
# item is the tile, None for the head dim's default tile.
TUNED: dict[tuple[int, bool, str, tuple[int, int] | None], dict[str, bool | int | float]] = {
    # Session 5's short-overlap A/B (bench/results/2026-12-01-h200/check5/): Q double-buffered
    # (the next tile's Q loads during this tile) and, where it also won, the O store deferred
    # under the next tile's first QK^T; TFLOPS at 512 / 1k / 8k against the entry before:
    # hd64 non-causal +q-double-buffer 416 / 461 / 571 (362 / 429 / 557); hd64 causal 192 x 128
    # +q-double-buffer 231 / 298 / 528 (209 / 283 / 526); hd64 causal 128 x 128 with 3 stages,
    # both overlaps 273 / 345 / 471 (234 / 314 / 471); hd128 non-causal both overlaps 553 / 646
    # / 736 (526 / 629 / 721). hd128 causal's short variant gained nothing (286 / 384 / 668).
    (64, False, "persistent", None): {"separate_o_smem": True, "wg_epilogue": True, "q_double_buffer": True},
    (96, False, "persistent", None): {"separate_o_smem": True},
    # Session 6 (bench/results/2026-12-01-h200/check6/d2/, beside cuDNN and FA4, ours / best at
    # 1k / 2k / 8k / 16k): hd96 non-causal at 128 x 176 with P converted in pairs 1.12 / 1.01 /
    # 0.95 / 0.88 (531 / 589 / 638 / 598 TFLOPS against 524 / 556 / 581 / 561 at 128 x 128);
    # hd96 causal persistent + separate O 1.02 / 1.08 / 0.96 / 0.91 / 0.88 at 512 / 1k / 2k /
    # 8k / 16k (one tile per CTA 0.83 / 0.95 / 0.92 / 0.88 / 0.85); hd192 causal lpt + bit
    # mask + P in pairs 0.87 / 0.96 / 1.04 / 0.99 at 512 / 1k / 2k / 8k (check6/c2's grid, all
    # off: 0.84 / 0.92 / 0.99 / 0.94).
    (96, False, "persistent", (128, 176)): {"separate_o_smem": True, "chunked_p_convert": True},
    # hd96 causal, second round (check6/f1, same run): + bit mask + in-order sum 283 / 378 / 457 /
    # 590 / 604 TFLOPS at 512 / 1k / 2k / 8k / 16k against 279 / 374 / 450 / 574 / 598.
    # Session 13 (bench/results/2026-12-03-h200/check13/c1, beside cuDNN): the sectioned causal
    # walk (causal_order, schedule.section_pairs) 307 / 406 / 499 TFLOPS at 512 / 1k / 2k against
    # 279 / 370 / 440 (+10 / +10 / +13%); on cells off the grid where one section holds every
    # pair the sectioned decode costs 2.4-4% (a branch to the all-pairs decode lost more, d1).
    (96, True, "persistent", None): {"separate_o_smem": True, "mask_bits": True, "in_order_row_sum": True,
                                     "causal_order": "sections"},
    # Session 14 (bench/results/2026-12-03-h200/check14/h1, long-lazy A/B beside cuDNN): FA4's
    # conditional rescale too, 589 / 692 / 753 / 786 TFLOPS at 2k / 4k / 8k / 16k against 584 /
    # 680 / 737 / 764 (+0.8 / +1.6 / +2.1 / +2.9%; FA4 764 / 800 at 8k / 16k in check14/f1). On
    # hd64 (both masks, bf16 and fp16) it moved -3 to +4% with no sign: not taken there.
    (192, True, "lpt", None): {"mask_bits": True, "chunked_p_convert": True, "rescale_threshold": 8.0},
    (128, False, "persistent", None): {"separate_o_smem": True, "in_order_row_sum": True, "q_double_buffer": True,
                                       "deferred_o_store": True},
    (192, False, "persistent", None): {"chunked_p_convert": True},
    (256, False, "persistent", None): {"chunked_p_convert": True},
    (128, True, "lpt", None): {"mask_bits": True},
    # Session 9 (check9/n5, long-ab A/B): the key-block loop's invariants pinned (541 -> 490
    # instructions a block), 755.0 / 787.2 TFLOPS at 8k / 16k against 748.8 / 774.3, gate ok.
    # The pin lost or tied on the other long forms (hd64, hd128 both masks) and was mixed on
    # hd256 non-causal (-0.6% at 8k), so it ships here only.
    (256, True, "lpt", None): {"pin_loop_invariants": True},
    # Session 14 (bench/results/2026-12-03-h200/check14/c1, beside cuDNN): 80-key blocks do not
    # divide a 128-row tile's diagonal (at 512 keys a pair's m blocks take 2+4+5+7 blocks, 1,440
    # key columns where the causal rows need 1,280); 64-key blocks do, and with FA4's conditional
    # rescale (O's rescale is 2x the exp2 count a block at 64 keys) 328 / 496 / 636 / 731 / 790 /
    # 820 TFLOPS at 512 / 1k / 2k / 4k / 8k / 16k against the 128 x 80 form above's 306 / 467 /
    # 605 / 703 / 760 / 790, and +5-7% on 8 x 777, 4 x 3000 and 3 x 1536 (x 8 / 8 / 16 heads).
    (256, True, "lpt", (128, 64)): {"pin_loop_invariants": True, "rescale_threshold": 8.0, "mask_bits": True},
    # hd192 causal up to 3,072 rows (runtime/dispatch.py), the same check14/c1: the sectioned
    # persistent walk at 128 x 64 with O in its own buffer and the conditional rescale 348 / 501 /
    # 611 TFLOPS at 512 / 1k / 2k against lpt 128 x 96's 293 / 439 / 595, and 314 / 625 / 532
    # against 255 / 562 / 500 on 8 x 777 / 4 x 3000 / 3 x 1536; lpt leads from 4k (695 against 671).
    (192, True, "persistent", (128, 64)): {"mask_bits": True, "chunked_p_convert": True, "separate_o_smem": True,
                                           "rescale_threshold": 8.0, "causal_order": "sections"},
    # hd128 causal up to 3,072 rows (runtime/dispatch.py): persistent + separate O, 0.84 / 0.87
    # at 512 / 1k where lpt gave 0.76 / 0.92. Session 9 (check9/n4, short-epi A/B beside cuDNN):
    # O stored per warp (warp_o_store) 290.4 / 384.2 / 478.0 TFLOPS at 512 / 1k / 2k against
    # 286.5 / 381.9 / 469.2 (+1.4 / +0.6 / +1.9%), gate ok. Session 13 (check13/c1): the
    # sectioned causal walk 342 / 486 / 577 TFLOPS at 512 / 1k / 2k against 290 / 386 / 471
    # (lpt 260 / 405 / 539; cuDNN 343 / 439 / 518; FA4 in b1 275 / 424 / 553); 4 x 3000 x 16
    # heads 558 against lpt's 515; from 4k lpt leads (633 against 603).
    (128, True, "persistent", None): {"separate_o_smem": True, "warp_o_store": True, "causal_order": "sections"},
    # Sessions 23-24 (bench.ab k-stages, H100, float64 tests check23/a2): three K/V stages, ours
    # / two stages with the calls interleaved (check24/d1, 5 rounds): bf16 1.020 / 1.004 / 1.003 at
    # 2k / 8k / 16k, fp16 1.014 / 1.002 / 1.001; four stages tied or lost to three (fp16 8k 0.998).
    # The non-causal form lost 1% with either (0.986-0.992 bf16) and keeps two.
    (64, True, "persistent", None): {"separate_o_smem": True, "wg_epilogue": True, "q_double_buffer": True,
                                     "stages": 3},
    # Session 10 (bench/results/2026-12-02-h200/check10/r2 bf16 beside FA4, s1 fp16): hd96 at
    # FA4's 192-row tiles with P through shared memory (p_smem; P in registers spills there),
    # TFLOPS at 1k / 2k / 8k / 16k. Non-causal 192 x 144 + in-order sum: bf16 446 / 599 / 685 /
    # 676 against the 128 x 176 form's 536 / 594 / 597 / 615 (FA4 444 / 592 / 678 / 630);
    # fp16 443 / 580 / 641 / 618 against 128 x 128's 532 / 572 / 598 / 573. Causal 192 x 128:
    # bf16 343 / 482 / 628 / 660 against 378 / 455 / 582 / 609 (FA4 316 / 470 / 631 / 647);
    # fp16 337 / 464 / 604 / 630 against 375 / 443 / 554 / 574. Every row through the gate;
    # the dispatcher (runtime/dispatch.py) takes them from 1,537 query rows, the 128-row forms
    # below that.
    (96, False, "persistent", (192, 144)): {"p_smem": True, "in_order_row_sum": True},
    (96, True, "persistent", (192, 128)): {"separate_o_smem": True, "mask_bits": True, "in_order_row_sum": True,
                                           "p_smem": True},
    # Session 13 (check13/c1): the sectioned causal walk 280 / 362 / 428 / 466 TFLOPS at 512 / 1k /
    # 2k / 4k against 273 / 346 / 394 / 436 (the 192-row form in b1: 229 / 299 / 405 / 456).
    (64, True, "persistent", (128, 128)): {"separate_o_smem": True, "wg_epilogue": True, "mask_bits": True,
                                           "q_double_buffer": True, "deferred_o_store": True, "stages": 3,
                                           "causal_order": "sections"},
}
# fp16 forms whose switches differ from TUNED's (measured on bf16), keyed like TUNED; an entry
# replaces TUNED's. Session 10 (check10/q2, r1, r2, s1: four runs): fp16 hd128 non-causal
# without the short-sequence overlaps (Q double buffer, deferred O), TFLOPS at 4k / 8k / 16k
# 697-708 / 695-719 / 663-697 against 688-693 / 641-705 / 630-650, and 531 / 620 / 666 against
# 537 / 619 / 665 at 512 / 1k / 2k (s1). bf16 keeps them: without them it lost at every length
# in s1 (533-716 against 561-730).
TUNED_FP16: dict[tuple[int, bool, str, tuple[int, int] | None], dict[str, bool | int | float]] = {
    (128, False, "persistent", None): {"separate_o_smem": True, "in_order_row_sum": True},
}
# Model variants whose main loop is a shipped variant's, keyed (axis token, head_dim, causal,
# scheduler, tile) with the token `local`, `sink` or `dv<N>` (one model axis on, no other).
# Not measured as such yet: each takes the switches its base loop won, found in the SASS
# (bench/results/2026-12-01-cpu/variant-speed.md): a window's unmasked loop is the
# non-causal persistent loop (486 vs 466 instructions, the same mix) and its two masked
# blocks a tile take the bit mask (769 -> 613 instructions), a sink changes only the finish, and (192, 128) at 128 x 128 has hd128's S fragment, so hd128 causal's bit mask
# applies (masked loop 655 -> 601 instructions). bench.ab's `model-variants` set times each
# against the all-off build it replaces.
TUNED_VARIANTS: dict[tuple[str, int, bool, str, tuple[int, int] | None], dict[str, bool | int]] = {
    # The window, H200 2026-12-01 (bench/results/2026-12-01-h200/check7/i5, (4096, 0) x 16k):
    # with the persistent walk in the causal order, 713.8 TFLOPS (FA4 690.1, one tile per CTA
    # 685.6); Q double-buffered 710.6, and the O store deferred too 712.0: not taken.
    ("local", 128, False, "persistent", None): {"separate_o_smem": True, "in_order_row_sum": True,
                                                "mask_bits": True},
    ("sink", 128, True, "lpt", None): {"mask_bits": True},
    # (192, 128) causal b2 x 8k: lpt sections of 40 MiB (8 (head, batch) pairs, FA4's count
    # here; 32 MiB takes 6) 757.9 TFLOPS against 741.5 and FA4's 766.6, 48 MiB (9 pairs) 755.4;
    # FA4's conditional rescale lost (708.6) (bench/results/2026-12-01-h200/check8/l2).
    # Then the loop invariants pinned (pin_loop_invariants: NVVM no longer rebuilds K's and V's
    # descriptor bases and the release lane test every block; unmasked loop 516 -> 475
    # instructions): 756.9 against 752.5, FA4 761.9 (0.993x); the Q descriptors pinned too
    # 743.2 (bench/results/2026-12-01-h200/check8/l9, against an A/A control at 1.000).
    ("dv128", 192, True, "lpt", None): {"mask_bits": True, "in_order_row_sum": True, "lpt_section_mib": 40,
                                        "pin_loop_invariants": True},
    # H200 A/B 2026-12-01 (bench/results/2026-12-01-h200/check/model-variants-ab.log): a
    # window one tile per CTA with the in-order row sum and the bit mask, 672 TFLOPS against
    # 624 persistent (+separate O) and FA4's 677; (192, 128) lpt + bit mask + in-order sum
    # 741 against 727 without the sum.
    ("local", 128, False, "single", None): {"in_order_row_sum": True, "mask_bits": True},
}
# e4m3, keyed (head_dim, causal, scheduler, tile, v_layout); separate O is always on. H200 A/B
# 2026-12-01 (bench/results/2026-12-01-h200/check/fp8-ab.log), hd128 non-causal 16k:
# column-major V at 128 x 192 with the in-order row sum 890 TFLOPS against 851 at 128 x 128.
TUNED_FP8: dict[tuple[int, bool, str, tuple[int, int] | None, str], dict[str, bool | int | float]] = {
    # Session 5 (check5/ mufu A/B): FA4's conditional rescale at threshold 8, 942 TFLOPS at 16k
    # against 908 in the same run (1k: 643 against 649); exp2 on the FMA pipe lost everywhere.
    # Session 8 (bench/results/2026-12-01-h200/check8/l7/, fp8-hd128-2 A/B): FA3's one-shuffle P
    # exchange on this form, 957.1 TFLOPS at 16k against 907.9 (1.054x; e4m3 ceiling 1,464.8 in
    # the same run), gate ok, error rows identical to the base ((a0) 1.959e-3, (a) 8.499e-2, (b)
    # 2.965e-2). Timed on this key only: the other e4m3 forms keep the two-shuffle exchange.
    (128, False, "persistent", (128, 192), "colmajor"): {"in_order_row_sum": True, "rescale_threshold": 8.0,
                                                          "fp8_p_pair_shuffle": True},
    # Session 9 (check9/n3, fp8-causal A/B, 7 alternating rounds; e4m3 ceiling 1,419 TFLOPS there):
    # hd128 causal 16k, column-major V: the non-causal winner's switches with the bit mask and
    # the loop invariants pinned, on the persistent causal walk, 977.4 TFLOPS against the lpt
    # form's 835.2 (1.170x) and 1.024x the non-causal winner timed beside it (954.9); on lpt
    # 960.3. Pinning gained 0.9% (persistent) and 3.1% (lpt). Row-major (SET=fp8): the in-order
    # sum, lazy rescale and bit mask on its lpt 128 x 192, 877.8 against 861.4 (1.019x). The
    # rising-score case's LSE error is 2.6e-2 for these and for the forms they replace alike:
    # e4m3 scores that large carry the tensor cores' accumulation error.
    (128, True, "persistent", (128, 192), "colmajor"): {"in_order_row_sum": True, "rescale_threshold": 8.0,
                                                         "fp8_p_pair_shuffle": True, "mask_bits": True,
                                                         "pin_loop_invariants": True},
    (128, True, "lpt", (128, 192), "rowmajor"): {"in_order_row_sum": True, "rescale_threshold": 8.0,
                                                  "mask_bits": True},
    # hd64, column-major V (check9/n2, fp8-hd64 A/B): non-causal at 128 x 192 with the in-order
    # sum, lazy rescale and pair shuffle 592.6 TFLOPS against the 192 x 128 form's 568.7
    # (1.042x); causal on its 192 x 128 with those and the bit mask 601.2 against 565.7 (1.063x).
    (64, False, "persistent", (128, 192), "colmajor"): {"in_order_row_sum": True, "rescale_threshold": 8.0,
                                                         "fp8_p_pair_shuffle": True},
    (64, True, "persistent", None, "colmajor"): {"in_order_row_sum": True, "rescale_threshold": 8.0,
                                                  "fp8_p_pair_shuffle": True, "mask_bits": True},
}
# The varlen forms (packed, bf16/fp16), keyed like TUNED: the persistent walk with O through
# shared memory, H200 session 5 (check5/, the 16-sequence 17,850-token case beside FA4):
# non-causal 629 TFLOPS (0.97x FA4; one tile per CTA 512), causal with the bit mask and the
# in-order sum too 525 (0.98x; 465).
TUNED_VARLEN: dict[tuple[int, bool, str, tuple[int, int] | None], dict] = {
    (128, False, "persistent", None): {"o_smem_store": True},
    (128, True, "persistent", None): {"o_smem_store": True, "mask_bits": True, "in_order_row_sum": True},
}
# bf16 over TUNED_VARLEN (keyed (dtype, *key)): O staged in its own buffer and stored by one TMA
# per tile through the ragged map (o_tma_ragged), H200 session 8 (check8/l6, bench.ab
# varlen-tma-o, the 16-sequence 17,850-token case; 2 K/V stages, as there): non-causal 639 TFLOPS, 1.010x the Q-buffer
# form (0.992x FA4), causal 540, 1.025x (1.023x FA4); 30/30 GPU tests (check8/l5). Measured on
# bf16 only: fp16 keeps TUNED_VARLEN's form. A config that names o_smem_store=True gets
# TUNED_VARLEN's form (the A/B rows written against it keep their meaning).
TUNED_VARLEN_DTYPE: dict[tuple[str, int, bool, str, tuple[int, int] | None], dict] = {
    ("bf16", 128, False, "persistent", None): {"o_smem_store": False, "separate_o_smem": True, "o_tma_ragged": True,
                                               "stages": 2},
    ("bf16", 128, True, "persistent", None): {"o_smem_store": False, "separate_o_smem": True, "o_tma_ragged": True,
                                              "mask_bits": True, "in_order_row_sum": True, "stages": 2},
    # (192, 128) and hd256 (spec.VARLEN_WIDE), session 15 (check15/e1, bench.ab varlen-wide-2, the
    # 16-sequence case beside the walk storing O from registers, alternating rounds): O staged in
    # Q's buffer ((192, 128): a (128, 128) view of it; no O buffer of its own fits) and stored by
    # one ragged TMA store, TFLOPS 548 / 688 against 540 / 681 ((192, 128) causal / non-causal),
    # 538 / 692 against 508 / 680 (hd256); O by 16-byte rows 1.018 / 0.988 and 1.053 / 1.023;
    # the conditional rescale 0.993 / 1.002 on causal. c1's candidates (bit mask, in-order sum, P
    # in pairs, one tile per CTA) gave nothing.
    **{("bf16", *pre, causal, "persistent", None): {"o_smem_store": True, "o_tma_ragged": True}
       for pre in (("dv128", 192), (256,)) for causal in (False, True)},
    # Round 3 (check15/i1): fp16 hd256 with the same store 498 / 648 against 478 / 628 causal /
    # non-causal (1.041 / 1.032; its O bit-identical to the register store's on the 17,850-token
    # case; fp16 (192, 128) 1.012 / 0.987: kept). Not shipped: bf16 hd256 causal at 128 x 64 with
    # the store and FA4's conditional rescale, 536 against 517 (1.037; 0.994 without the
    # rescale), whose float64 GPU tests could not run this session (no device time left).
    **{("fp16", 256, causal, "persistent", None): {"o_smem_store": True, "o_tma_ragged": True}
       for causal in (False, True)},
    # Round 4 (session 16, check16/l1, bench.ab varlen-wide-4 beside the shipped form and FA4):
    # bf16 hd256 causal at the dense short form's 128 x 64 with the store, the conditional
    # rescale, the pinned loop invariants and the bit mask, 567 TFLOPS against 544 (1.041x;
    # 0.922x FA4, the shipped 128 x 80 0.885x); without the bit mask 1.026-1.028; the pin alone
    # on 128 x 80 0.999, and on the other wide forms 0.990-1.004 (not taken). Float64 GPU tests:
    # check16/k1 (every candidate of the set, pinned). spec.VARLEN_WIDE builds this tile.
    ("bf16", 256, True, "persistent", (128, 64)): {"o_smem_store": True, "o_tma_ragged": True, "rescale_threshold": 8.0,
                                                   "pin_loop_invariants": True, "mask_bits": True},
}
# The other varlen forms on the persistent walk, keyed (dtype, varlen_form, *key): paged chunked
# prefill and the model variants (one tile per CTA until 2026-12-04). H200 2026-12-04
# (bench/results/2026-12-04-h200/check17/s1, bench.ab varlen-dynamic-2 / varlen-model beside the
# shipped one-tile form and FA4 in alternating rounds; float64 tests r1): bf16 hd128 paged
# (8 x 2048 new tokens against 8192 cached, page 256) with the counter and O by one ragged TMA store
# from its own buffer, 670 TFLOPS non-causal (1.080x the one-tile form, 1.148x FA4), causal with
# the bit mask and the in-order sum too 681 (1.091x, 1.109x; the static walk 1.029x / 0.995x).
# The window (1,024 to the left, the 16-sequence case) with the same switches 476 against 365
# (1.305x, 1.109x FA4; the counter alone 1.126x). Softcap 30 causal with them 460 TFLOPS, 2.05x FA4
# (no one-tile softcap varlen form in the default set to time beside it). gpt-oss's hd64 sink forms
# take the counter with every switch off (varlen_dynamic below): causal 1.052x FA4, windowed at
# 128 x 128 0.970x (their one-tile forms were not timed beside them).
_VARLEN_O_TMA = {"separate_o_smem": True, "o_tma_ragged": True, "stages": 2}
_VARLEN_MASKED = {**_VARLEN_O_TMA, "mask_bits": True, "in_order_row_sum": True}
# Session 20 (bench/results/2026-12-07-h200/check20/b1: an H100, the H200 did not come; bench.ab
# varlen-walk-rest beside SET=inference's one-tile forms and FA4 in alternating rounds, float64
# tests a1) put the rest of SET=inference's varlen forms on the walk, each with the counter:
# fp16 hd128 paged causal with the O store, bit mask and in-order sum 659 TFLOPS (1.080x the
# one-tile form; the counter alone 660, 1.047x), non-causal with the counter alone 676 (1.046x;
# with the O store 642); the fp16 window with every switch 459 (1.397x, the counter alone 403);
# the paged window, bf16 / fp16, 545 / 530 (1.196 / 1.190x) and bf16 paged softcap causal 543
# (1.080x, 1.786x FA4) with them too. hd64 paged (1.026-1.064x), its windows at 128 x 128
# (1.037-1.192x) and the non-causal sink (1.119x) take the counter with every switch off.
TUNED_VARLEN_FORMS: dict[tuple[str, str, int, bool, str, tuple[int, int] | None], dict] = {
    ("bf16", "paged", 128, False, "persistent", None): _VARLEN_O_TMA,
    **{(dt, "paged", 128, True, "persistent", None): _VARLEN_MASKED for dt in ("bf16", "fp16")},
    **{(dt, form, 128, False, "persistent", None): _VARLEN_MASKED
       for dt in ("bf16", "fp16") for form in ("local", "paged+local")},
    **{("bf16", form, 128, True, "persistent", None): _VARLEN_MASKED for form in ("softcap", "paged+softcap")},
}
# The decode forms (split_kv / pack_gqa / paged_kv, not varlen, e4m3 or a model variant),
# keyed (head_dim, tile, paged_kv): FwdConfig fields a tile is built with. H200 session 7
# (bench/results/2026-12-01-h200/check7/j2/decode-ab.log, bf16 hd128 beside cuDNN / FA2 /
# FA4): 64 x 64 with 2 stages and two CTAs an SM (80 KiB each, registers halved) gave 4.46-4.52
# TB/s unsplit at 8k keys against the 64 x 128 3-stage form's 4.34-4.41 (+1.5-4%; 4.36 against
# 4.18 at 64 query rows), and split in two at 32k keys 4.32-4.47 against 4.26-4.45. The
# dispatcher takes it for decode-shaped calls (runtime/dispatch.py `decode-two-ctas`).
TUNED_DECODE: dict[tuple[int, tuple[int, int], bool], dict] = {
    (128, (64, 64), False): {"stages": 2, "ctas_per_sm": 2},
    # Paged (the producer computes page addresses with the 40 registers the split leaves it):
    # H200 2026-12-03 (c4, bench.decode_tiles --page 256 / 16, bf16 causal 32/8 heads) against
    # 64 x 128: b64 x 4k 1.020 / 1.034, b128 x 1k 1.037 / 1.105, speculative b32 x q4 x 8k
    # 1.009 / 1.033, 64- and 2048-token chunks 1.21-1.38; split two ways at b8 x 32k 0.987 /
    # 0.913, so the sets build it unsplit only (spec.DECODE_DEFAULT).
    (128, (64, 64), True): {"stages": 2, "ctas_per_sm": 2},
}
SWITCHES = ("separate_o_smem", "wg_epilogue", "mask_bits", "chunked_p_convert", "in_order_row_sum",
            "q_double_buffer", "deferred_o_store", "o_smem_store", "fp8_p_pair_shuffle", "pin_loop_invariants",
            "pin_q_desc", "fast_divmod", "warp_o_store", "o_tma_ragged", "p_smem", "varlen_dynamic",
            "late_k_release", "try_wait_first")
# The softmax's switches that take a value, with the value that turns each off (the tables
# above may name them like the others once measured).
VALUE_SWITCHES = {"exp2_emu_eighths": 0, "exp2_emu_degree": 3, "rescale_threshold": 0.0, "p_scale_log2": 0.0}
# L2 section of the lpt order (FA4's); persistent causal orders all (head, batch) pairs
# together. 24 MiB sections for persistent causal and one global order for lpt lost on
# every cell of the A/B, so neither is a knob any more.
LPT_L2_SECTION_MIB = 32

# FwdConfig.causal_order's values (schedule.section_pairs).
CAUSAL_ORDERS = ("all", "pairs", "sections")

SUPPORTED_DTYPES = ("bf16", "fp16", "e4m3")
# FwdConfig.rescale_threshold's bound per dtype: P <= 2^threshold fits it (e4m3's largest is
# 448, fp16's 65504; bf16 has fp32's range, 16 keeps O's fp32 sums far from overflow).
RESCALE_THRESHOLD_MAX = {"bf16": 16.0, "fp16": 15.0, "e4m3": 8.0}
# FP8 (e4m3): the head dims built so far, and the output dtype (the PV accumulator is fp32).
E4M3_HEAD_DIMS = (64, 128, 256)
E4M3_OUT_DTYPE = "bf16"
SUPPORTED_HEAD_DIMS = tuple(DEFAULT_TILES)
SUPPORTED_ARCHS = ("sm_90a",)
# Dynamic shared memory one CTA may use on sm_90 (227 KiB); the barriers take under 1 KiB.
SMEM_LIMIT = 227 * 1024 - 1024
# ctas_per_sm=2: an SM's shared memory (228 KiB), what each CTA costs beyond its tiles (1 KiB
# the system reserves, 1 KiB static, alignment padding and barriers), and the register split
# of one consumer warpgroup and the producer that two CTAs of 256 threads fit in 64K registers
# (the paged producer's 40, inference.py).
SMEM_PER_SM = 228 * 1024
SMEM_CTA_OVERHEAD = 4 * 1024
TWO_CTA_REGISTER_SPLIT = (216, 40)
# paged_kv: rows of one TMA box where a page is smaller than a K/V tile (page sizes that are
# multiples of it take that path; runtime/kvcache.py gathers the others into a dense copy).
PAGE_CHUNK = 16


# FwdConfig.descale_block's per-block forms: name -> (q block, k block) in tokens.
DESCALE_BLOCKS = {"blockq128k128": (128, 128), "blockq128k192": (128, 192)}


def parse_descale_block(value: str) -> tuple[int, int]:
    """(q block, k block) of a descale_block value; (0, 0) for "head"."""
    if value == "head":
        return 0, 0
    if value not in DESCALE_BLOCKS:
        raise ValueError(f"descale_block must be 'head' or one of {sorted(DESCALE_BLOCKS)}, got {value!r}")
    return DESCALE_BLOCKS[value]


def default_tile(head_dim: int, causal: bool = False, head_dim_v: int | None = None) -> tuple[int, int]:
    """The (tile_m, tile_n) this family uses unless told otherwise. `causal` is part of the
    interface (the spec asks per variant); no measured choice depends on it today."""
    # A pair not in the table falls back to head_dim's tile; FwdConfig and the spec refuse it.
    return HEAD_DIM_V_TILES.get((head_dim, head_dim_v), DEFAULT_TILES[head_dim])


@dataclass(frozen=True)
class FwdConfig:
    arch: str
    dtype: str
    head_dim: int
    causal: bool
    tile_m: int = 0  # 0: the family's default for this head dim
    tile_n: int = 0
    # K/V pipeline slots. None: 2, or 3 for the inference forms where they fit (decode
    # streams K/V: more bytes in flight per SM), unless TUNED names them; 0: that default alone.
    stages: int | None = None
    # FA3's two overlaps; switches so each can be measured by leaving it out.
    intra_wg_overlap: bool = True
    pingpong: bool | None = None  # None: see __post_init__
    # Rescale O while QK^T runs, before the PV GEMM, instead of after it: takes the
    # O-sized multiply off the critical path where O is large. None: see __post_init__.
    rescale_o_early: bool | None = None
    # "single": one tile per CTA. "persistent": one CTA per SM striding over the tiles, so a
    # tile's epilogue overlaps the next tile's K/V loads (causal: longest tiles first, zigzag
    # rounds). "lpt" (causal): one tile per CTA on a 1-D grid in causal_lpt_order over 32 MiB
    # L2 sections, so the hardware's in-order block dispatch hands out the longest tiles
    # first (FA4's causal choice).
    scheduler: str = "single"
    # lpt's L2 section in MiB (causal_lpt_order: (head, batch) pairs whose K and V fit it
    # finish together). None: as the TUNED tables say, else LPT_L2_SECTION_MIB; 0:
    # LPT_L2_SECTION_MIB whatever they say (bench.ab). FA4 sizes its sections to 50 MiB rounded
    # down to a power of two pairs (8 for (192, 128) at 8k keys where 32 MiB gives ours 6).
    lpt_section_mib: int | None = None
    # The switches below default to None: the measured choice for this (head_dim, causal,
    # scheduler) in TUNED, else off. bench.ab sets them explicitly to measure each one.
    # O's own shared-memory buffer instead of Q's: a persistent CTA then releases Q after the
    # tile's last QK^T, so the next tile's Q loads under the last PV GEMM and the epilogue.
    # Fits hd <= 128 only (SMEM_LIMIT).
    separate_o_smem: bool | None = None
    # Each consumer warpgroup stores its own 64 rows of O (its own TMA store, a 128-thread
    # barrier) instead of all of them syncing for one store: no warpgroup waits for another
    # at the end of a tile, so ping-pong carries on across tiles. Needs separate_o_smem.
    wg_epilogue: bool | None = None
    # Each consumer warp stores its own 16 rows of O (the WGMMA accumulator's rows of that
    # warp): stmatrix, fence.proxy.async, a warp sync, and one lane's TMA store of a 16-row
    # box, then that warp's LSE; no named barrier in the epilogue at all, so one warp's store
    # runs while the others still convert (cuDNN's per-tile 16 O stores at hd128). The O
    # buffer keeps separate_o_smem's layout: a 16-row slice of it is one 1024-byte-aligned
    # run per swizzle atom of columns, which the 16-row box reads. Needs separate_o_smem,
    # excludes wg_epilogue (issue 10's short-epi A/B).
    warp_o_store: bool | None = None
    # Mask a row with one bit mask from its kept-column count instead of a compare per
    # element (mask.apply_mask_bits), as FA4 does; under a window, the difference of two
    # such masks (mask.apply_window_mask_bits).
    mask_bits: bool | None = None
    # Convert S to P (bf16/fp16) in runs of registers instead of through the A-operand view:
    # the same values in the same registers (checked at trace time), but hd192/256 then
    # convert in pairs (F2FP 40 -> 20, no PRMT; 499 -> 449 instructions per key block at
    # hd256). hd64/128 cubins come out the same either way. The inference kernel takes it too
    # (session 17; until then it ignored it): varlen bf16 hd256 non-causal 499 -> 451.
    chunked_p_convert: bool | None = None
    # Sum softmax rows in order instead of as a tree (softmax.py says why).
    in_order_row_sum: bool | None = None
    # Release K's stage after the softmax instead of as soon as S is ready, behind a test of the
    # rows' sums (kernel.overlapped_step). ptxas places the PV GEMM's wait right after K's
    # release, so with the release early it waits for PV before any exp2 on the 192-row hd64
    # forms and the hd128 / hd256 varlen non-causal ones (the in-order sum moves it on some forms
    # only); tied to the rows' sums, every exp2 runs under the PV GEMM on every form. K's stage is
    # refilled about one softmax later. The sum of exp2s is never negative; the FMA-pipe exp2
    # (exp2_emu_eighths) could wrap negative on a negative scale, so the two are not combined.
    # Off everywhere: it lost on every form (check23: 0.93-1.00 of the shipped cubin; the later
    # refill of K's stage costs more than the overlap gains).
    late_k_release: bool | None = None
    # The overlapped key-block loop's K and V waits as FA4 has them: one try_wait, and the
    # blocking wait only where it failed (plain_step, the loop without overlap, keeps the plain
    # wait). With the plain wait ptxas inlined the retry (NANOSLEEP and a second phase check)
    # into fp16's loops only (hd64 prefill and the pack-GQA decode forms), with the barrier
    # addresses in vector registers; with the try first it places the retry outside the loop on
    # the prefill forms (the fp16 pack-GQA decode forms keep it inline, behind a branch):
    # fp16 hd64 436 / 446 instructions a block (non-causal / causal) against bf16's 417 / 435;
    # with it 432 / 442, bf16 421 / 442, FA4's 420 / 434 in both dtypes (session 25, the SASS on
    # the CPU: bench/results/2026-12-08-h200/check25/fp16-loops.md).
    try_wait_first: bool | None = None
    # Keep K's and V's descriptor bases and the consumer-release lane test in registers across the
    # key-block loops instead of letting NVVM rebuild them every block (pinned.py; FA4's loop
    # keeps them). pin_q_desc: the QK^T GEMM's twelve Q descriptors too (FA4 keeps those as
    # well; here ptxas then moves softmax work from under the PV GEMM to after its wait). Off:
    # the cubins as before.
    pin_loop_invariants: bool | None = None
    pin_q_desc: bool | None = None
    # The persistent walk's tile decode (schedule.TileScheduler.decode: m block, head, batch and
    # the KV head) by multiply-high and shift instead of integer divisions: the divisors'
    # magic numbers are made once per CTA before the tile loop (the launch contract is
    # unchanged). Persistent only: an lpt or single CTA decodes one tile, so the magic
    # numbers would cost what the divisions do. Off: the cubins as before.
    fast_divmod: bool | None = None
    # The persistent causal walk's order (schedule.section_pairs): "all" every (head, batch)
    # pair's last m block first (the cubins as before), "pairs" each pair's m blocks in a
    # row, "sections" L2-sized sections of pairs whose zigzag rounds still even out. The last
    # two keep each pair's K and V in L2 between its m blocks. None: as TUNED says, else "all".
    causal_order: str | None = None
    # The softmax's exp2 for this many of every 8 columns of a row on the FMA pipe instead of
    # the MUFU (softmax.exp2_fma, a polynomial of exp2_emu_degree: exp2_poly.COEFFS), where
    # the MUFU's 16 ex2/clk/SM is the limit (hd64 16-bit, hd128 e4m3). 0: all on the MUFU.
    # None (these three): TUNED's value, else VALUE_SWITCHES' off value.
    exp2_emu_eighths: int | None = None
    exp2_emu_degree: int | None = None
    # > 0: keep a row's stale maximum until a block raises it by more than this many log2
    # units, skipping O's rescale when no row of a warp needs it (FA4's conditional
    # rescaling; softmax.OnlineSoftmax). P then reaches 2^threshold. 0: rescale every block.
    rescale_threshold: float | None = None
    # e4m3: P = 2^(s - (max - p_scale_log2)), shifted up by 2^k before its e4m3 rounding so
    # that small P stay out of e4m3's subnormals (below 2^-6) and a fresh maximum's P (2^k) is
    # exact; the row sum is of the same P, so the shift cancels in O (softmax.OnlineSoftmax).
    # A whole number, with rescale_threshold + p_scale_log2 <= RESCALE_THRESHOLD_MAX (P <= 2^8
    # fits e4m3's 448). 0: no shift.
    p_scale_log2: float | None = None
    # How V arrives: "rowmajor" (batch, seqlen_k, heads_kv, head_dim) or, for e4m3,
    # "colmajor" (batch, heads_kv, head_dim, seqlen_k): WGMMA reads an 8-bit B operand
    # K-major only, which a column-major V already is.
    v_layout: str = "rowmajor"
    # e4m3, V row-major: the transposing warps lay sVt's keys out in the order the S
    # accumulator holds them (fp8_p.local_key), so P goes to the PV GEMM without shuffles
    # (hd128 main loop 566 -> 468 instructions per key block, SHFL 36 -> 4). None: on
    # wherever V is transposed; False keeps the column-major path's shuffled P (bench.ab).
    fp8_local_p: bool | None = None
    # e4m3 with the shuffled P (V column-major): FA3's quad exchange (fp8_p.convert_p_fp8_pairs,
    # its permute_Aregs_fp8), one SHFL per 4 bytes of P instead of two, with no shifts or masks
    # (hd128 128 x 192: 48 SHFL + 48 SHF + 25 LOP3 per key block before). None: off unless
    # TUNED_FP8 names it.
    fp8_p_pair_shuffle: bool | None = None
    # P through shared memory: each consumer warpgroup converts its 64 rows of P, writes them
    # (stmatrix) to its own slab of a (tile_m, tile_n) K-major swizzled buffer, fences the async
    # proxy and meets its own warps at a 128-thread named barrier, and the PV GEMM reads A from
    # that buffer (SS WGMMA) instead of registers (RS). FA4's SM90 hd96 form (192 x 144 / 192 x
    # 128 with mma_pv_is_rs=False): with three consumer warpgroups at 160 registers, P's
    # registers live across the PV issue under RS. bf16/fp16 dense forward only. None: off
    # unless TUNED names it (issue 10's hd96-pss A/B).
    p_smem: bool | None = None
    # Inference axes (issue 11). Each needs scheduler "single" and makes the kernel take
    # seqused_k (keys per sequence, int32) and write O and LSE row by row from registers
    # (inference.py). split_kv: the key range of a tile is cut into num_splits parts (grid
    # x), each writing fp32 partial O and LSE for the attn_combine family to reduce.
    split_kv: bool = False
    # pack_gqa: the query heads of one KV head share the M tile (rows = tokens x group), Q
    # loaded by the consumers row by row; grid y counts KV heads.
    pack_gqa: bool = False
    # paged_kv: K and V come from a paged cache (num_pages, page_size, heads_kv, d) through
    # page_table (batch, max_pages); the producer picks a whole-tile TMA box where a page
    # holds whole tiles, else boxes of PAGE_CHUNK rows.
    paged_kv: bool = False
    # varlen: packed q/k/v (total_tokens, heads, d) with cu_seqlens_q/k (batch + 1) and optional
    # seqused_q/k; a 1-D grid of (tile, head) over the ragged batch (inference.py varlen_tile).
    # With paged_kv, K/V stay the paged cache and only q/o/lse are packed. scheduler
    # "persistent": min(tiles, SMs) CTAs stride over the (tile, head) list instead
    # (schedule.varlen_persistent_walk), so a tile's epilogue overlaps the next one's loads.
    varlen: bool = False
    # varlen: O goes out through Q's shared-memory buffer (stmatrix, then 16-byte row stores
    # predicated per row) instead of 32-bit stores straight from the accumulator's registers.
    # None: as TUNED_VARLEN says (the varlen persistent walk), else off.
    o_smem_store: bool | None = None
    # varlen with o_smem_store: O leaves Q's buffer by one TMA store per tile (a map per
    # swizzle atom of columns) through a ragged tensor map (runtime/tensormap.py
    # ragged_coords), whose bound ends at the tile's sequence end, so the hardware clips the
    # rows past it; instead of each thread's predicated 16-byte row stores. With
    # separate_o_smem instead (persistent walk), O is staged in its own buffer: Q goes back
    # after the last QK^T and nobody waits for the store until the next tile's O (2 K/V
    # stages then fit). None: as TUNED_VARLEN_DTYPE says (bf16 hd128 on the persistent walk),
    # else off; the C++ loader encodes its ragged map as runtime/tensormap.py does.
    o_tma_ragged: bool | None = None
    # varlen, scheduler "persistent": each CTA takes its next tile from a global counter (the
    # producer's atomicAdd, handed to the consumers through shared memory) instead of the
    # static zigzag stride, in varlen_tile_by_keys's order for both masks (sequences longest
    # first, each one's m blocks from the last, heads fastest). The static stride balances the
    # causal walk only in rounds across every sequence, which keeps every sequence's K and V
    # in flight at once: ncu on the 16-sequence hd256 case read 3.4x FA4's DRAM bytes, L2 hit
    # 35% against 76% (check16/n1). The kernel takes a 2-int32 `tile_counter` (zero before the
    # first launch; the last CTA to finish zeroes it again, so replays need nothing).
    varlen_dynamic: bool | None = None
    # Short-sequence overlaps (issue 10; bench.ab's `short-overlap` set); None like the switches
    # above (TUNED names none of them yet, so off).
    # Q in two shared-memory stages: a persistent CTA's producer loads tile t+1's Q as soon as
    # it has issued tile t's last V (with one stage it waits for tile t's last QK^T in every
    # consumer warpgroup), so the next tile's first GEMM never waits for Q. Needs
    # separate_o_smem (O cannot go out through a staged Q buffer) and scheduler "persistent".
    q_double_buffer: bool | None = None
    # Tile t's O store (stmatrix, LSE, TMA store) moved under tile t+1's first QK^T: the
    # consumers normalise and convert O into registers kept across the tile loop, issue the
    # next tile's first GEMM, then store, so the store's barriers and shared-memory writes run
    # while the tensor cores work. Needs q_double_buffer (tile t+1's Q must not wait for t).
    deferred_o_store: bool | None = None
    # CTAs resident per SM (the launch's min_blocks_per_mp): 2 halves the registers (the split
    # sums to 256 per thread pair, REGCOUNT <= 128) and needs the CTA's shared memory under half
    # an SM's, so a decode grid of ~2 waves at one CTA per SM runs as one (bench/decode_ab.py:
    # no wave-boundary restart of the K/V stream). Inference forms with one consumer warpgroup
    # only. None: as TUNED_DECODE says, else 1.
    ctas_per_sm: int | None = None
    # What models ship with (runtime values are the contract's scalars and tensors):
    # scores become c * tanh(s * scale / c) before the softmax; c is the scalar `softcap`.
    softcap: bool = False
    # A sliding window (window_left, window_right), bottom-right aligned (block_range.py);
    # key blocks outside it are never loaded. Causal (the window (-1, 0)) keeps its own path.
    local: bool = False
    # One logit per query head added to each row's softmax denominator (gpt-oss, FA4).
    learnable_sink: bool = False
    # V's (and O's) head dim when it differs from Q's and K's: one of HEAD_DIM_V_TILES.
    head_dim_v: int = 0  # 0: head_dim
    # e4m3 block descales for q and k (issue 13; descale_block.py): "head" (FA3's per-(batch,
    # head_kv) q/k descales folded into the softmax's scale, the cubins as before) or
    # "blockq<BQ>k<BK>" (DESCALE_BLOCKS): q_descale (batch, heads_q, ceil(seqlen_q / BQ)) and
    # k_descale (batch, heads_kv, ceil(seqlen_k / BK)) float32 kernel tensors, quantize_fp8's
    # per-block shape, with the row maximum kept in scaled log2 units (softmax.BlockScaledSoftmax).
    # BK is a multiple of tile_n (one k scale per key block), BQ of 16 (one q scale per thread:
    # a thread's two rows share a 16-row group). v keeps its (batch, heads_kv) descale (FA3's).
    descale_block: str = "head"

    def __post_init__(self):
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"fa3_fwd_sm90 builds for {SUPPORTED_ARCHS}, not {self.arch!r}")
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} not supported; use one of {SUPPORTED_DTYPES}")
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"head_dim {self.head_dim} not supported; use one of {SUPPORTED_HEAD_DIMS}")
        if not self.head_dim_v:
            object.__setattr__(self, "head_dim_v", self.head_dim)
        if self.head_dim_v != self.head_dim and (self.head_dim, self.head_dim_v) not in HEAD_DIM_V_TILES:
            raise ValueError(f"(head_dim, head_dim_v) = ({self.head_dim}, {self.head_dim_v}) not supported; "
                             f"use one of {sorted(HEAD_DIM_V_TILES)} or head_dim_v = head_dim")
        if self.v_layout not in ("rowmajor", "colmajor"):
            raise ValueError(f"v_layout must be 'rowmajor' or 'colmajor', got {self.v_layout!r}")
        if self.fp8:
            if self.head_dim not in E4M3_HEAD_DIMS:
                raise ValueError(f"e4m3 builds head_dim {E4M3_HEAD_DIMS} so far, not {self.head_dim}")
            if self.model_variant:
                on = [n for n in ("softcap", "local", "learnable_sink") if getattr(self, n)]
                if self.head_dim_v != self.head_dim:
                    on.append(f"head_dim_v={self.head_dim_v}")
                raise ValueError(f"e4m3 does not take the model variants yet (got {', '.join(on)}); "
                                 f"build e4m3 without them, or use bf16/fp16")
            if self.inference and self.v_layout != "rowmajor":
                # A KV cache (or packed varlen k/v) holds V as it holds K; the kernel transposes it.
                raise ValueError("e4m3 split_kv / pack_gqa / paged_kv / varlen read V row-major as a cache holds "
                                 "it: use v_layout='rowmajor'")
            if self.o_smem_store:
                raise ValueError("o_smem_store stages O through Q's buffer, which is e4m3 here: not for e4m3")
        elif self.v_layout != "rowmajor":
            raise ValueError(f"v_layout='colmajor' is built for e4m3 only, not {self.dtype}")
        if self.fp8_local_p is None:
            object.__setattr__(self, "fp8_local_p", self.v_transpose)
        if self.fp8_local_p and not self.v_transpose:
            raise ValueError("fp8_local_p permutes the keys of V as the kernel transposes it: "
                             "it needs dtype e4m3 with v_layout='rowmajor'")
        tm, tn = default_tile(self.head_dim, self.causal, self.head_dim_v)
        if not self.tile_m:
            object.__setattr__(self, "tile_m", tm)
        if not self.tile_n:
            object.__setattr__(self, "tile_n", tn)
        # None: 2 (3 for the inference forms where they fit) unless a TUNED entry names them
        # (below); 0: that default whatever TUNED says (bench.ab, so a label means what it says).
        auto_stages = self.stages is None
        if not self.stages:
            object.__setattr__(self, "stages", 2)
            if self.inference and self.smem_for(3) <= SMEM_LIMIT:
                object.__setattr__(self, "stages", 3)
        # Side by side on the H200 at 8k (early dev run, figures not kept): for hd192/256
        # non-causal, dropping the schedule barrier and rescaling O early gained ~2%; causal
        # did not gain (ab.md: hd256 causal 683 vs 682 TFLOPS), so it keeps the FA3 schedule.
        wide_noncausal = self.head_dim > 128 and not self.causal
        if self.pingpong is None:
            object.__setattr__(self, "pingpong", not wide_noncausal)
        if self.rescale_o_early is None:
            object.__setattr__(self, "rescale_o_early", wide_noncausal)
        if self.scheduler not in ("single", "persistent", "lpt"):
            raise ValueError(f"scheduler must be 'single', 'persistent' or 'lpt', got {self.scheduler!r}")
        if self.scheduler == "lpt" and not self.causal:
            raise ValueError("scheduler 'lpt' orders causal tiles; non-causal tiles all cost the same")
        if self.tile_m % 64 or self.tile_m // 64 not in (1, 2, 3):
            raise ValueError(f"tile_m must be 64, 128 or 192 (one warpgroup per 64 rows), got {self.tile_m}")
        if self.tile_n % 16:
            raise ValueError(f"tile_n must be a multiple of 16, got {self.tile_n}")
        # A tile nobody measured starts from all switches off.
        tile = None if (self.tile_m, self.tile_n) == (tm, tn) else (self.tile_m, self.tile_n)
        # The inference forms were not in that A/B: all off; model variants only as
        # TUNED_VARIANTS names them (all off otherwise, so their cubins stay as built).
        key = (self.head_dim, self.causal, self.scheduler, tile)
        if self.inference:
            # Packed varlen with no model axis but a value head dim of its own is keyed with a
            # leading "dv<N>", as TUNED_VARIANTS names it.
            plain_varlen = self.varlen and not (self.paged_kv or self.fp8 or self.softcap or self.local
                                                or self.learnable_sink)
            vkey = key if self.head_dim_v == self.head_dim else (f"dv{self.head_dim_v}", *key)
            tuned = TUNED_VARLEN.get(vkey, {}) if plain_varlen else {}
            if plain_varlen and not self.o_smem_store:
                tuned = TUNED_VARLEN_DTYPE.get((self.dtype, *vkey), tuned)
            if self.varlen and not (plain_varlen or self.fp8):
                tuned = TUNED_VARLEN_FORMS.get((self.dtype, self.varlen_form, *key), tuned)
            if self.varlen and self.scheduler == "persistent" and not self.fp8:
                # Every persistent varlen form takes its tiles from the counter: session 16
                # (check16/p1, bench.ab varlen-dynamic, the 16-sequence case beside the static
                # walk and FA4 in alternating rounds) 1.004-1.178x the static walk on all twelve
                # packed forms (bf16 causal hd128 / (192, 128) / hd256 1.059 / 1.130 / 1.178, 1.08 /
                # 1.03 / 1.07x FA4; non-causal 1.02-1.03); hd256 causal's DRAM reads 1.70 GB ->
                # 0.57 GB (FA4 0.49), L2 hit 35% -> 72% (ncu, n1 / p1). Float64 tests: check16/o1.
                # Session 18 (check17/s1): packed hd64 non-causal 1.116 / 1.119x the one-tile form
                # (bf16 / fp16; the static walk 1.089 / 1.088x), causal 1.096 / 1.095x (static
                # 1.095 / 1.098x); paged hd128 and the window, TUNED_VARLEN_FORMS.
                tuned = {**tuned, "varlen_dynamic": True}
            if not (self.varlen or self.fp8 or self.model_variant):
                tuned = TUNED_DECODE.get((self.head_dim, (self.tile_m, self.tile_n), self.paged_kv), tuned)
        elif self.model_variant:
            tuned = TUNED_VARIANTS.get((self.variant_token, *key), {}) if self.variant_token else {}
        elif self.dtype == "fp16" and key in TUNED_FP16:
            tuned = TUNED_FP16[key]
        else:
            tuned = TUNED.get(key, {})
        if self.fp8 and not self.inference:
            # O (bf16) cannot go out through Q's (e4m3) buffer (the inference forms write O
            # from registers), and P is converted through its own register permutation (fp8_p.py).
            tuned = {"separate_o_smem": True, **TUNED_FP8.get((*key, self.v_layout), {})}
        if self.fp8:
            if self.chunked_p_convert:
                raise ValueError("chunked_p_convert does not apply to e4m3 (P is permuted, not copied)")
            if self.tile_n % 32:
                raise ValueError(f"e4m3 tile_n must be a multiple of 32 (the PV GEMM's K step), got {self.tile_n}")
        for name in SWITCHES:
            if getattr(self, name) is None:
                object.__setattr__(self, name, tuned.get(name, False))
        if auto_stages and "stages" in tuned:
            object.__setattr__(self, "stages", tuned["stages"])
        if self.ctas_per_sm is None:
            object.__setattr__(self, "ctas_per_sm", tuned.get("ctas_per_sm", 1))
        if self.lpt_section_mib is None:
            object.__setattr__(self, "lpt_section_mib", tuned.get("lpt_section_mib", 0))
        if self.lpt_section_mib and (self.scheduler != "lpt" or self.lpt_section_mib < 0):
            raise ValueError(f"lpt_section_mib sizes the lpt scheduler's L2 sections (MiB > 0, scheduler 'lpt'), "
                             f"got {self.lpt_section_mib} with scheduler {self.scheduler!r}")
        for name, off in VALUE_SWITCHES.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, tuned.get(name, off))
        if self.causal_order is None:
            object.__setattr__(self, "causal_order", tuned.get("causal_order", "all"))
        self._check_softmax_switches()
        self._check_descale_block()
        if self.late_k_release and self.exp2_emu_eighths:
            raise ValueError("late_k_release releases K behind a test of the row sums, which the FMA-pipe exp2 "
                             "(exp2_emu_eighths) does not keep non-negative for every scale: use one or the other")
        if self.fp8_p_pair_shuffle and not (self.fp8 and not self.fp8_local_p):
            raise ValueError("fp8_p_pair_shuffle is the shuffled P's exchange: it needs dtype e4m3 with "
                             "fp8_local_p off (V column-major, or row-major with fp8_local_p=False)")
        if self.fp8 and not self.inference and not self.separate_o_smem:
            raise ValueError("e4m3 needs separate_o_smem: O (bf16) does not fit Q's e4m3 buffer layout")
        if self.fast_divmod and (self.scheduler != "persistent" or self.inference):
            raise ValueError(f"fast_divmod hoists the persistent walk's tile decode (scheduler 'persistent', "
                             f"the dense kernel), got scheduler {self.scheduler!r}"
                             f"{' and an inference form' if self.inference else ''}")
        if self.causal_order not in CAUSAL_ORDERS:
            raise ValueError(f"causal_order must be one of {CAUSAL_ORDERS}, got {self.causal_order!r}")
        if self.causal_order != "all" and not (self.causal and self.scheduler == "persistent" and not self.inference
                                               and not self.v_transpose and not self.fast_divmod):
            raise ValueError("causal_order orders the persistent causal walk: it needs causal, scheduler "
                             "'persistent', the dense kernel (no split_kv, pack_gqa, paged_kv or varlen), V not "
                             "transposed in shared memory and no fast_divmod")
        if self.local and self.causal:
            raise ValueError("local and causal are exclusive: causal is the window (-1, 0) and has its own path")
        if self.p_smem:
            if self.fp8 or self.inference or self.model_variant:
                raise ValueError("p_smem is built for the bf16/fp16 dense forward only (no e4m3, split_kv, pack_gqa, "
                                 "paged_kv, varlen or model variants): e4m3's P is permuted in registers")
            if self.chunked_p_convert:
                raise ValueError("p_smem converts P in register order already (chunked_p_convert is its RS form)")
        if self.wg_epilogue and not self.separate_o_smem:
            raise ValueError("wg_epilogue needs separate_o_smem: in Q's buffer, O's layout is Q's")
        if self.warp_o_store and not (self.separate_o_smem and not self.wg_epilogue and not self.inference):
            raise ValueError("warp_o_store stores O per warp from its own buffer: it needs separate_o_smem, "
                             "excludes wg_epilogue, and is built for the dense forward only")
        if self.inference and self.scheduler != "single" and not (self.varlen and self.scheduler == "persistent"):
            raise ValueError("split_kv, pack_gqa and paged_kv run one tile per CTA: use scheduler 'single' "
                             "(varlen takes 'single' or 'persistent')")
        if self.varlen and self.scheduler == "persistent" and self.fp8:
            raise ValueError("the persistent varlen walk is built for bf16/fp16 (it passes no descales): "
                             "build e4m3 varlen with scheduler 'single'")
        # The walk takes the model variants since session 17 (bench.ab varlen-model, not run yet):
        # the shipped varlen softcap / window / sink forms run one tile per CTA (spec.py).
        if self.inference and (self.wg_epilogue or (self.separate_o_smem and not self.o_tma_ragged)):
            raise ValueError("split_kv, pack_gqa and paged_kv write O from registers: no O buffer options "
                             "(varlen's o_tma_ragged takes separate_o_smem)")
        if self.inference and self.q_double_buffer:
            raise ValueError("q_double_buffer is built for the dense forward only (the inference forms load "
                             "one Q stage)")
        if self.q_double_buffer and not (self.scheduler == "persistent" and self.separate_o_smem):
            raise ValueError("q_double_buffer needs scheduler 'persistent' and separate_o_smem "
                             "(one tile per CTA loads Q once; O cannot go out through a staged Q)")
        if self.deferred_o_store and not self.q_double_buffer:
            raise ValueError("deferred_o_store needs q_double_buffer: the next tile's Q must not wait "
                             "for this tile's O store")
        if self.o_smem_store and not self.varlen:
            raise ValueError("o_smem_store is built for the varlen forms only (varlen=True)")
        if self.o_tma_ragged and not (self.varlen and self.o_smem_store != self.separate_o_smem):
            raise ValueError("o_tma_ragged stores varlen O from shared memory: it needs varlen=True and one of "
                             "o_smem_store (Q's buffer) or separate_o_smem (O's own, scheduler 'persistent')")
        if self.o_tma_ragged and self.scheduler != "persistent":
            # Its GPU tests (tests/gpu/test_varlen_persist_gpu.py) cover the walk's forms only.
            raise ValueError("o_tma_ragged is built for the persistent varlen walk: use scheduler 'persistent'")
        if self.varlen_dynamic and not (self.varlen and self.scheduler == "persistent"):
            # With paged_kv an A/B candidate (bench.ab varlen-dynamic-2): shipped packed only.
            raise ValueError("varlen_dynamic hands out the persistent varlen walk's tiles: it needs varlen=True "
                             "and scheduler 'persistent'")
        if self.pack_gqa and self.mask_bits:
            raise ValueError("mask_bits counts kept columns per token row: pack_gqa's rows are (token, head)")
        if self.inference and self.head_dim_v != self.head_dim:
            # Packed varlen (DeepSeek MLA prefill is (192, 128) over ragged batches): V's tiles and
            # O are head_dim_v wide (O staged in a (tile_m, head_dim_v) view of Q's buffer where it
            # goes through shared memory); the other forms read V as K.
            other = [n for n in ("split_kv", "pack_gqa", "paged_kv", "fp8") if getattr(self, n)]
            if not self.varlen or other:
                raise ValueError(f"head_dim_v = {self.head_dim_v} != head_dim = {self.head_dim} is built for the dense "
                                 f"forward and packed varlen only; got "
                                 f"{', '.join(other) if self.varlen else 'an inference form without varlen'} "
                                 f"(use head_dim_v = head_dim there)")
        if self.varlen and (self.split_kv or self.pack_gqa):
            raise ValueError("varlen is built without split_kv and pack_gqa so far: use varlen alone or with paged_kv")
        if self.paged_kv and self.tile_n % PAGE_CHUNK:
            raise ValueError(f"paged_kv loads pages in boxes of {PAGE_CHUNK} rows: tile_n must be a multiple")
        if self.ctas_per_sm not in (1, 2):
            raise ValueError(f"ctas_per_sm must be 1 or 2, got {self.ctas_per_sm}")
        if self.ctas_per_sm == 2:
            if not self.inference or self.varlen or self.consumer_warpgroups != 1:
                raise ValueError("ctas_per_sm=2 is built for the decode forms (split_kv / pack_gqa / paged_kv, "
                                 "not varlen) with tile_m=64 (one consumer warpgroup)")
            if self.smem_bytes > SMEM_PER_SM // 2 - SMEM_CTA_OVERHEAD:
                raise ValueError(f"ctas_per_sm=2: tiles {self.tile_m}x{self.tile_n} with {self.stages} stages need "
                                 f"{self.smem_bytes} B of shared memory; two CTAs fit "
                                 f"{SMEM_PER_SM // 2 - SMEM_CTA_OVERHEAD} B each (e.g. 64x64 with 2 stages)")
        if self.smem_bytes > SMEM_LIMIT:
            raise ValueError(
                f"tiles {self.tile_m}x{self.tile_n} at head_dim {self.head_dim} with {self.stages} stages"
                f"{' and a separate O buffer' if self.separate_o_smem else ''}"
                f"{' and P in shared memory' if self.p_smem else ''} need {self.smem_bytes} B"
                f" of shared memory; sm_90 allows {SMEM_LIMIT}"
                f"{' (p_smem: leave separate_o_smem off or narrow tile_n)' if self.p_smem else ''}")

    def _check_softmax_switches(self):
        from .exp2_poly import COEFFS

        if not 0 <= self.exp2_emu_eighths <= 8:
            raise ValueError(f"exp2_emu_eighths counts columns out of 8: 0..8, got {self.exp2_emu_eighths}")
        if self.exp2_emu_degree not in COEFFS:
            raise ValueError(f"exp2_emu_degree must be one of {sorted(COEFFS)}, got {self.exp2_emu_degree}")
        # P = 2^(s - stale max) <= 2^threshold must stay finite in P's own dtype.
        cap = RESCALE_THRESHOLD_MAX[self.dtype]
        if not 0.0 <= self.rescale_threshold <= cap:
            raise ValueError(f"rescale_threshold for {self.dtype} must be in [0, {cap}] (P <= 2^threshold "
                             f"must fit {self.dtype}), got {self.rescale_threshold}")
        if self.p_scale_log2:
            if not self.fp8:
                raise ValueError(f"p_scale_log2 shifts P before its e4m3 rounding: e4m3 only, not {self.dtype}")
            room = cap - self.rescale_threshold
            if not 0 <= self.p_scale_log2 <= room or self.p_scale_log2 != int(self.p_scale_log2):
                raise ValueError(f"p_scale_log2 must be a whole number in [0, {room:g}] (P <= 2^(rescale_threshold "
                                 f"+ p_scale_log2) <= 2^{cap:g} must fit e4m3), got {self.p_scale_log2}")
        if self.inference and (self.exp2_emu_eighths or self.p_scale_log2):
            raise ValueError("exp2_emu_eighths and p_scale_log2 are built for the dense forward "
                             "only, not split_kv, pack_gqa, paged_kv or varlen")
        if self.rescale_threshold and self.inference and (self.split_kv or self.pack_gqa or not self.varlen):
            # The varlen forms run the dense kernel's overlapped loop and finish (inference.py).
            raise ValueError("rescale_threshold is built for the dense forward and varlen only, "
                             "not split_kv, pack_gqa or paged decode")

    def _check_descale_block(self):
        bq, bk = parse_descale_block(self.descale_block)
        if not bk:
            return
        if not self.fp8 or self.inference:
            raise ValueError(f"descale_block={self.descale_block!r} is built for the dense e4m3 forward only "
                             f"(got dtype {self.dtype}{', an inference form' if self.inference else ''})")
        if bk % self.tile_n:
            raise ValueError(f"descale_block {self.descale_block!r}: the k block ({bk}) must be a multiple of "
                             f"tile_n ({self.tile_n}), one k scale per key block")
        if bq % 16:
            raise ValueError(f"descale_block {self.descale_block!r}: the q block ({bq}) must be a multiple of 16 "
                             f"(a thread's rows share one 16-row group)")

    @property
    def descale_blocks(self) -> tuple[int, int]:
        """(q block, k block) in tokens; (0, 0): per-(batch, head_kv) descales."""
        return parse_descale_block(self.descale_block)

    @property
    def l2_section_mib(self) -> int:
        """L2 section of the causal tile order: FA4's for lpt, none (one global order) else."""
        return (self.lpt_section_mib or LPT_L2_SECTION_MIB) if self.scheduler == "lpt" else 0

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the Q, K, V (and O) tiles, before alignment padding."""
        return self.smem_for(self.stages)

    def smem_for(self, stages: int) -> int:
        q = self.tile_m * self.head_dim * self.elem_bytes * self.q_stages
        kv = stages * self.tile_n * (self.head_dim + self.head_dim_v) * self.elem_bytes
        if self.v_transpose:
            kv += stages * self.tile_n * self.head_dim_v * self.elem_bytes  # sVt
        o = self.tile_m * self.head_dim_v * self.out_elem_bytes
        p = self.tile_m * self.tile_n * self.elem_bytes  # p_smem's buffer
        return q + kv + (o if self.separate_o_smem else 0) + (p if self.p_smem else 0)

    @property
    def q_stages(self) -> int:
        return 2 if self.q_double_buffer else 1

    @property
    def inference(self) -> bool:
        """Whether any inference axis is on (the seqused_k / register-epilogue kernel form)."""
        return self.split_kv or self.pack_gqa or self.paged_kv or self.varlen

    @property
    def model_variant(self) -> bool:
        """Whether a model-variant axis is on (softcap, window, sink, V narrower than Q)."""
        return self.softcap or self.local or self.learnable_sink or self.head_dim_v != self.head_dim

    @property
    def variant_token(self) -> str | None:
        """The one model axis on, as TUNED_VARIANTS names it (None for none or several)."""
        on = [t for t, v in (("softcap", self.softcap), ("local", self.local), ("sink", self.learnable_sink),
                             (f"dv{self.head_dim_v}", self.head_dim_v != self.head_dim)) if v]
        return on[0] if len(on) == 1 else None

    @property
    def varlen_form(self) -> str:
        """The axes beyond packed varlen, as TUNED_VARLEN_FORMS names them ("paged", "local",
        "local+sink", ...; "" for none)."""
        return "+".join(t for t, v in (("paged", self.paged_kv), ("softcap", self.softcap), ("local", self.local),
                                       ("sink", self.learnable_sink)) if v)

    @property
    def consumer_warpgroups(self) -> int:
        return self.tile_m // 64

    @property
    def threads(self) -> int:
        # One producer warpgroup plus one consumer warpgroup per 64 query rows.
        return 128 * (self.consumer_warpgroups + 1)

    @property
    def register_split(self) -> tuple[int, int]:
        """(consumer, producer) registers per thread after setmaxnreg; sums within 64K/SM."""
        if self.ctas_per_sm == 2:
            return TWO_CTA_REGISTER_SPLIT
        return {1: (256, 56), 2: (240, 24), 3: (160, 32)}[self.consumer_warpgroups]

    @property
    def elem_bytes(self) -> int:
        return 1 if self.fp8 else 2

    @property
    def fp8(self) -> bool:
        return self.dtype == "e4m3"

    @property
    def v_transpose(self) -> bool:
        """e4m3 with V row-major: V is transposed in shared memory (v_transpose.py)."""
        return self.fp8 and self.v_layout == "rowmajor"

    @property
    def out_dtype(self) -> str:
        return E4M3_OUT_DTYPE if self.fp8 else self.dtype

    @property
    def out_elem_bytes(self) -> int:
        return 2
