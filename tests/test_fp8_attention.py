"""The e4m3 fa3_fwd variants on the CPU: in the default set, refused where not built, compiled
with QGMMA (E4M3 operands) and no spills, a contract matching the cubin (descale tensor, V
column-major), and flash_attn_func's FP8 input checks."""

import importlib.util

import pytest
from conftest import module_available
from test_runtime_fixtures import built_records, e4m3_colmajor_arrays

from cubinforge.generator import spec
from cubinforge.runtime import InputError, flash_attn_func
from cubinforge.runtime.arrays import DeviceArray

DSL = module_available("cutlass")


def test_default_set_has_the_e4m3_variants():
    names = {v.name for v in spec.expand_set("default") if v.axes.get("dtype") == "e4m3" and v.family == "fa3_fwd"
             and not v.axes["paged_kv"]}  # the e4m3 decode forms: tests/test_fp8_decode.py
    assert names == {
        "fa3-fwd-sm_90a-e4m3-hd64-noncausal-colmajor-persistent-m128n192",
        "fa3-fwd-sm_90a-e4m3-hd64-causal-colmajor-persistent",
        "fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor-persistent-m128n192",
        "fa3-fwd-sm_90a-e4m3-hd128-causal-colmajor-persistent-m128n192",
        "fa3-fwd-sm_90a-e4m3-hd256-noncausal-colmajor-persistent-m128n128",
        "fa3-fwd-sm_90a-e4m3-hd256-causal-colmajor-lpt-m128n128",
    }
    # The bf16/fp16 names do not change: v_layout's default is left out of them.
    assert "fa3-fwd-sm_90a-bf16-hd128-causal-lpt" in {v.name for v in spec.expand_set("default")}


@pytest.mark.parametrize("axes, message", [
    ({"dtype": "e4m3", "head_dim": 96, "v_layout": "colmajor"}, "head_dim 64, 128 and 256"),
    ({"dtype": "e4m3", "head_dim": 256, "v_layout": "colmajor"}, "multiple of 32"),
    ({"dtype": "bf16", "head_dim": 128, "v_layout": "colmajor"}, "colmajor is built for dtype=e4m3 only"),
    # Not combined with the model variants yet (issue 12); the inference forms read V row-major.
    ({"dtype": "e4m3", "head_dim": 128, "v_layout": "colmajor", "softcap": True}, "e4m3 does not take the model"),
    ({"dtype": "e4m3", "head_dim": 128, "v_layout": "colmajor", "local": True}, "e4m3 does not take the model"),
    ({"dtype": "e4m3", "head_dim": 128, "v_layout": "colmajor", "learnable_sink": True}, "e4m3 does not take"),
    ({"dtype": "e4m3", "head_dim": 128, "head_dim_v": 64, "v_layout": "colmajor"}, "e4m3 does not take"),
    ({"dtype": "e4m3", "head_dim": 128, "v_layout": "colmajor", "pack_gqa": True}, "v_layout=rowmajor"),
    ({"dtype": "e4m3", "head_dim": 128, "v_layout": "colmajor", "split_kv": True}, "v_layout=rowmajor"),
])
def test_unbuilt_fp8_combinations_are_refused(axes, message):
    with pytest.raises(spec.SpecError, match=message):
        spec.make_variant("fa3_fwd", arch="sm_90a", causal=False, **axes)


@pytest.mark.parametrize("extra, named", [
    ({"softcap": True}, "softcap"), ({"local": True}, "local"), ({"learnable_sink": True}, "learnable_sink"),
    ({"head_dim_v": 64}, "head_dim_v=64"),
])
def test_fwd_config_refuses_e4m3_with_model_variants(extra, named):
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    with pytest.raises(ValueError, match=f"e4m3 does not take the model variants yet.*{named}"):
        FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, v_layout="colmajor", **extra)


def test_name_round_trips():
    v = spec.make_variant("fa3_fwd", arch="sm_90a", dtype="e4m3", head_dim=64, causal=True,
                          v_layout="colmajor", scheduler="persistent")
    assert spec.parse_name(v.name) == v


@pytest.mark.slow
@pytest.mark.skipif(not DSL, reason="needs the CuTe DSL")
def test_e4m3_variant_compiles_to_qgmma_without_spills(home):
    chosen = spec.select("default", {"dtype": ["e4m3"], "head_dim": [128], "causal": [False]})
    _, (rec, *_) = built_records(chosen)
    m, c = rec["metadata"], rec["contract"]
    assert [p["size"] for p in c["params"]] == [p["size"] for p in m["param_table"]]
    assert m["spill_store_bytes"] == 0 == m["spill_load_bytes"]
    assert c["tensors"]["v"]["dims"] == ["batch", "heads_kv", "head_dim", "seqlen_k"]
    assert c["tensors"]["o"]["dtype"] == "bf16" and c["tensors"]["descale"]["dims"] == [3, "batch", "heads_kv"]
    maps = {p["name"]: p for p in c["params"] if p["kind"] == "tensormap"}
    assert maps["tma_v"]["dims"] == [3, 2, 1, 0] and maps["tma_o"]["dtype"] == "bf16"
    # The contract binds FP8-shaped arrays: colmajor V with padded seqlen_k storage, bf16 O,
    # the stacked descales; a row-major V is refused with the dimension named.
    from cubinforge.runtime import bind, load_contract
    contract = load_contract(c)
    b, sq, sk, hq, hkv, d = 2, 100, 333, 4, 2, 128
    arrays = e4m3_colmajor_arrays(b, sq, sk, hq, hkv, d)
    bound = bind(contract, arrays, {}, {"sm_count": 132})
    assert bound.grid == (min(-(-sq // 128) * hq * b, 132), 1, 1)
    with pytest.raises(InputError, match="v.shape"):
        bind(contract, {**arrays, "v": DeviceArray(0x30000, (b, sk, hkv, d), None, "e4m3", 0)}, {}, {"sm_count": 132})
    with pytest.raises(InputError, match="not a multiple of 16"):
        bind(contract, {**arrays, "v": DeviceArray(0x30000, (b, hkv, d, sk), None, "e4m3", 0)}, {}, {"sm_count": 132})
    if "sass" in m:
        # QK^T and PV: 4 k-steps of 32 each per key block, in the first-block and loop bodies.
        assert m["sass"]["qgmma"] >= 8 and m["sass"]["hgmma"] == 0
        assert m["sass"]["ldl"] == 0 and m["sass"]["stl"] == 0


def _fake(shape, dtype="e4m3"):
    return DeviceArray(0x10000, shape, None, dtype, device=0)


def test_fp8_inputs_are_checked_before_any_launch():
    q, k = _fake((1, 64, 2, 128)), _fake((1, 64, 2, 128))
    # Row-major V is like k; a colmajor-shaped V under the default layout is named as such.
    with pytest.raises(InputError, match=r"v \(rowmajor\) must be \(batch, seqlen_k, heads_kv, head_dim\)"):
        flash_attn_func(q, k, _fake((1, 2, 128, 64)))
    with pytest.raises(InputError, match="v_layout must be one of"):
        flash_attn_func(q, k, _fake((1, 64, 2, 128)), v_layout="transposed")
    with pytest.raises(InputError, match="head_dim, seqlen_k"):
        flash_attn_func(q, k, _fake((1, 64, 2, 128)), v_layout="colmajor")
    with pytest.raises(InputError, match="e4m3 q, k and v"):
        flash_attn_func(q, _fake((1, 64, 2, 128), "bf16"), _fake((1, 2, 128, 64)), v_layout="colmajor")
    for kw in ({"softcap": 30.0}, {"window_size": (128, 0)}, {"learnable_sink": _fake((2,), "f32")}):
        with pytest.raises(InputError, match="FP8 .e4m3. attention does not take window_size, softcap"):
            flash_attn_func(q, k, _fake((1, 2, 128, 64)), v_layout="colmajor", **kw)
    from cubinforge.runtime import plan_attention
    with pytest.raises(InputError, match="plan_attention does not bind FP8"):
        plan_attention(q, k, _fake((1, 2, 128, 64)))
    with pytest.raises(InputError, match="out must be bf16"):
        flash_attn_func(q, k, _fake((1, 2, 128, 64)), v_layout="colmajor", out=_fake((1, 64, 2, 128)))


def test_fp8_set_has_the_rowmajor_variants_and_default_set_none():
    names = {v.name for v in spec.expand_set("fp8") if v.family == "fa3_fwd" and not v.axes["pack_gqa"]
             and not v.axes["varlen"]  # the e4m3 decode and varlen forms: tests/test_fp8_decode.py
             and v.axes["descale_block"] == "head"}  # block descales: tests/test_fp8_block_descale.py
    assert names == {
        "fa3-fwd-sm_90a-e4m3-hd64-noncausal-persistent",
        "fa3-fwd-sm_90a-e4m3-hd64-causal-persistent",
        "fa3-fwd-sm_90a-e4m3-hd128-noncausal-persistent-m128n224",
        "fa3-fwd-sm_90a-e4m3-hd128-causal-lpt-m128n192",
        "fa3-fwd-sm_90a-e4m3-hd256-noncausal-persistent-m128n64",
        "fa3-fwd-sm_90a-e4m3-hd256-causal-lpt-m128n64",
    }
    # The default set keeps only its column-major e4m3 variants (its cubins stay as they were).
    assert not names & {v.name for v in spec.expand_set("default")}


def test_rowmajor_e4m3_config_counts_the_transposed_buffer():
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    row = FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, scheduler="persistent")
    col = FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=128, causal=False, scheduler="persistent",
                    v_layout="colmajor")
    assert row.v_transpose and not col.v_transpose
    assert row.smem_bytes - col.smem_bytes == row.stages * row.tile_n * row.head_dim  # sVt, 1 B/elem
    with pytest.raises(ValueError, match="shared memory"):
        FwdConfig(arch="sm_90a", dtype="e4m3", head_dim=256, causal=False, tile_m=128, tile_n=128)


@pytest.mark.slow
@pytest.mark.skipif(not DSL, reason="needs the CuTe DSL")
@pytest.mark.parametrize("head_dim, causal", [(128, False), (64, True)])
def test_rowmajor_e4m3_variant_transposes_v_in_smem_without_spills(home, head_dim, causal):
    """V row-major: TMA-loaded like k, transposed by the producer's warps 1..3 with
    LDSM.16.MT88.4 + PRMT + STSM.16.M88.4 (v_transpose.py), QGMMA E4M3, no local memory."""
    from cubinforge.generator.sass import cuobjdump
    chosen = spec.select("fp8", {"head_dim": [head_dim], "causal": [causal], "pack_gqa": [False], "varlen": [False]},
                         families=["fa3_fwd"])  # the dense form (the set has the decode/varlen ones too)
    reg, (rec, *_) = built_records(chosen)
    m, c = rec["metadata"], rec["contract"]
    assert m["spill_store_bytes"] == 0 == m["spill_load_bytes"] and m["stack_frame_bytes"] == 0
    assert c["tensors"]["v"]["dims"] == ["batch", "seqlen_k", "heads_kv", "head_dim"]
    maps = {p["name"]: p for p in c["params"] if p["kind"] == "tensormap"}
    assert maps["tma_v"].get("dims") != [3, 2, 1, 0]  # the tensor map walks V like k
    from cubinforge.runtime import bind, load_contract
    b, sq, sk, hq, hkv = 2, 100, 333, 4, 2
    arrays = {
        "q": DeviceArray(0x10000, (b, sq, hq, head_dim), None, "e4m3", 0),
        "k": DeviceArray(0x20000, (b, sk, hkv, head_dim), None, "e4m3", 0),
        "v": DeviceArray(0x30000, (b, sk, hkv, head_dim), None, "e4m3", 0),
        "o": DeviceArray(0x40000, (b, sq, hq, head_dim), None, "bf16", 0),
        "lse": DeviceArray(0x50000, (b, hq, sq), None, "f32", 0),
        "descale": DeviceArray(0x60000, (3, b, hkv), None, "f32", 0),
    }
    bind(load_contract(c), arrays, {}, {"sm_count": 132})
    sass = cuobjdump(["-sass"], reg.read_blob(rec["cubin"]["sha256"]))
    if sass is None:
        pytest.skip("cuobjdump not installed")
    assert "QGMMA" in sass and "E4M3" in sass and "HGMMA" not in sass
    assert "LDL" not in sass and "STL" not in sass
    # The transposer's slice loop: one LDSM.T per 16 keys, unrolled, the byte splits and one
    # STSM each (the epilogue's stmatrix of O comes on top); and no shuffles of P
    # (fp8_local_p, on wherever V is transposed).
    keys = rec["metadata"]["kernel"]["tile_n"]
    assert sass.count("LDSM.16.MT88.4") == keys // 16 and sass.count("STSM.16.M88.4") > keys // 16
    assert "0x6420" in sass and "0x7531" in sass
    assert rec["metadata"]["kernel"]["fp8_local_p"] is True
    # (The shuffled P takes 32 SHFL.IDX per key block in each loop body; a broadcast or two remain.)
    assert sass.count("SHFL.IDX") < 8
