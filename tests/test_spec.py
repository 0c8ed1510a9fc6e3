"""The variant space: set sizes, canonical names, filters, and clear errors for bad combinations."""

import re

import pytest

from cubinforge.generator import spec
from cubinforge.generator.spec import SpecError, make_variant, parse_name, select


def test_set_sizes():
    assert [v.name for v in select("smoke")] == ["fa3-fwd-sm_90a-bf16-hd128-noncausal-persistent"]
    # dense: 2 dtypes x (5 non-causal + 8 causal, short-causal ones included (hd192's 128 x 64
    # persistent form, check14), + hd96's two 192-row p_smem forms for 1,537 rows and up,
    # check10); decode
    # (issue 11): 8 bf16 hd128 forms, 2 combines, 2 appends, 1 gather; four model variants
    # (hd128 softcap causal, hd128 local, hd192/dv128 causal, hd128 causal sink); e4m3 x 3
    # head dims x causal/non-causal, and the quantiser (bf16/fp16 x 3 head dims); varlen: bf16/fp16
    # x hd64/128 x causal/non-causal packed, and bf16 hd128 paged causal/non-causal; e4m3 paged
    # decode (issue 13): hd128 causal pack-GQA, split and unsplit; the dense decode forms of the
    # other head dims and fp16 (2 dtypes x 3 head dims x causal/non x split/unsplit, less bf16
    # hd128's 4 above) and the hd64/hd256 combines of both dtypes; the model variants' inference
    # forms (issue 12): 5 forward forms (their 2 combines, bf16 hd64/hd256, are the decode forms'
    # above: expand_set keeps one variant per name, so they count once); packed varlen at (192, 128)
    # and hd256, bf16 and fp16, both masks (spec.VARLEN_WIDE)
    assert len(select("default")) == (2 * (5 + 8 + 2) + 8 + 2 + 2 + 1 + 4 + 3 * 2 + 2 * 3 + 2 * 2 * 2 + 2 + 2
                                      + (2 * 3 * 2 * 2 - 4) + 2 * 2 + 5 + 2 * 2 * 2)
    assert len(select("demo")) == 4
    # test/demo families stay out of `all`
    assert {v.family for v in select("all")} == {"fa3_fwd", "fa4_fwd", "attn_combine", "kv_append", "kv_gather",
                                                 "fp8_quant"}
    sm100 = select("sm100")
    assert len(sm100) == 2 * 2 * 2 and {v.arch for v in sm100} == {"sm_100a"} and {v.family for v in sm100} == {"fa4_fwd"}
    assert "fa4-fwd-sm_100a-bf16-hd128-causal" in [v.name for v in sm100]
    assert not any(v.arch == "sm_100a" for v in select("default"))  # the GPU sweep's set stays SM90


def test_sm100_family_says_what_it_cannot_build():
    with pytest.raises(SpecError, match="fa4_fwd cannot build head_dim=256: head_dim 256 is not built for sm_100a"):
        make_variant("fa4_fwd", arch="sm100", dtype="bf16", head_dim=256, causal=False)
    with pytest.raises(SpecError, match="fa4_fwd cannot build arch=sm_90a: fa4_fwd is SM100 only"):
        make_variant("fa4_fwd", arch="sm90", dtype="bf16", head_dim=128, causal=False)
    with pytest.raises(SpecError, match="sm_100a is built by fa4_fwd"):
        make_variant("fa3_fwd", arch="sm100", dtype="bf16", head_dim=128, causal=False)


def test_default_set_is_sm90_bf16_fp16_all_head_dims_both_causal():
    vs = [v for v in select("default") if v.family == "fa3_fwd" and not v["pack_gqa"]]
    assert {v.arch for v in vs} == {"sm_90a"}
    assert {v["dtype"] for v in vs} == {"bf16", "fp16", "e4m3"}  # e4m3: hd64/128/256 (issue 13)
    assert {v["head_dim"] for v in vs} == {64, 96, 128, 192, 256}
    assert {v["causal"] for v in vs} == {True, False}


def test_names_unique_stable_and_parseable():
    names = [v.name for s in spec.SETS for v in spec.expand_set(s)]
    for name in names:
        assert parse_name(name).name == name
    default = [v.name for v in select("default")]
    assert len(set(default)) == len(default)
    assert "fa3-fwd-sm_90a-bf16-hd128-causal-lpt" in default
    assert "fa3-fwd-sm_90a-fp16-hd64-noncausal-persistent" in default
    assert default == [v.name for v in select("default")]  # same order every time
    assert [n for n in default if n.startswith("fa3")][0] == "fa3-fwd-sm_90a-bf16-hd64-noncausal-persistent"


def test_non_default_axes_append_tokens():
    v = make_variant("fa3_fwd", arch="sm90", dtype="bf16", head_dim=128, causal=True, tile_n=176 // 16 * 16)
    assert v.name == "fa3-fwd-sm_90a-bf16-hd128-causal-m128n176"
    assert parse_name(v.name) == v
    default_tile = make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False)
    assert default_tile.axes["tile_m"] == 128 and default_tile.axes["tile_n"] == 128
    assert default_tile.axes["varlen"] is False and default_tile.axes["scheduler"] == "single"


def test_filters_accept_comma_lists_and_cli_spellings():
    vs = select("default", {"dtype": "bf16", "head_dim": "64,128", "causal": "1", "arch": "sm90", "pack_gqa": "0", "softcap": "0",
                                  "learnable_sink": "0", "varlen": "0"},
                families=["fa3_fwd"])
    assert [v.name for v in vs] == ["fa3-fwd-sm_90a-bf16-hd64-causal-persistent-m128n128",
                                    "fa3-fwd-sm_90a-bf16-hd64-causal-persistent",
                                    "fa3-fwd-sm_90a-bf16-hd128-causal-persistent", "fa3-fwd-sm_90a-bf16-hd128-causal-lpt"]
    # bf16/fp16 x (5 head dims + hd96's 192 x 144 form), and e4m3 x 3
    assert len(select("default", {"causal": ["0"], "pack_gqa": ["0"], "local": ["0"], "varlen": ["0"]}, families=["fa3_fwd"])) == 12 + 3


@pytest.mark.parametrize("text,arch", [("sm90", "sm_90a"), ("sm_90a", "sm_90a"), ("90", "sm_90a"), ("sm100", "sm_100a")])
def test_arch_spellings(text, arch):
    assert spec.normalize_arch(text) == arch


@pytest.mark.parametrize(
    "axes,message",
    [
        ({"dtype": "e4m3", "head_dim": 96}, "dtype=e4m3 is built for head_dim 64, 128 and 256"),
        ({"arch": "sm_100a"}, "SM90 (wgmma) only"),
        ({"head_dim": 80}, "unknown head_dim 80"),
        ({"dtype": "bf17"}, "unknown dtype bf17"),
        ({"varlen": True, "split_kv": True}, "varlen runs one tile per CTA"),
        ({"flavour": "x"}, "has no axis flavour"),
    ],
)
def test_bad_combinations_are_rejected_with_reasons(axes, message):
    base = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": False}
    with pytest.raises(SpecError, match=re.escape(message)):
        make_variant("fa3_fwd", **{**base, **axes})


def test_empty_selection_explains_why():
    with pytest.raises(SpecError, match="no variant of set 'default' matches dtype=e4m3 head_dim=96.*power-of-two"):
        select("default", {"dtype": "e4m3", "head_dim": "96"})
    with pytest.raises(SpecError, match="unknown set"):
        select("nope")


def test_parse_name_rejects_non_canonical():
    with pytest.raises(SpecError):
        parse_name("fa3-fwd-sm_90a-bf16-hd128-causal-m128n128")  # default tile is not written
    with pytest.raises(SpecError):
        parse_name("fa4-fwd-sm_90a-bf16-hd128-causal")


def test_lpt_scheduler_is_a_causal_axis_value():
    from cubinforge.generator.spec import SpecError, expand_set, make_variant, parse_name

    v = make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=True, scheduler="lpt")
    assert v.name == "fa3-fwd-sm_90a-bf16-hd128-causal-lpt"
    assert parse_name(v.name) == v
    with pytest.raises(SpecError, match="scheduler=lpt orders causal tiles"):
        make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, scheduler="lpt")
    names = {x.name for x in expand_set("all")}
    assert "fa3-fwd-sm_90a-fp16-hd64-causal-lpt" in names
    assert not any(n.endswith("noncausal-lpt") for n in names)
    # Shipped where the H200 A/B measured it ahead (spec.SETS "default" says where).
    default_lpt = {(x.axes["head_dim"], x.axes["dtype"]) for x in expand_set("default")
                   if x.axes.get("scheduler") == "lpt"}
    assert default_lpt == {(hd, dt) for hd in (128, 192, 256) for dt in ("bf16", "fp16")} | {(256, "e4m3")}


def test_a_set_entry_that_makes_no_variant_is_an_error(monkeypatch):
    # Until 2026-12-04 such an entry was dropped without a word (the paged and windowed varlen
    # forms on the persistent walk vanished from the default set when a constraint refused them).
    monkeypatch.setitem(spec.SETS, "broken", [
        ("fa3_fwd", {"arch": ["sm_90a"], "dtype": ["bf16"], "head_dim": [128], "causal": [True], "local": [True]})])
    with pytest.raises(SpecError, match=r"set 'broken': the entry fa3_fwd .* makes no variant: .*local=1"):
        spec.expand_set("broken")


def test_the_varlen_walk_takes_paged_and_the_model_variants():
    for axes in (dict(paged_kv=True), dict(local=True), dict(softcap=True, causal=True),
                 dict(learnable_sink=True, causal=True), dict(paged_kv=True, local=True),
                 dict(paged_kv=True, softcap=True, causal=True)):
        v = make_variant("fa3_fwd", **{"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": False,
                                       "varlen": True, "scheduler": "persistent", **axes})
        assert v.name.endswith("-persistent")
    with pytest.raises(SpecError, match="split_kv, pack_gqa .* run one tile per CTA"):
        make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True,
                     paged_kv=True, split_kv=True, scheduler="persistent")
    with pytest.raises(SpecError, match="paged decode .* scheduler=single"):
        make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False, paged_kv=True,
                     scheduler="persistent")
