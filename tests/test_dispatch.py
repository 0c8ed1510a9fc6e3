"""The dispatcher: exact axes are never substituted; among fitting variants the preferences
for the problem's sizes rank them, and the choice says why."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cubinforge.runtime.axes import form_axes
from cubinforge.runtime.dispatch import PREFERENCES, Preference, Problem, preference_table, rank


@dataclass
class V:
    variant: str
    axes: dict


def _fa3(name, **axes):
    base = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "varlen": False,
            "paged_kv": False, "pack_gqa": False, "split_kv": False, "scheduler": "single",
            "tile_m": 128, "tile_n": 128}
    return V(name, {**base, **axes})


CAUSAL = [_fa3("hd128-causal-lpt", scheduler="lpt"), _fa3("hd128-causal-persistent", scheduler="persistent"),
          _fa3("hd128-noncausal", causal=False), _fa3("hd64-causal-m128", head_dim=64, tile_m=128),
          _fa3("hd64-causal", head_dim=64, tile_m=192)]


def _problem(**kw):
    axes = {"arch": "sm_90a", "dtype": "bf16", "head_dim": kw.pop("head_dim", 128), "causal": kw.pop("causal", True)}
    return Problem("fa3_fwd", axes, **kw)


@pytest.mark.parametrize("hd,seqlen,want", [
    (128, 512, "hd128-causal-persistent"), (128, 3072, "hd128-causal-persistent"),
    (128, 3073, "hd128-causal-lpt"), (128, 16384, "hd128-causal-lpt"),
    (64, 512, "hd64-causal-m128"), (64, 1536, "hd64-causal-m128"), (64, 2048, "hd64-causal"),
])
def test_seqlen_picks_the_measured_winner(hd, seqlen, want):
    choice = rank(_problem(head_dim=hd, seqlen_q=seqlen, seqlen_k=seqlen), CAUSAL)
    assert choice.best.variant == want
    # The reasons name the rule that decided and the measurement behind it.
    assert any(("A/B" in r and "2026-12-01" in r) or "check13" in r for r in choice.reasons)
    assert len(choice.ranked) == 2


WIDE_CAUSAL = [_fa3("hd192-causal-lpt", head_dim=192, scheduler="lpt", tile_n=96),
               _fa3("hd192-causal-persistent-m128n64", head_dim=192, scheduler="persistent", tile_n=64),
               # a registry from before 2026-12-03 holds hd256's 128 x 80 form beside the 128 x 64 one
               _fa3("hd256-causal-lpt", head_dim=256, scheduler="lpt", tile_n=80),
               _fa3("hd256-causal-lpt-m128n64", head_dim=256, scheduler="lpt", tile_n=64)]


@pytest.mark.parametrize("hd,seqlen,want", [
    (192, 512, "hd192-causal-persistent-m128n64"), (192, 3072, "hd192-causal-persistent-m128n64"),
    (192, 3073, "hd192-causal-lpt"), (192, 16384, "hd192-causal-lpt"),
    (256, 512, "hd256-causal-lpt-m128n64"), (256, 16384, "hd256-causal-lpt-m128n64"),
    (256, None, "hd256-causal-lpt-m128n64"),
])
def test_hd192_and_hd256_causal_take_the_128x64_forms_where_they_won(hd, seqlen, want):
    choice = rank(_problem(head_dim=hd, seqlen_q=seqlen, seqlen_k=seqlen), WIDE_CAUSAL)
    assert choice.best.variant == want
    assert len(choice.ranked) == 2
    assert any("check14" in r for r in choice.reasons)


HD96 = [_fa3(f"hd96-{m}-{tm}", head_dim=96, causal=m == "causal", scheduler="persistent", tile_m=tm,
             tile_n=128 if m == "causal" else {128: 176, 192: 144}[tm])
        for m in ("causal", "noncausal") for tm in (128, 192)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen,tile_m", [(1, 128), (512, 128), (1536, 128), (1537, 192), (2048, 192), (16384, 192)])
def test_hd96_takes_the_192_row_p_smem_forms_from_1537_rows(causal, seqlen, tile_m):
    choice = rank(_problem(head_dim=96, causal=causal, seqlen_q=seqlen, seqlen_k=seqlen), HD96)
    assert choice.best.axes["tile_m"] == tile_m and choice.best.axes["causal"] == causal
    assert any("check10" in r for r in choice.reasons)


def test_exact_axes_are_never_substituted():
    assert rank(_problem(head_dim=96, seqlen_q=512), CAUSAL) is None
    # varlen was not asked for: a varlen variant does not fit the plain problem, and v.v.
    only_varlen = [_fa3("hd128-causal-varlen", varlen=True)]
    assert rank(_problem(seqlen_q=512), only_varlen) is None
    assert rank(Problem("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True,
                                    "varlen": True}), only_varlen).best.variant == "hd128-causal-varlen"
    # JSON's true is not 1.
    assert rank(Problem("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": 1}), CAUSAL) is None


def test_without_sizes_or_rules_the_first_name_wins_and_says_so():
    choice = rank(_problem(), CAUSAL)
    assert choice.best.variant == "hd128-causal-lpt"
    assert any("no preference applies" in r for r in choice.reasons)
    one = rank(_problem(causal=False, seqlen_q=512), CAUSAL)
    assert one.best.variant == "hd128-noncausal" and len(one.ranked) == 1


def test_an_earlier_rule_outweighs_later_ones():
    prefs = (Preference("a", {"seqlen_q": (None, 100)}, {"scheduler": "persistent"}, "first"),
             Preference("b", {"seqlen_q": (None, 100)}, {"scheduler": "lpt"}, "second"))
    assert rank(_problem(seqlen_q=50), CAUSAL, preferences=prefs).best.variant == "hd128-causal-persistent"
    assert rank(_problem(seqlen_q=500), CAUSAL, preferences=prefs).best.variant == "hd128-causal-lpt"


def test_a_rule_no_variant_meets_is_reported():
    prefs = (Preference("tiny", {"seqlen_q": (None, 100)}, {"tile_m": 64}, "why"),)
    choice = rank(_problem(seqlen_q=50), CAUSAL, preferences=prefs)
    assert any("tiny" in r and "no fitting variant has it" in r for r in choice.reasons)


def test_preference_table_is_plain_data():
    import json

    rows = preference_table()
    assert len(rows) == len(PREFERENCES)
    json.dumps(rows)
    short = next(r for r in rows if r["name"] == "hd128-causal-short")
    assert {"key": "seqlen_q", "low": None, "high": 3072} in short["when"]
    assert short["prefer"] == {"scheduler": "persistent"}


def test_every_preferred_value_exists_in_the_default_set():
    """A rule that prefers a variant the default set does not build would never apply."""
    from cubinforge.generator.spec import expand_set

    default = expand_set("default")
    for p in PREFERENCES:
        # (plain problems: the varlen variants serve flash_attn_varlen_func, not these rules)
        fits = [v for v in default if v.family == p.when.get("family", v.family) and not v.axes.get("varlen")
                and all(v.axes.get(k) == c for k, c in p.when.items() if k in v.axes and not isinstance(c, tuple))
                and all(v.axes.get(k) == x for k, x in p.prefer.items())
                # a model variant (a sink's own lpt build) serves only its own queries
                and not any(v.axes.get(a) for a in ("softcap", "local", "learnable_sink"))]
        dtypes = sorted(v.axes["dtype"] for v in fits)
        if set(p.prefer) & form_axes():
            # The dense decode forms are built for bf16 and fp16 (the paged ones bf16 only).
            assert {"bf16", "fp16"} <= set(dtypes), (p.name, [v.name for v in fits])
        else:
            # (a rule over both masks, as hd96's, fits one variant per mask and dtype)
            assert sorted(set(dtypes)) in (["bf16", "fp16"], ["bf16", "e4m3", "fp16"]), (p.name, [v.name for v in fits])


def test_select_and_explain_use_the_dispatcher(tmp_path, capsys):
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_runtime_fixtures import manifest, write_registry

    from cubinforge.cli import main
    from cubinforge.runtime import VariantNotFound
    from cubinforge.runtime.registry_source import LocalSource, select

    home = write_registry(tmp_path / "home", [
        manifest(causal=True, variant="fa3_fwd-sm_90a-bf16-hd128-causal-lpt", scheduler="lpt"),
        manifest(causal=True, variant="fa3_fwd-sm_90a-bf16-hd128-causal-persistent", scheduler="persistent"),
    ])
    src = LocalSource(home)
    axes = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True}
    assert select("fa3_fwd", axes, src, sizes={"seqlen_q": 512}).variant.endswith("-persistent")
    assert select("fa3_fwd", axes, src, sizes={"seqlen_q": 4096}).variant.endswith("-lpt")
    with pytest.raises(VariantNotFound, match="No fa3_fwd variant has head_dim=96"):
        select("fa3_fwd", {**axes, "head_dim": 96}, src)

    assert main(["--home", str(home), "explain", "--head-dim", "128", "--causal", "1", "--seqlen-q", "512",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["variant"] == "fa3_fwd-sm_90a-bf16-hd128-causal-persistent"
    assert any(r.startswith("hd128-causal-short") for r in out["reasons"])
    assert [r["variant"] for r in out["ranked"]][1] == "fa3_fwd-sm_90a-bf16-hd128-causal-lpt"
    assert main(["--home", str(home), "explain", "--head-dim", "96"]) == 1
    assert "nearest" in capsys.readouterr().err.lower()


DECODE = [_fa3("hd128-causal-persistent", scheduler="persistent"), _fa3("hd128-causal-lpt", scheduler="lpt"),
          _fa3("hd128-causal-packgqa-m64n128", pack_gqa=True, tile_m=64),
          _fa3("hd128-causal-packgqa-splitkv-m64n128", pack_gqa=True, split_kv=True, tile_m=64)]
# The bench's --decode cells at hd128 (16 heads, batch * seqlen_k = 128k) on an H200's 132 SMs.
DECODE_SIZES = dict(heads_q=16, heads_kv=16, sm_count=132)


@pytest.mark.parametrize("sq", [1, 16, 64])
def test_decode_shapes_that_underfill_the_sms_route_to_the_split_forms(sq):
    choice = rank(_problem(batch=4, seqlen_q=sq, seqlen_k=32768, **DECODE_SIZES), DECODE)
    assert choice.best.variant == "hd128-causal-packgqa-splitkv-m64n128"
    assert choice.params == {"num_splits": 2}
    assert any("decode-split-kv" in r and "inference.log" in r for r in choice.reasons)
    assert any("launch with num_splits=2" in r for r in choice.reasons)
    assert any("pack_gqa, split_kv not asked for" in r for r in choice.reasons)


@pytest.mark.parametrize("sq", [1, 16])
def test_mha_decode_that_fills_the_sms_takes_the_unsplit_decode_form(sq):
    # 256 tiles fill the SMs: no split, but the 64-row form (decode-pack-hd128), not the plain kernel.
    choice = rank(_problem(batch=16, seqlen_q=sq, seqlen_k=8192, **DECODE_SIZES), DECODE)
    assert choice.best.variant == "hd128-causal-packgqa-m64n128" and choice.params == {}
    assert any(r.startswith("decode-pack-hd128") for r in choice.reasons)


@pytest.mark.parametrize("sizes", [
    dict(batch=16, seqlen_q=64, seqlen_k=8192, **DECODE_SIZES),      # 64 query tokens: the plain kernel leads
    dict(batch=4, seqlen_q=128, seqlen_k=32768, **DECODE_SIZES),     # not decode-shaped
    dict(batch=4, seqlen_q=1, seqlen_k=32768, heads_q=16, heads_kv=16),  # SM count unknown
])
def test_other_shapes_keep_the_plain_kernel(sizes):
    choice = rank(_problem(**sizes), DECODE)
    assert not choice.best.axes["split_kv"] and not choice.best.axes["pack_gqa"]
    assert choice.params == {}


def test_a_form_axis_asked_for_is_never_moved():
    p = Problem("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "split_kv": False},
                batch=4, seqlen_q=1, seqlen_k=32768, **DECODE_SIZES)
    assert not rank(p, DECODE).best.axes["split_kv"]
    # Only form axes move: a paged form never serves a dense problem.
    paged = [_fa3("paged-splitkv", paged_kv=True, pack_gqa=True, split_kv=True, tile_m=64)]
    assert rank(_problem(batch=4, seqlen_q=1, seqlen_k=32768, **DECODE_SIZES), paged) is None


def test_decode_rule_falls_back_to_the_plain_kernel():
    # A registry without the decode forms: the rule applies, says so, and the plain kernel serves.
    choice = rank(_problem(batch=4, seqlen_q=1, seqlen_k=32768, **DECODE_SIZES), DECODE[:2])
    assert choice.best.variant == "hd128-causal-persistent" and choice.params == {}
    assert any("decode-split-kv" in r and "no fitting variant has it" in r for r in choice.reasons)


def test_a_rule_that_needs_the_sm_count_says_so():
    choice = rank(_problem(batch=4, seqlen_q=1, seqlen_k=32768, heads_q=16, heads_kv=16), DECODE)
    assert any(r.startswith("decode-split-kv: not decided: decode_splits needs sm_count") for r in choice.reasons)
    # Prefill shapes do not mention it.
    choice = rank(_problem(batch=4, seqlen_q=4096, seqlen_k=4096), DECODE)
    assert not any("decode-split-kv" in r for r in choice.reasons)


DECODE_HD64 = [_fa3("hd64-causal-persistent", head_dim=64, scheduler="persistent"),
               _fa3("hd64-causal-packgqa-m64n128", head_dim=64, pack_gqa=True, tile_m=64),
               _fa3("hd64-causal-packgqa-splitkv-m64n128", head_dim=64, pack_gqa=True, split_kv=True, tile_m=64)]


@pytest.mark.parametrize("sq", [1, 16, 64])
def test_hd64_decode_that_fills_the_sms_takes_the_unsplit_pack_form(sq):
    # The --decode cells at hd64 (32 heads) and 8k keys: 512 tiles, one split; the 64-row
    # form instead of the 192-row plain kernel.
    p = Problem("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 64, "causal": True},
                batch=16, seqlen_q=sq, seqlen_k=8192, heads_q=32, heads_kv=32, sm_count=132)
    choice = rank(p, DECODE_HD64)
    assert choice.best.variant == "hd64-causal-packgqa-m64n128" and choice.params == {}
    assert any(r.startswith("decode-pack-hd64: prefer") for r in choice.reasons)
    # Under-filled (4 x 32 heads at 32k keys is 128 tiles on 132 SMs: still one split; 2 x 32
    # is 64 tiles): the split rule comes first.
    p2 = Problem("fa3_fwd", p.axes, batch=2, seqlen_q=sq, seqlen_k=32768, heads_q=32, heads_kv=32, sm_count=132)
    assert rank(p2, DECODE_HD64).best.variant == "hd64-causal-packgqa-splitkv-m64n128"
    # Prefill keeps the plain kernel.
    p3 = Problem("fa3_fwd", p.axes, batch=16, seqlen_q=1024, seqlen_k=1024, heads_q=32, heads_kv=32, sm_count=132)
    assert rank(p3, DECODE_HD64).best.variant == "hd64-causal-persistent"


@pytest.mark.parametrize("sq,hq", [(4, 32), (1, 64), (64, 32)])
def test_gqa_decode_that_fills_the_sms_takes_the_unsplit_pack_form(sq, hq):
    # inference.py's spec / GQA decode shapes through flash_attn_func: b32 x 8192 keys, 8 KV
    # heads. One split fills the SMs, but the plain kernel streams each KV head once per query
    # head (0.34 / 0.17 of FA4 on the H200); the pack-GQA form streams it once.
    choice = rank(_problem(batch=32, seqlen_q=sq, seqlen_k=8192, heads_q=hq, heads_kv=8, sm_count=132), DECODE)
    assert choice.best.variant == "hd128-causal-packgqa-m64n128" and choice.params == {}
    assert any(r.startswith("decode-pack-gqa: prefer") and "decode-ab.log" in r for r in choice.reasons)
    # MHA with 64 query tokens, and GQA prefill, keep the plain kernel (MHA with 1-16 tokens:
    # test_mha_decode_that_fills_the_sms_takes_the_unsplit_decode_form).
    for sizes in (dict(seqlen_q=64, heads_q=8), dict(seqlen_q=1024, heads_q=hq)):
        p = _problem(batch=32, seqlen_k=8192, heads_kv=8, sm_count=132, **sizes)
        assert not rank(p, DECODE).best.axes["pack_gqa"], sizes
    # Heads that do not divide: no group, no rule (the runtime refuses such a call anyway).
    p = _problem(batch=32, seqlen_q=sq, seqlen_k=8192, heads_q=hq + 1, heads_kv=8, sm_count=132)
    assert not any(r.startswith("decode-pack-gqa: prefer") for r in rank(p, DECODE).reasons)
