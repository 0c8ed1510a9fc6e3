"""try_wait_first (issue 10, fp16 hd64): the key-block loop's K and V waits try once, and block
only where that failed. Nothing ships it yet; the A/B set that times it; and (slow) the SASS fact
it rests on: fp16 hd64's loop inlines the waits' retry without it, and has none with it."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def test_no_table_ships_it_and_it_is_off_by_default():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import config

    tables = [v for k, v in vars(config).items() if k.startswith("TUNED") and isinstance(v, dict)]
    assert len(tables) >= 5
    assert not [k for t in tables for k, sw in t.items() if sw.get("try_wait_first")]
    for dt in ("bf16", "fp16"):
        assert FwdConfig(arch="sm_90a", dtype=dt, head_dim=64, causal=True).try_wait_first is False


def test_try_wait_set_is_each_shipped_hd64_form_then_the_switch():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    rows = EXPERIMENTS["try-wait"]
    names = [ab_name(experiment_config(o), label) for label, o in rows]
    assert len(set(names)) == len(names) == 10, names
    for dt in ("bf16", "fp16"):
        for causal in (False, True):
            shipped = FwdConfig(arch="sm_90a", dtype=dt, head_dim=64, causal=causal, scheduler="persistent")
            form = [experiment_config(o) for _, o in rows if o["dtype"] == dt and o["causal"] == causal]
            assert form[0] == shipped  # the control is what ships, switch for switch
            assert [c.try_wait_first for c in form] == [False] + [True] * (len(form) - 1)
            assert [c.pin_loop_invariants for c in form[1:]] == ([False, True] if dt == "fp16" else [False])


def test_fp16_pin_set_is_each_shipped_fp16_non_causal_form_then_pinned():
    from cubinforge.bench.ab import EXPERIMENTS, experiment_config

    cfgs = [experiment_config(o) for _, o in EXPERIMENTS["fp16-pin"]]
    assert [(c.head_dim, c.pin_loop_invariants) for c in cfgs] == [(d, p) for d in (128, 192, 256) for p in (False, True)]
    for control in cfgs[::2]:
        assert control == FwdConfig(arch="sm_90a", dtype="fp16", head_dim=control.head_dim, causal=False,
                                    scheduler="persistent")


def _loop_ops(cfg) -> Counter:
    from loop_sass import cubin_and_metadata, loop_bodies

    from cubinforge.generator.sass import cuobjdump

    sass = cuobjdump(["-sass"], cubin_and_metadata("try-wait", cfg)[0])
    (_, body), = loop_bodies(sass)
    return Counter(op.split()[0] for op in body)


@pytest.mark.slow
def test_fp16_hd64_loop_inlines_the_retry_only_without_it():
    pytest.importorskip("cutlass")
    from cubinforge.bench.ab import experiment_config, shipped_overrides

    over = shipped_overrides("fp16", 64, 64, False, "persistent", None)
    plain, tried = _loop_ops(experiment_config(over)), _loop_ops(experiment_config(dict(over, try_wait_first=True)))
    assert plain["NANOSLEEP.SYNCS"] == 2 and tried["NANOSLEEP.SYNCS"] == 0
    assert tried["HGMMA.64x128x16.F32"] == plain["HGMMA.64x128x16.F32"] == 4
    assert sum(tried.values()) < sum(plain.values())
