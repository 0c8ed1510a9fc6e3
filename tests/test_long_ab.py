"""bench.ab's `long-ab` set (issue 10's long cells, 0.95-0.99 of FA4): each row is a shipped long
form plus the knobs its label names, the persistent walk's decode by multiply-high and shift
(FwdConfig.fast_divmod) gives TileScheduler.decode's tiles, the switch is off in every shipped
build and refused where a CTA decodes one tile, and (slow) it takes the integer divisions out
of the tile loop without touching the key-block loop."""

from __future__ import annotations

import re

import pytest

from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import SWITCHES
from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import TileScheduler, decode_divisors, decode_fast

ROWS = EXPERIMENTS["long-ab"]
KNOBS = {"pin_loop_invariants": "+pin", "fast_divmod": "+fast-divmod"}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_m,heads,batches,heads_kv", [(1, 1, 1, 1), (43, 16, 1, 16), (22, 8, 2, 2),
                                                          (7, 64, 3, 8), (128, 32, 1, 4)])
def test_fast_decode_gives_the_persistent_walks_tiles(causal, num_m, heads, batches, heads_kv):
    sched = TileScheduler("persistent", causal)
    divs = decode_divisors(sched, num_m, heads, batches, heads_kv)
    seen = set()
    for tile in range(num_m * heads * batches):
        m_block, head, batch = sched.decode(tile, num_m, heads, batches, 8192, 512, 0)
        got = decode_fast(sched, tile, num_m, divs)
        assert got == (m_block, head, batch, head // (heads // heads_kv)), (tile, got)
        seen.add(got[:3])
    assert len(seen) == num_m * heads * batches


def test_fast_divmod_is_off_when_shipped_and_refused_where_a_cta_decodes_once():
    assert "fast_divmod" in SWITCHES
    for hd, causal, sched in ((64, False, "persistent"), (64, True, "persistent"), (128, False, "persistent"),
                              (128, True, "lpt"), (256, True, "lpt"), (256, False, "persistent")):
        assert not FwdConfig(arch="sm_90a", dtype="bf16", head_dim=hd, causal=causal, scheduler=sched).fast_divmod
    for sched in ("lpt", "single"):
        with pytest.raises(ValueError, match="fast_divmod hoists the persistent walk"):
            FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, scheduler=sched, fast_divmod=True)


# What check9/n5 promoted from this set (config.TUNED), per (head dim, causal, scheduler).
PROMOTED = {(256, True, "lpt"): ("pin_loop_invariants",)}
# What TUNED took on after the set ran, which its rows (naming no stages) do not: hd64 causal's
# third K/V stage (check24/d1).
SHIPPED_SINCE = {(64, True, "persistent"): {"stages": 2}}


def test_each_row_is_a_shipped_form_plus_its_label():
    names = [ab_name(experiment_config(o), label) for label, o in ROWS]
    assert len(set(names)) == len(names), names
    controls = 0
    for label, over in ROWS:
        cfg = experiment_config(over)
        shipped = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=cfg.head_dim, causal=cfg.causal,
                            scheduler=cfg.scheduler)
        promoted = PROMOTED.get((cfg.head_dim, cfg.causal, cfg.scheduler), ())
        for field in (*SWITCHES, "stages", "tile_m", "tile_n", "pingpong"):
            # A row's control is the form shipped when the set ran (before what it promoted).
            since = SHIPPED_SINCE.get((cfg.head_dim, cfg.causal, cfg.scheduler), {})
            expect = (True if KNOBS.get(field, "\0") in label else False if field in promoted
                      else since[field] if field in since else getattr(shipped, field))
            assert getattr(cfg, field) == expect, (label, field)
        mib = re.search(r"\+l2-(\d+)", label)
        assert cfg.lpt_section_mib == (int(mib[1]) if mib else shipped.lpt_section_mib), label
        controls += not any(t in label for t in ("+pin", "+fast-divmod", "+l2-"))
    assert controls == 6 and len(ROWS) <= 6 + 14


def _sass(cfg):
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant
    from cubinforge.generator.sass import cuobjdump

    return cuobjdump(["-sass"], compile_variant(cfg).cubin)


@pytest.mark.slow
def test_fast_divmod_takes_the_divisions_out_of_the_tile_loop():
    pytest.importorskip("cutlass")
    from cubinforge.bench.loop_sass import loops
    from cubinforge.generator.sass import find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip nvidia-cuda-cuobjdump)")
    base = dict(head_dim=64, causal=False, scheduler="persistent", separate_o_smem=True, wg_epilogue=True,
                q_double_buffer=True)
    plain, fast = _sass(experiment_config(base)), _sass(experiment_config(dict(base, fast_divmod=True)))
    # An integer division's reciprocal starts with I2F.RP: the producer's decode takes three a
    # tile (m block, head, KV head), each consumer warp's two. With the switch only the one
    # group size (heads_q // heads_kv) before the loop is left; the tiles take IMAD.WIDE.U32 +
    # SHF (uniform datapath: UIMAD.WIDE.U32 / USHF).
    assert plain.count("I2F.RP") >= 4
    assert fast.count("I2F.RP") <= 1
    assert "IMAD.WIDE.U32" in fast
    # The key-block loops are untouched.
    assert [x["insts"] for x in loops(plain)] == [x["insts"] for x in loops(fast)]
