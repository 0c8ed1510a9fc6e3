"""bench.ab's `hd96` set (issue 10): its first row per mask is the build the default set ships
for hd96, and every other row is a candidate that says in its label what it changes."""

from __future__ import annotations

import re


def _rows():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    return [(label, experiment_config(o), ab_name(experiment_config(o), label)) for label, o in EXPERIMENTS["hd96"]]


def test_hd96_rows_start_from_the_shipped_builds():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    rows = _rows()
    names = [n for _, _, n in rows]
    assert len(set(names)) == len(names), names
    shipped = {c.causal: c for label, c, _ in rows if label in ("persistent+separate-o", "default")}
    # spec.SETS "default": hd96 non-causal persistent (config.TUNED: separate O), causal one tile per CTA.
    assert shipped[False] == FwdConfig(arch="sm_90a", dtype="bf16", head_dim=96, causal=False, scheduler="persistent")
    assert shipped[True] == FwdConfig(arch="sm_90a", dtype="bf16", head_dim=96, causal=True, scheduler="single")


def test_hd96_labels_name_tile_stages_and_schedule():
    rows = _rows()
    assert {c.head_dim for _, c, _ in rows} == {96}
    for label, c, _ in rows:
        tile = re.search(r"tile-(\d+)x(\d+)", label)
        assert (c.tile_m, c.tile_n) == (tuple(map(int, tile.groups())) if tile else (128, 128)), label
        assert c.stages == (3 if "stages-3" in label else 2), label
        assert c.in_order_row_sum == ("in-order-sum" in label), label
        assert c.q_double_buffer == ("q-double-buffer" in label), label
        assert c.chunked_p_convert == ("chunked-p" in label), label
        if c.causal:
            assert c.scheduler == {"lpt": "lpt", "persistent-lpt": "persistent", "default": "single"}[
                label.split("+")[0]], label
    # The wide causal tile takes the bit mask of one mask per 32 columns (mask.keep_count_chunks).
    assert any(c.causal and c.mask_bits and c.tile_n > 128 for _, c, _ in rows)
