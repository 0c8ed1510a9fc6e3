"""bench.ab's experiment sets are records of what ran: within a set every row is a build of
its own. A row built on the shipped switches (ab._shipped) must not turn into its neighbour
when TUNED later promotes that neighbour's switch (check14: hd192 lpt's control had become the
+lazy-rescale row it was timed against)."""

from __future__ import annotations

import pytest

from cubinforge.bench.ab import EXPERIMENTS, experiment_config


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_row_of_a_set_is_a_build_of_its_own(name):
    configs = [repr(experiment_config(over)) for _, over in EXPERIMENTS[name]]
    assert len(set(configs)) == len(configs), name


def test_long_lazy_control_is_the_form_it_was_timed_against():
    (label, control), (_, lazy) = EXPERIMENTS["long-lazy"][:2]
    assert label == "lpt+chunked-p-convert+mask-bits"
    assert experiment_config(control).rescale_threshold == 0.0
    assert experiment_config(lazy).rescale_threshold == 8.0
