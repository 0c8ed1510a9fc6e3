"""Launch contract: RPN evaluation, loading, symbol binding and every validation error."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, deep, fa_arrays, fa_contract  # noqa: E402

from cubinforge.runtime import ContractError, InputError, bind, evaluate, load_contract  # noqa: E402
from cubinforge.runtime.contract import LOG2E  # noqa: E402


def ev(expr, **env):
    def lookup(name):
        if name not in env:
            raise ContractError(f"unknown token {name!r}")
        return env[name]
    return evaluate(expr, lookup)


# --------------------------------------------------------------------------- evaluator

@pytest.mark.parametrize("expr,want", [
    (["seqlen_q", 128, "ceil_div"], 8),           # ceil(1000/128)
    ([1000, 128, "//"], 7),
    ([1000, 128, "%"], 104),
    ([-7, 2, "//"], -4),                          # floor, not truncation
    ([-7, 2, "ceil_div"], -3),
    ([3, 5, "min"], 3), ([3, 5, "max"], 5),
    ([3, 5, "<"], 1), ([5, 5, "<="], 1), ([5, 3, "<"], 0),
    ([4, 4, "=="], 1), ([4, 3, "!="], 1),
    ([7, 3, "-"], 4), ([2, 3, "+", 4, "*"], 20),
])
def test_int_ops_are_exact_ints(expr, want):
    got = ev(expr, seqlen_q=1000)
    assert got == want and type(got) is int


def test_int_arithmetic_exact_beyond_double_precision():
    big = (1 << 53) + 1                          # not representable as a double
    assert ev([big, 1, "+"]) == (1 << 53) + 2
    assert ev(["x", 3, "*"], x=(1 << 60) // 3) == ((1 << 60) // 3) * 3


def test_int64_overflow_is_an_error():
    with pytest.raises(InputError, match="overflow"):
        ev([1 << 62, 4, "*"])


def test_real_once_an_operand_is_real():
    assert ev([1, 2, "/"]) == 0.5                 # '/' is real division
    got = ev([3, 2.0, "+"])
    assert got == 5.0 and type(got) is float
    assert type(ev([3.0, 2, "max"])) is float
    assert type(ev([7.5, 2, "ceil_div"])) is float and ev([7.5, 2, "ceil_div"]) == 4.0
    assert ev([128, "rsqrt"]) == pytest.approx(1 / math.sqrt(128), rel=1e-15)
    assert ev([2, "log2e_mul"]) == 2 * LOG2E
    assert ev([128, "rsqrt", "log2e_mul"]) == pytest.approx(LOG2E / math.sqrt(128), rel=1e-15)


def test_evaluator_errors():
    with pytest.raises(ContractError, match="unknown token 'nope'"):
        ev(["nope", 1, "+"])
    with pytest.raises(ContractError, match="underflow"):
        ev([1, "+"])
    with pytest.raises(ContractError, match="underflow"):
        ev(["rsqrt"])
    with pytest.raises(ContractError, match="leaves 2 values"):
        ev([1, 2])
    with pytest.raises(ContractError):
        ev([])
    with pytest.raises(ContractError):
        ev([True, 1, "+"])
    with pytest.raises(InputError, match="division by zero"):
        ev([1, 0, "ceil_div"])
    with pytest.raises(InputError, match="division by zero"):
        ev(["a", "b", "%"], a=3, b=0)


# --------------------------------------------------------------------------- loading

def test_load_contract_ok():
    c = load_contract(fa_contract())
    assert c.variant == "fa3_fwd-sm_90a-bf16-hd128-causal"
    assert c.block == (384, 1, 1) and c.cluster == (1, 1, 1)
    assert [p.kind for p in c.params] == ["struct", "struct", "tensormap", "scalar"]


def test_unknown_contract_version_is_refused():
    raw = fa_contract()
    raw["contract_version"] = 2
    with pytest.raises(ContractError, match="contract_version 2 is not supported.*version 1"):
        load_contract(raw)
    del raw["contract_version"]
    with pytest.raises(ContractError, match="contract_version None"):
        load_contract(raw)


@pytest.mark.parametrize("mutate,match", [
    (lambda c: c["grid"].__setitem__(0, ["seqlen_q", "tile", "ceil_div"]), "unknown token 'tile'"),
    (lambda c: c["grid"].__setitem__(0, ["seqlen_q", "ceil_div"]), "underflow"),
    (lambda c: c["grid"].__setitem__(0, ["q.shape.7"]), "dimension q does not have"),
    (lambda c: c["params"][1].__setitem__("offset", 8), "overlaps"),
    (lambda c: c["params"].__setitem__(2, {k: v for k, v in c["params"][2].items() if k in
                                           ("ordinal", "offset", "size", "align", "name", "kind")}
                                       | {"tensormap": {"tensor": "q"}}), "top level, not in a nested"),
    (lambda c: c["params"][1].__setitem__("ordinal", 5), "out of order"),
    (lambda c: c["params"][0]["fields"].append({"offset": 14, "type": "i32", "value": [1]}), "does not fit"),
    (lambda c: c["params"][2].__setitem__("size", 64), "128 bytes"),
    (lambda c: c["params"][3].__setitem__("type", "f64"), "scalar type"),
    (lambda c: c["tensors"]["q"].__setitem__("dtype", "fp64"), "dtype 'fp64'"),
    (lambda c: c["tensors"]["q"].__setitem__("align_bytes", 12), "power of two"),
    (lambda c: c["symbols"].pop("heads_kv"), "'heads_kv' that 'symbols' does not define"),
    (lambda c: c.__setitem__("block", [384, 1]), "block"),
])
def test_malformed_contracts_fail_at_load(mutate, match):
    raw = deep(fa_contract())
    mutate(raw)
    with pytest.raises(ContractError, match=match):
        load_contract(raw)


# --------------------------------------------------------------------------- binding

def test_bind_symbols_grid_and_scalars():
    c = load_contract(fa_contract())
    b = bind(c, fa_arrays(b=2, sq=300, sk=500, hq=8, hkv=2))
    assert b.symbols == {"batch": 2, "seqlen_q": 300, "heads_q": 8, "head_dim": 128,
                         "seqlen_k": 500, "heads_kv": 2}
    assert b.grid == (3, 8, 2)
    assert b.scalars["softmax_scale"] == pytest.approx(1 / math.sqrt(128))
    b2 = bind(c, fa_arrays(), {"softmax_scale": 0.5})
    assert b2.scalars["softmax_scale"] == 0.5
    assert b2.eval(["lse.stride.1"]) == 300 and b2.eval(["q.ptr"]) == BASE


def _bind_err(match, **over):
    c = load_contract(over.pop("contract", fa_contract()))
    tensors = fa_arrays()
    scalars = over.pop("scalars", None)
    tensors.update(over)
    with pytest.raises(InputError, match=match) as ei:
        bind(c, {k: v for k, v in tensors.items() if v is not None}, scalars)
    return str(ei.value)


def test_wrong_dtype():
    msg = _bind_err(r"q has dtype fp16; .* accepts only bf16", q=arr((2, 300, 8, 128), "fp16"))
    assert "fa3_fwd-sm_90a-bf16-hd128-causal" in msg


def test_mismatched_head_dim_names_tensor_dim_and_values():
    _bind_err(r"k\.shape\[3\] \(head_dim\) is 64 but q\.shape\[3\] gives head_dim = 128",
              k=arr((2, 500, 2, 64), base=BASE + (1 << 30)))


def test_fixed_head_dim():
    c = fa_contract()
    _bind_err(r"q\.shape\[3\] \(head_dim\) is 64; .* accepts only head_dim = 128",
              q=arr((2, 300, 8, 64)), o=arr((2, 300, 8, 64), base=BASE + (3 << 30)), contract=c)


def test_non_contiguous_head_dim():
    q = arr((2, 300, 8, 128), strides=(300 * 8 * 256, 8 * 256, 256, 2))
    _bind_err(r"q\.shape\[3\] \(head_dim\) must be contiguous \(stride 1\)", q=q)


def test_misaligned_pointer():
    _bind_err(r"q's base pointer 0x[0-9a-f]+ is not 16-byte aligned \(offset 2\)",
              q=arr((2, 300, 8, 128), offset=2))


def test_misaligned_stride():
    # heads stride of 132 elements = 264 B: not a multiple of 16 B.
    q = arr((2, 300, 8, 128), strides=(300 * 8 * 132, 8 * 132, 132, 1))
    _bind_err(r"q\.stride\[2\] is 132 elements = 264 B, not a multiple of 16 B", q=q)


def test_gqa_ratio_not_integral():
    msg = _bind_err(r"heads_q must be a multiple of heads_kv \(GQA\)",
                    q=arr((2, 300, 6, 128)), o=arr((2, 300, 6, 128), base=BASE + (3 << 30)),
                    lse=arr((2, 6, 300), "f32", base=BASE + (4 << 30)),
                    k=arr((2, 500, 4, 128), base=BASE + (1 << 30)), v=arr((2, 500, 4, 128), base=BASE + (2 << 30)))
    assert "heads_q=6" in msg and "heads_kv=4" in msg


def test_wrong_rank_missing_and_unknown_tensors():
    _bind_err(r"q has 3 dimensions .* expects 4", q=arr((300, 8, 128)))
    _bind_err(r"needs tensors \['lse'\]", lse=None)
    _bind_err(r"unknown \['x'\]", x=arr((1,)))


def test_symbol_agreement_and_min():
    _bind_err(r"o\.shape\[1\] \(seqlen_q\) is 299 but q\.shape\[1\] gives seqlen_q = 300",
              o=arr((2, 299, 8, 128), base=BASE + (3 << 30)))
    c = fa_contract()
    q0 = arr((2, 0, 8, 128))
    _bind_err(r"needs seqlen_q >= 1", q=q0, o=arr((2, 0, 8, 128), base=BASE + (3 << 30)),
              lse=arr((2, 8, 0), "f32", base=BASE + (4 << 30)), contract=c)


def test_devices_must_agree():
    _bind_err(r"different devices \(q on device 0, k on device 1\)",
              k=arr((2, 500, 2, 128), base=BASE + (1 << 30), device=1))


def test_scalars():
    _bind_err(r"unknown \['scale'\]", scalars={"scale": 1.0})
    _bind_err(r"finite number", scalars={"softmax_scale": float("nan")})


def test_lse_alignment_is_its_own():
    # lse needs only 4-byte alignment: seqlen_q = 17 gives 68-byte rows, which is fine.
    c = load_contract(fa_contract())
    b = bind(c, fa_arrays(sq=17))
    assert b.symbols["seqlen_q"] == 17 and b.grid == (1, 8, 2)


def test_size_one_contiguous_dim_accepts_any_stride():
    # lse with seqlen_q = 1: its contiguous dimension has size 1, so its stride is irrelevant.
    tensors = fa_arrays(sq=1)
    tensors["lse"] = arr((2, 8, 1), "f32", strides=(8, 1, 5), base=BASE + (4 << 30))
    assert bind(load_contract(fa_contract()), tensors).symbols["seqlen_q"] == 1


def test_param_offsets_need_not_be_multiples_of_align():
    # Real FA3 cubins put a 64 B-aligned tensor map at offset 112: the block base is aligned.
    raw = deep(fa_contract())
    raw["params"][2]["offset"] = 112
    raw["params"][3]["offset"] = 240
    assert load_contract(raw).params[2].offset == 112


def test_sm_count_device_symbol_drives_a_persistent_grid():
    raw = fa_contract()
    raw["grid"] = [["seqlen_q", 128, "ceil_div", "heads_q", "*", "batch", "*", "sm_count", "min"], [1], [1]]
    c = load_contract(raw)  # sm_count is a known token, though no tensor defines it
    tiles = 3 * 8 * 2       # ceil(300/128) x heads_q 8 x batch 2 (fa_arrays' defaults)
    assert bind(c, fa_arrays(), device={"sm_count": 132}).grid == (min(tiles, 132), 1, 1)
    assert bind(c, fa_arrays(), device={"sm_count": 20}).grid == (20, 1, 1)
    with pytest.raises(ContractError, match="sm_count"):
        bind(c, fa_arrays())  # a launcher that does not say which device cannot size it
