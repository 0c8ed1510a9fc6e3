"""The local build starts the long compiles first, so the pool does not end on one alone."""

from cubinforge.generator import build, spec


def test_longest_first_puts_the_big_family_first_and_keeps_set_order_within_it():
    variants = spec.select("default")
    pending = [build._Pending(v, None, "", None) for v in variants]
    ordered = [p.variant.name for p in build._longest_first(pending)]
    fa3 = [v.name for v in variants if v.family == "fa3_fwd"]
    assert sorted(ordered) == sorted(v.name for v in variants)  # nothing dropped or repeated
    assert ordered[: len(fa3)] == fa3  # FA3 first, in the set's own order
    small = {v.family for v in variants} - {"fa3_fwd"}
    assert small and {n.split("-sm_")[0] for n in ordered[len(fa3):]} == {f.replace("_", "-") for f in small}
