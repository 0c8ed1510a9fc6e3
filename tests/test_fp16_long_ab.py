"""bench.ab's `fp16-long` set (issue 10's fp16 long cells, check10/p3): every row is a shipped
16-bit form with the switches its label names; the two fp16 controls and their bf16 twins are
the shipped configurations exactly, so the A/B's first row of each group is what ships; the
A/B gate and timing run each row in its own dtype."""

from __future__ import annotations

from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import SWITCHES

ROWS = EXPERIMENTS["fp16-long"]
FIELDS = (*SWITCHES, "stages", "tile_m", "tile_n", "pingpong", "scheduler")


def shipped(cfg):
    return FwdConfig(arch="sm_90a", dtype=cfg.dtype, head_dim=cfg.head_dim, causal=cfg.causal,
                     scheduler=cfg.scheduler)


def test_names_are_unique_and_carry_their_dtype():
    cfgs = [(experiment_config(o), label) for label, o in ROWS]
    names = [ab_name(c, label) for c, label in cfgs]
    assert len(set(names)) == len(names), names
    assert {c.dtype for c, _ in cfgs} == {"fp16", "bf16"}
    assert all(f"-{c.dtype}-" in n for (c, _), n in zip(cfgs, names))


# What check10 promoted from this set (config.TUNED_FP16), per (dtype, head dim): that row ships
# now; the group's first row was the shipped form when the set was timed.
PROMOTED = {("fp16", 128): "persistent+separate-o+in-order-sum"}


def test_each_groups_control_and_the_bf16_twins_are_the_shipped_forms():
    firsts, by_label = {}, {}
    for label, over in ROWS:
        cfg = experiment_config(over)
        firsts.setdefault((cfg.dtype, cfg.head_dim), cfg)
        by_label[(cfg.dtype, cfg.head_dim, label)] = cfg
    assert set(firsts) == {("fp16", 64), ("fp16", 128), ("bf16", 64), ("bf16", 128)}
    for group, first in firsts.items():
        cfg = by_label[(*group, PROMOTED[group])] if group in PROMOTED else first
        ship = shipped(cfg)
        assert {f: getattr(cfg, f) for f in FIELDS} == {f: getattr(ship, f) for f in FIELDS}, group


def test_every_other_row_differs_from_its_control_by_its_label_only():
    knobs = {"q_double_buffer": "q-double-buffer", "in_order_row_sum": "in-order-sum", "deferred_o_store": "deferred-o",
             "pin_loop_invariants": "pin", "fast_divmod": "fast-divmod"}
    for label, over in ROWS:
        cfg = experiment_config(over)
        on = {f for f in SWITCHES if getattr(cfg, f)}
        named = {f for f, token in knobs.items() if token in label.split("+")}
        assert on & set(knobs) == named, (label, on)
