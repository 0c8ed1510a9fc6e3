"""bench.ab's `model-variants-2` set (issue 12's open speed targets): each candidate is the
shipped window or (192, 128) build plus what its label names and has a case
bench/model_variants.py --ab-home times; the switches a schedule cannot take are refused when
the config is made; and bench/loop_sass.py's loop finder on a hand-written SASS listing."""

from __future__ import annotations

import re

import pytest

from cubinforge.bench import model_variants as mv
from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

BF16 = dict(arch="sm_90a", dtype="bf16")
ROWS = EXPERIMENTS["model-variants-2"]


def test_each_candidate_is_the_shipped_build_plus_its_label():
    names = [ab_name(experiment_config(o), label) for label, o in ROWS]
    assert len(set(names)) == len(names), names
    assert len(ROWS) <= 8  # what one short device call times
    # The shipped builds (config.TUNED_VARIANTS, as the default set builds them).
    window = FwdConfig(**BF16, head_dim=128, causal=False, local=True, scheduler="single")
    dv = FwdConfig(**BF16, head_dim=192, head_dim_v=128, causal=True, scheduler="lpt")
    for label, o in ROWS:
        cfg = experiment_config(o)
        base = window if cfg.local else dv
        assert (cfg.local and "local" in mv.AB_CASES) or (cfg.head_dim_v != cfg.head_dim
                                                          and "head_dim_v" in mv.AB_CASES), label
        tile = re.search(r"tile-(\d+)x(\d+)", label)
        expect = dict(
            scheduler="single" if label.startswith("single") else "lpt" if label.startswith("lpt") else "persistent",
            stages=3 if "stages-3" in label else 2,
            tile_m=int(tile[1]) if tile else base.tile_m, tile_n=int(tile[2]) if tile else base.tile_n,
            separate_o_smem="separate-o" in label, q_double_buffer="q-double-buffer" in label,
            deferred_o_store="deferred-o" in label, chunked_p_convert="chunked-p" in label,
            wg_epilogue=False, in_order_row_sum=True, mask_bits=True,
        )
        for field, want in expect.items():
            assert getattr(cfg, field) == want, (label, field)
            if field not in ("scheduler", "stages", "tile_m", "tile_n") and getattr(base, field) != want:
                assert field in ("separate_o_smem", "q_double_buffer", "deferred_o_store", "chunked_p_convert"), \
                    (label, field)  # only a switch the label names differs from the shipped build
    kinds = {"local" if experiment_config(o).local else "head_dim_v" for _, o in ROWS}
    assert kinds == {"local", "head_dim_v"}


@pytest.mark.parametrize("over, match", [
    # One tile per CTA (single, lpt) loads Q once: no second Q stage to overlap.
    (dict(head_dim=128, causal=False, local=True, scheduler="single", q_double_buffer=True), "q_double_buffer needs"),
    (dict(head_dim=192, head_dim_v=128, causal=True, scheduler="lpt", separate_o_smem=True, q_double_buffer=True),
     "q_double_buffer needs scheduler 'persistent'"),
    (dict(head_dim=128, causal=False, local=True, scheduler="persistent", separate_o_smem=True,
          deferred_o_store=True), "deferred_o_store needs q_double_buffer"),
    # (192, 128) at 128 x 128: no third stage, no O buffer of its own, no 128 x 144.
    (dict(head_dim=192, head_dim_v=128, causal=True, scheduler="lpt", stages=3), "3 stages need"),
    (dict(head_dim=192, head_dim_v=128, causal=True, scheduler="persistent", separate_o_smem=True),
     "separate O buffer need"),
    (dict(head_dim=192, head_dim_v=128, causal=True, scheduler="lpt", tile_m=128, tile_n=144), "128x144"),
])
def test_what_a_schedule_cannot_take_is_refused_at_build_time(over, match):
    with pytest.raises(ValueError, match=match):
        FwdConfig(**BF16, **over)


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*0020*/                   ISETP.GE.AND P0, PT, R2, R3, PT ;
        /*0030*/                   FSEL R4, R5, -INF , P0 ;
        /*0040*/               @P0 BRA 0x10 ;
        /*0050*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R2], R3 ;
        /*0060*/              @!P1 BRA 0x50 ;
        /*0070*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ ;
        /*0080*/                   R2P PR, R6, 0x7f ;
        /*0090*/                   MUFU.EX2 R7, R7 ;
        /*00a0*/               @P2 BRA 0x70 ;
        /*00b0*/               @P3 BRA 0x0 ;
        /*00c0*/                   EXIT ;
        /*00d0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R2], R3 ;
        /*00e0*/              @!P1 BRA 0x70 ;
"""


def test_loop_finder_keeps_innermost_gemm_loops_and_skips_out_of_line_waits():
    from cubinforge.bench.loop_sass import loops

    found = loops(SASS)
    # 0x10-0x40 and 0x70-0xa0; not the wait spin (no GEMM), the outer loop 0x0-0xb0 (holds
    # both), or the retry after EXIT that branches back into the second loop.
    assert [(x["at"], x["insts"], x["gemm"], x["isetp"], x["fsel"], x["r2p"], x["mufu"]) for x in found] == [
        ("0x10", 4, 1, 1, 1, 0, 0), ("0x70", 4, 1, 0, 0, 1, 1)]
