"""e4m3 block descales (issue 13; FwdConfig.descale_block): q/k descales per block of tokens,
as quantize_fp8(x, block=) makes them. On the CPU: the variants SET=fp8 builds (and no other
set), the config's and the spec's refusals, the contract (q_descale / k_descale tensors and
their block checks), the dispatch (the block variant only when block descales are passed),
flash_attn_func's checks before any launch, and (with the DSL) SASS: QGMMA, no spills."""

import pytest
from conftest import module_available
from test_runtime_fixtures import built_records, e4m3_colmajor_arrays

from cubinforge.generator import spec
from cubinforge.runtime import InputError, flash_attn_func
from cubinforge.runtime.arrays import DeviceArray

DSL = module_available("cutlass")
BLOCK_NAMES = {
    "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor-blockq128k192-persistent-m128n192",
    "fa3-fwd-sm_90a-e4m3-hd128-causal-colmajor-blockq128k192-persistent-m128n192",
    "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor-blockq128k128-persistent",
}


def _blocks(set_name):
    return {v.name for v in spec.expand_set(set_name) if v.axes.get("descale_block", "head") != "head"}


def test_block_variants_are_in_the_fp8_set_only():
    assert _blocks("fp8") == BLOCK_NAMES
    for other in ("default", "inference", "variants"):
        assert not _blocks(other)
    for name in BLOCK_NAMES:
        v = spec.parse_name(name)
        assert v.name == name and v.axes["dtype"] == "e4m3"
    # The per-head names stay as they were: the axis's default is left out of them.
    names = {v.name for v in spec.expand_set("default")}
    assert "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor-persistent-m128n192" in names
    assert not any("head" in n.split("-") for n in names)


def test_rendered_config_of_existing_variants_has_no_descale_block():
    """With the axis at its default, CONFIG is what it was: the traced kernel is the same."""
    from cubinforge.generator.render import render
    for v in spec.expand_set("fp8") + spec.select("default", {"dtype": ["e4m3"]}, families=["fa3_fwd"]):
        text = render(v).text
        assert ("descale_block=" in text) == (v.name in BLOCK_NAMES), v.name


@pytest.mark.parametrize("axes, message", [
    ({"dtype": "bf16", "descale_block": "blockq128k128"}, "dense e4m3 forward"),
    ({"dtype": "e4m3", "v_layout": "colmajor", "descale_block": "blockq128k128", "tile_m": 128, "tile_n": 192},
     "multiple of tile_n"),
    ({"dtype": "e4m3", "descale_block": "blockq128k128", "pack_gqa": True, "tile_m": 64}, "dense e4m3 forward"),
])
def test_unbuilt_block_combinations_are_refused(axes, message):
    with pytest.raises(spec.SpecError, match=message):
        spec.make_variant("fa3_fwd", arch="sm_90a", head_dim=128, causal=False, **axes)


def test_fwd_config_checks_the_blocks():
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import DESCALE_BLOCKS, FwdConfig
    from cubinforge.runtime.axes import AXES
    # One home each: the runtime's axis values are the config's forms plus "head".
    assert set(AXES["descale_block"].values) == {"head", *DESCALE_BLOCKS}
    base = dict(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, v_layout="colmajor", scheduler="persistent")
    cfg = FwdConfig(**base, tile_m=128, tile_n=192, descale_block="blockq128k192")
    assert cfg.descale_blocks == (128, 192)
    # It takes the shipped form's switches (TUNED_FP8 keys ignore the axis).
    plain = FwdConfig(**base, tile_m=128, tile_n=192)
    assert (cfg.rescale_threshold, cfg.fp8_p_pair_shuffle, cfg.in_order_row_sum) == \
        (plain.rescale_threshold, plain.fp8_p_pair_shuffle, plain.in_order_row_sum) == (8.0, True, True)
    assert plain.descale_blocks == (0, 0)
    with pytest.raises(ValueError, match=r"k block \(128\) must be a multiple of tile_n \(192\)"):
        FwdConfig(**base, tile_m=128, tile_n=192, descale_block="blockq128k128")
    with pytest.raises(ValueError, match="dense e4m3 forward only"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, descale_block="blockq128k128")
    with pytest.raises(ValueError, match="must be 'head' or one of"):
        FwdConfig(**base, descale_block="blockq100k128")


def _contract(name):
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import family_contract
    v = spec.parse_name(name)
    ax = v.axes
    cfg = FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=ax["causal"], v_layout="colmajor",
                    scheduler="persistent", tile_m=ax["tile_m"], tile_n=ax["tile_n"],
                    descale_block=ax["descale_block"])
    boxes = {"q": (128, 128), "k": (128, ax["tile_n"]), "v": (ax["tile_n"], 128), "o": (64, 128)}
    return family_contract(cfg, boxes, {"q": 128, "k": 128, "v": 64, "o": 128})


def _arrays(b, sq, sk, hq, hkv, nq, nk):
    return {**e4m3_colmajor_arrays(b, sq, sk, hq, hkv),
            "q_descale": DeviceArray(0x70000, (b, hq, nq), None, "f32", 0),
            "k_descale": DeviceArray(0x80000, (b, hkv, nk), None, "f32", 0)}


def test_contract_takes_block_descales_and_checks_their_blocks():
    from cubinforge.runtime import bind, load_contract
    raw = _contract("fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor-blockq128k192-persistent-m128n192")
    assert raw["tensors"]["q_descale"]["dims"] == ["batch", "heads_q", "q_descale_blocks"]
    assert raw["tensors"]["k_descale"]["dims"] == ["batch", "heads_kv", "k_descale_blocks"]
    by_name = {p["name"]: p for p in raw["params"]}
    # After mDescale, in the kernel's order, each (ptr, 3 x i32 shapes, 2 x i64 strides): 40 B.
    names = [p["name"] for p in raw["params"]]
    assert names[-3:] == ["descale", "q_descale", "k_descale"]
    assert by_name["q_descale"]["size"] == by_name["k_descale"]["size"] == 40
    assert by_name["k_descale"]["offset"] == by_name["q_descale"]["offset"] + 40
    from cubinforge.runtime.contract import CONTRACT_VERSION
    contract = load_contract({"contract_version": CONTRACT_VERSION, "variant": "x", "arch": "sm_90a", "entry": "k",
                              "block": [384, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": 1,
                              "static_smem_bytes": 0, **raw})
    b, sq, sk, hq, hkv = 2, 300, 333, 4, 2
    arrays = _arrays(b, sq, sk, hq, hkv, -(-sq // 128), -(-sk // 192))
    bind(contract, arrays, {}, {"sm_count": 132})
    with pytest.raises(InputError, match=r"k_descale must be \(batch, heads_kv, ceil\(seqlen_k / 192\)\)"):
        bind(contract, {**arrays, **_arrays(b, sq, sk, hq, hkv, 3, 3)}, {}, {"sm_count": 132})
    with pytest.raises(InputError, match=r"q_descale must be \(batch, heads_q, ceil\(seqlen_q / 128\)\)"):
        bind(contract, {**arrays, **_arrays(b, sq, sk, hq, hkv, 2, 2)}, {}, {"sm_count": 132})
    # The per-head form's contract is as before: no block tensors.
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import family_contract
    plain = family_contract(FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, v_layout="colmajor",
                                      scheduler="persistent", tile_m=128, tile_n=192),
                            {"q": (128, 128), "k": (128, 192), "v": (192, 128), "o": (64, 128)},
                            {"q": 128, "k": 128, "v": 64, "o": 128})
    assert "q_descale" not in plain["tensors"] and plain["params"][-1]["name"] == "descale"
    assert len(plain["checks"]) == len(raw["checks"]) - 2


def test_dispatch_takes_the_block_variant_only_for_block_descales():
    from dataclasses import dataclass

    from cubinforge.runtime.dispatch import Problem, rank

    @dataclass
    class V:
        variant: str
        axes: dict

    base = {"arch": "sm_90a", "dtype": "e4m3", "head_dim": 128, "causal": False, "v_layout": "colmajor",
            "scheduler": "persistent", "tile_m": 128, "tile_n": 192}
    # A manifest written before the axis existed has no descale_block: it is per head.
    found = [V("head", dict(base)), V("k192", {**base, "descale_block": "blockq128k192"}),
             V("k128", {**base, "descale_block": "blockq128k128", "tile_n": 128})]
    ask = {a: base[a] for a in ("arch", "dtype", "head_dim", "causal", "v_layout")}
    assert rank(Problem("fa3_fwd", ask, seqlen_q=1000, seqlen_k=1000), found).best.variant == "head"
    for value, want in (("blockq128k192", "k192"), ("blockq128k128", "k128")):
        got = rank(Problem("fa3_fwd", {**ask, "descale_block": value}), found)
        assert got.best.variant == want and len(got.ranked) == 1
    assert rank(Problem("fa3_fwd", {**ask, "descale_block": "blockq128k192"}), found[:1]) is None


def _fake(shape, dtype="e4m3"):
    return DeviceArray(0x10000, shape, None, dtype, device=0)


def test_block_descales_are_checked_before_any_launch():
    b, sq, sk, hq, hkv = 1, 300, 333, 4, 2
    q, k, v = _fake((b, sq, hq, 128)), _fake((b, sk, hkv, 128)), _fake((b, hkv, 128, sk))
    kw = dict(v_layout="colmajor")
    qd, kd = _fake((b, hq, 3), "f32"), _fake((b, hkv, 2), "f32")
    with pytest.raises(InputError, match=r"per-block descales .*pass descale_block=\(q block, k block\)"):
        flash_attn_func(q, k, v, q_descale=qd, k_descale=kd, **kw)
    with pytest.raises(InputError, match=r"no e4m3 variant takes descale blocks \(64, 64\).*\(128, 128\), \(128, 192\)"):
        flash_attn_func(q, k, v, q_descale=qd, k_descale=kd, descale_block=(64, 64), **kw)
    with pytest.raises(InputError, match=r"descale_block must be \(q block, k block\)"):
        flash_attn_func(q, k, v, q_descale=qd, k_descale=kd, descale_block=128, **kw)
    with pytest.raises(InputError, match=r"k_descale with descale_block must be float32 \(batch, heads_kv, "
                                         r"ceil\(seqlen / 192\)\) = \(1, 2, 2\).*block=192"):
        flash_attn_func(q, k, v, q_descale=qd, k_descale=_fake((b, hkv, 3), "f32"), descale_block=(128, 192), **kw)
    # GQA: q's blocks are per query head (heads_q), not per KV head.
    with pytest.raises(InputError, match=r"q_descale with descale_block must be float32 \(batch, heads_q, "
                                         r"ceil\(seqlen / 128\)\) = \(1, 4, 3\)"):
        flash_attn_func(q, k, v, q_descale=_fake((b, hkv, 3), "f32"), k_descale=kd, descale_block=(128, 192), **kw)
    with pytest.raises(InputError, match=r"q_descale with descale_block must be float32"):
        flash_attn_func(q, k, v, q_descale=_fake((b, hq), "f32"), k_descale=kd, descale_block=(128, 192), **kw)


@pytest.mark.slow
@pytest.mark.skipif(not DSL, reason="needs the CuTe DSL")
def test_block_variants_compile_to_qgmma_without_spills(home):
    chosen = [v for v in spec.expand_set("fp8") if v.name in BLOCK_NAMES]
    _, recs = built_records(chosen)
    for rec in recs:
        m, c = rec["metadata"], rec["contract"]
        assert [p["size"] for p in c["params"]] == [p["size"] for p in m["param_table"]]
        assert m["spill_store_bytes"] == 0 == m["spill_load_bytes"] and m["stack_frame_bytes"] == 0
        assert m["kernel"]["descale_block"] == rec["name"].split("-")[7]
        if "sass" in m:
            assert m["sass"]["qgmma"] >= 8 and m["sass"]["hgmma"] == 0
            assert m["sass"]["ldl"] == 0 and m["sass"]["stl"] == 0
