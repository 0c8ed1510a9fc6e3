"""fp8_quant: the family in the default set, its cubins built with contracts matching the
cubin's parameter table, no spills, the sign rule, and the runtime's input checks (CPU)."""

import importlib.util

import pytest
from conftest import module_available
from test_runtime_fixtures import built_records

from cubinforge.generator import spec
from cubinforge.generator.kernels.fp8_quant_sm90.signs import hadamard_sign, mix32
from cubinforge.runtime import InputError, quantize_fp8
from cubinforge.runtime.arrays import DeviceArray

DSL = module_available("cutlass")


def test_default_set_builds_every_quantise_variant():
    names = {v.name for v in spec.expand_set("default") if v.family == "fp8_quant"}
    assert names == {f"fp8-quant-sm_90a-{d}-hd{h}" for d in ("bf16", "fp16") for h in (64, 128, 256)}


def test_quantise_family_refuses_what_it_cannot_build():
    with pytest.raises(spec.SpecError, match="power-of-two"):
        spec.make_variant("fp8_quant", arch="sm_90a", dtype="bf16", head_dim=96)
    with pytest.raises(spec.SpecError, match="reads bf16/fp16"):
        spec.make_variant("fp8_quant", arch="sm_90a", dtype="e4m3", head_dim=128)


def test_signs_are_balanced_and_depend_on_the_seed():
    a = [hadamard_sign(0, c) for c in range(256)]
    b = [hadamard_sign(7, c) for c in range(256)]
    assert set(a) == {1, -1} and 96 < a.count(1) < 160
    assert a != b
    assert all(0 <= mix32(x) <= 0xFFFFFFFF for x in (0, 1, 0xFFFFFFFF))


@pytest.mark.slow
@pytest.mark.skipif(not DSL, reason="needs the CuTe DSL")
def test_quantise_variants_compile_with_matching_contracts(home):
    chosen = spec.select("default", {"dtype": ["bf16"]}, families=["fp8_quant"])
    _, recs = built_records(chosen)
    for rec in recs:
        m, c = rec["metadata"], rec["contract"]
        # The pipeline verified offsets and sizes against the cubin; check the count too.
        assert [p["size"] for p in c["params"]] == [p["size"] for p in m["param_table"]]
        assert c["dynamic_smem_bytes"] >= 16 and m["spill_store_bytes"] == 0 == m["spill_load_bytes"]
        if "sass" in m:
            assert m["sass"]["ldl"] == 0 and m["sass"]["stl"] == 0
        from cubinforge.runtime import bind, load_contract
        d = m["kernel"]["per_lane"] * 32  # the head dim this variant fixes
        arrays = {"x": DeviceArray(0x10000, (2, 300, 3, d), None, "bf16", 0),
                  "y": DeviceArray(0x20000, (2, 300, 3, d), None, "e4m3", 0),
                  "descale": DeviceArray(0x30000, (2, 3, 3), None, "f32", 0)}
        bound = bind(load_contract(c), arrays, {"block_tokens": 128, "hadamard": 1, "seed": 5})
        assert bound.grid == (3, 3, 2) and bound.scalars["block_tokens"] == 128


def _fake(shape, dtype="bf16"):
    return DeviceArray(0x10000, shape, None, dtype, device=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"block": 0}, "positive int"),
    ({"block": True}, "positive int"),
    ({"seed": -1}, "seed must be"),
])
def test_quantize_rejects_bad_arguments(kwargs, message):
    with pytest.raises(InputError, match=message):
        quantize_fp8(_fake((1, 8, 2, 128)), **kwargs)


def test_quantize_rejects_bad_inputs():
    with pytest.raises(InputError, match="bf16 or fp16"):
        quantize_fp8(_fake((1, 8, 2, 128), "f32"))
    with pytest.raises(InputError, match="head_dim 96"):
        quantize_fp8(_fake((1, 8, 2, 96)))
    with pytest.raises(InputError, match="batch, seqlen, heads, head_dim"):
        quantize_fp8(_fake((8, 2, 128)))


def test_numpy_e4m3_codec_round_trips_and_rounds_to_even():
    import numpy as np

    from cubinforge.bench.fp8_reference import E4M3_VALUES, e4m3_decode, e4m3_encode, e4m3_round

    finite = [b for b in range(256) if not np.isnan(E4M3_VALUES[b]) and b != 0x80]
    assert (e4m3_encode(E4M3_VALUES[finite]) == np.array(finite, np.uint8)).all()
    assert e4m3_decode(np.array([0x7E]))[0] == 448.0
    # 1.0625 lies halfway between 1.0 and 1.125 (mantissa 0 and 1): ties go to even (1.0).
    assert e4m3_round(np.array([1.0625, 1.1875, 1000.0, -1000.0])).tolist() == [1.0, 1.25, 448.0, -448.0]


def test_numpy_rotation_is_orthonormal():
    import numpy as np

    from cubinforge.bench.fp8_reference import hadamard_matrix

    r = hadamard_matrix(64, seed=3)
    assert np.allclose(r @ r.T, np.eye(64))
