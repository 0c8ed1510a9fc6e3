"""bench.ab's `short-causal-stages` set (issue 10): the short-causal forms the dispatcher serves,
and those forms with a third K/V stage where it fits (cuDNN's hd128 causal kernel holds Q and
three K/V stages, O out through Q's buffer)."""

from __future__ import annotations

import pytest

from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import SMEM_LIMIT, default_tile

ROWS = EXPERIMENTS["short-causal-stages"]
BF16 = dict(arch="sm_90a", dtype="bf16")


def test_rows_are_causal_named_apart_and_label_what_is_on():
    names = [ab_name(experiment_config(o), label) for label, o in ROWS]
    assert len(set(names)) == len(names), names
    assert 8 <= len(ROWS) <= 12  # one short device call
    for label, o in ROWS:
        cfg = experiment_config(o)
        assert cfg.causal, label
        assert cfg.stages == (3 if "stages-3" in label else 2), label
        assert cfg.in_order_row_sum == ("in-order-sum" in label), label
        assert cfg.chunked_p_convert == ("chunked-p" in label), label
        sched = {"persistent-lpt": "persistent", "lpt": "lpt", "default": "single"}[label.split("+")[0]]
        assert cfg.scheduler == sched, label
        assert ("tile-" in label) == ((cfg.tile_m, cfg.tile_n) != default_tile(cfg.head_dim)), label
        assert cfg.smem_bytes <= SMEM_LIMIT


def test_the_shipped_short_forms_are_the_baselines():
    """hd128 causal up to 768 rows ships persistent + separate O (TUNED); hd96 causal ships one
    tile per CTA with every switch off. Their rows here are those exact builds."""
    shipped = {(128, "persistent"), (96, "single")}
    found = set()
    for label, o in ROWS:
        cfg = experiment_config(o)
        if "stages-3" in label or (cfg.head_dim, cfg.scheduler) not in shipped:
            continue
        # As shipped when the set ran: check9/n4 promoted the per-warp O store since, check13 the
        # sectioned causal walk.
        assert cfg == FwdConfig(**BF16, head_dim=cfg.head_dim, causal=True, scheduler=cfg.scheduler,
                                warp_o_store=False, causal_order="all"), label
        found.add((cfg.head_dim, cfg.scheduler))
    assert found == shipped
    assert {experiment_config(o).head_dim for _, o in ROWS} == {96, 128, 192, 256}


def test_hd128_third_stage_takes_the_separate_o_buffers_room():
    """Q + three K/V stages, no O buffer: the layout cuDNN's 232,448 B suggests."""
    for label, o in ROWS:
        cfg = experiment_config(o)
        if cfg.head_dim == 128 and "stages-3" in label:
            assert not cfg.separate_o_smem, label
            assert cfg.smem_bytes == 128 * 128 * 2 + 3 * 128 * 256 * 2


@pytest.mark.parametrize("hd", [192, 256])
def test_wide_head_dims_have_no_room_for_a_third_stage_or_an_o_buffer(hd):
    """Why the hd192/256 rows take other candidates (the set's comment)."""
    with pytest.raises(ValueError, match="shared memory"):
        FwdConfig(**BF16, head_dim=hd, causal=True, scheduler="persistent", stages=3)
    with pytest.raises(ValueError, match="shared memory"):
        FwdConfig(**BF16, head_dim=hd, causal=True, scheduler="persistent", separate_o_smem=True)
