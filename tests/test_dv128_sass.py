"""bench.ab's `dv128-sass` set (issue 12's (192, 128) causal cell at 0.986x FA4): each row is the
shipped (192, 128) build plus the pinning its label names, the pin switches are off in every
shipped build, and (slow) pinning removes the rebuilt invariants from the key-block loop without
moving the softmax's split around the PV GEMM's wait or costing registers."""

from __future__ import annotations

import re

import pytest

from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import SWITCHES

ROWS = EXPERIMENTS["dv128-sass"]
SHIPPED = dict(arch="sm_90a", dtype="bf16", head_dim=192, head_dim_v=128, causal=True, scheduler="lpt")
PINS = ("pin_loop_invariants", "pin_q_desc")


def test_each_row_is_the_shipped_build_plus_its_label():
    shipped = FwdConfig(**SHIPPED)
    names = [ab_name(experiment_config(o), label) for label, o in ROWS]
    assert len(set(names)) == len(names), names
    for label, over in ROWS:
        cfg = experiment_config(over)
        want = {"pin_loop_invariants": "+pin" in label, "pin_q_desc": "pin-q" in label,
                "pingpong": "no-pingpong" not in label}
        for field in (*SWITCHES, "stages", "tile_m", "tile_n", "lpt_section_mib", "pingpong", "scheduler"):
            expect = want.get(field, getattr(shipped, field))
            assert getattr(cfg, field) == expect, (label, field)
    assert ROWS[0][0] == "lpt+mask-bits+in-order-sum+l2-40"  # the A/A control


def test_only_the_timed_build_ships_a_pin():
    """Shipped builds take their switches from config's tables: the (192, 128) causal lpt form,
    timed on the H200 (check8/l9), pins its loop invariants; nothing else names a pin, so
    every other cubin is built as before."""
    from cubinforge.generator.kernels.fa3_fwd_sm90 import config

    for name in PINS:
        assert name in SWITCHES
    named = {(table_name, key) for table_name, table in (("TUNED", config.TUNED), ("TUNED_VARIANTS", config.TUNED_VARIANTS),
                                                          ("TUNED_FP8", config.TUNED_FP8),
                                                          ("TUNED_VARLEN", config.TUNED_VARLEN))
             for key, switches in table.items() if set(PINS) & set(switches)}
    # ... and the e4m3 hd128 causal column-major walk, timed in check9/n2 (main's 8895ce9).
    # ... and bf16/fp16 hd256 causal lpt, timed in check9/n5 (long-ab), at 128 x 64 in check14/c1.
    assert named == {("TUNED_VARIANTS", ("dv128", 192, True, "lpt", None)),
                     ("TUNED_FP8", (128, True, "persistent", (128, 192), "colmajor")),
                     ("TUNED", (256, True, "lpt", None)), ("TUNED", (256, True, "lpt", (128, 64)))}
    shipped = FwdConfig(**SHIPPED)
    assert shipped.pin_loop_invariants and not shipped.pin_q_desc
    assert not FwdConfig(**dict(SHIPPED, head_dim_v=192)).pin_loop_invariants


def _loop_facts(cfg):
    from cubinforge.bench.loop_sass import loops
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant
    from cubinforge.generator.sass import cuobjdump, pv_wait_windows

    cubin = compile_variant(cfg).cubin
    res = cuobjdump(["-res-usage"], cubin)
    regs, local = int(re.search(r"REG:(\d+)", res)[1]), int(re.search(r"LOCAL:(\d+)", res)[1])
    # The last GEMM loop is the unmasked one (the masked blocks come first).
    return regs, local, loops(cuobjdump(["-sass"], cubin))[-1], pv_wait_windows(cubin)[-1]


@pytest.mark.slow
def test_pinning_shortens_the_loop_and_keeps_the_pv_wait_split():
    pytest.importorskip("cutlass")
    from cubinforge.generator.sass import find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip nvidia-cuda-cuobjdump)")
    base = experiment_config(ROWS[0][1])
    pin = experiment_config(dict(ROWS[0][1], pin_loop_invariants=True))
    (r0, l0, loop0, win0), (r1, l1, loop1, win1) = _loop_facts(base), _loop_facts(pin)
    assert r1 == r0 and l1 == l0 == 0, (r0, l0, r1, l1)
    assert loop0["gemm"] == loop1["gemm"] == 20
    # 516 -> 475 instructions a block when written (FA4: 489).
    assert loop1["insts"] <= loop0["insts"] - 30, (loop0, loop1)
    # The in-order sum's placement (all FFMAs before the PV wait) survives the pinning.
    assert win1["ffma_between"] == win0["ffma_between"] == 66, (win0, win1)
    assert win1["mufu_between"] >= win0["mufu_between"] - 2, (win0, win1)
