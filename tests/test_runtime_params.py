"""Tensor-map arguments (pure, no driver) and parameter byte packing against hand-computed bytes."""

from __future__ import annotations

import ctypes
import math
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, deep, fa_arrays, fa_contract  # noqa: E402

from cubinforge.runtime import ContractError, InputError, bind, load_contract  # noqa: E402
from cubinforge.runtime.contract import LOG2E  # noqa: E402
from cubinforge.runtime.params import build_params, param_bytes  # noqa: E402
from cubinforge.runtime.tensormap import tensormap_args  # noqa: E402

Q_RECIPE = fa_contract()["params"][2]


def test_tensormap_args_compact():
    q = arr((2, 1000, 16, 128))
    a = tensormap_args(Q_RECIPE, q, "q")
    assert a.data_type == "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" and a.rank == 4
    assert a.global_address == BASE
    assert a.global_dim == (128, 1000, 16, 2)
    # strides of dims 1.. in map order (seqlen, heads, batch), in bytes
    assert a.global_strides == (16 * 128 * 2, 128 * 2, 1000 * 16 * 128 * 2)
    assert a.box == (64, 128, 1, 1) and a.element_strides == (1, 1, 1, 1)
    assert (a.interleave, a.swizzle, a.l2_promotion, a.oob_fill) == (
        "CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_SWIZZLE_128B",
        "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")


def test_tensormap_args_slice_of_packed_qkv():
    # qkv packed as (b, s, 3, h, d); k = qkv[:, :, 1] has strides (s*3*h*d, 3*h*d, d, 1).
    b, s, h, d = 2, 17, 4, 128
    k = arr((b, s, h, d), strides=(s * 3 * h * d, 3 * h * d, d, 1), offset=h * d * 2)
    a = tensormap_args(Q_RECIPE, k, "k")
    assert a.global_address == BASE + h * d * 2
    assert a.global_strides == (3 * h * d * 2, d * 2, s * 3 * h * d * 2)


def test_tensormap_other_dtypes():
    for dtype, enum in (("fp16", "FLOAT16"), ("e4m3", "UINT8"), ("f32", "FLOAT32")):
        r = dict(Q_RECIPE, dtype=dtype, swizzle="none", box=[64 if dtype != "f32" else 32, 128, 1, 1])
        a = tensormap_args(r, arr((1, 64, 2, 128), dtype), "q")
        assert a.data_type == f"CU_TENSOR_MAP_DATA_TYPE_{enum}"


@pytest.mark.parametrize("array,match", [
    (arr((2, 100, 4, 128), offset=8), r"base pointer 0x[0-9a-f]+ is not 16-byte aligned"),
    (arr((2, 100, 4, 128), strides=(100 * 4 * 132, 4 * 132, 132, 1)), r"q\.stride\[2\] = 132 elements = 264 B"),
    (arr((2, 100, 4, 128), strides=(1 << 40, 4 * 128, 128, 1)), r"q\.stride\[0\] = .* below TMA's 2\^40"),
    (arr((2, 100, 4, 128), strides=(100 * 4 * 256, 4 * 256, 256, 2)), r"innermost mapped dimension 3"),
    (arr((2, 0, 4, 128)), r"q\.shape\[1\] = 0 is outside TMA's 1\.\.2\^32"),
])
def test_tensormap_input_limits(array, match):
    with pytest.raises(InputError, match=match):
        tensormap_args(Q_RECIPE, array, "q")


@pytest.mark.parametrize("change,match", [
    ({"box": [64, 512, 1, 1]}, "outside TMA's 1..256"),
    ({"box": [4, 128, 1, 1]}, "not a multiple of 16 B"),
    ({"box": [128, 128, 1, 1]}, "exceeds the 128B swizzle span"),
    ({"swizzle": "256B"}, "swizzle '256B'"),
    ({"dims": [3, 1, 1, 0]}, "not distinct"),
    ({"dtype": "f32"}, "does not match"),
    ({"element_strides": [1, 1, 1, 9]}, "1..8"),
])
def test_tensormap_recipe_limits(change, match):
    with pytest.raises(ContractError, match=match):
        tensormap_args(dict(Q_RECIPE, **change), arr((2, 100, 4, 128)), "q")


def fake_encode(recipe, array, name):
    a = tensormap_args(recipe, array, name)   # same checks as the real path
    return struct.pack("<Q", a.global_address) + bytes(120)


def test_struct_scalar_and_tensormap_bytes():
    c = load_contract(fa_contract())
    t = fa_arrays(b=2, sq=300, sk=500, hq=8, hkv=2)
    b = bind(c, t)
    bufs = build_params(b, encode=fake_encode)
    assert [len(x) for x in bufs] == [16, 40, 128, 4]
    assert bytes(bufs[0]) == struct.pack("<4i", 300, 128, 8, 2)
    lse = t["lse"]
    want = (struct.pack("<Q", lse.ptr) + struct.pack("<3i", 300, 8, 2) + bytes(4)
            + struct.pack("<2q", 300, 8 * 300))
    assert bytes(bufs[1]) == want
    assert bytes(bufs[2])[:8] == struct.pack("<Q", BASE)
    assert ctypes.addressof(bufs[2]) % 64 == 0          # tensor maps sit 64-byte aligned
    assert bytes(bufs[3]) == struct.pack("<f", LOG2E / math.sqrt(128))
    b2 = bind(c, t, {"softmax_scale": 0.25})
    assert bytes(build_params(b2, encode=fake_encode)[3]) == struct.pack("<f", 0.25 * LOG2E)


def test_struct_zero_fill_and_i64_u64():
    raw = deep(fa_contract())
    raw["params"][1]["fields"] = [{"offset": 8, "type": "i64", "value": [-5]},
                                  {"offset": 16, "type": "u64", "value": [1, 63, "+", "q.shape.0", "*"]}]
    c = load_contract(raw)
    b = bind(c, fa_arrays())
    got = param_bytes(c.params[1], b, fake_encode)
    assert got == bytes(8) + struct.pack("<q", -5) + struct.pack("<Q", 128) + bytes(16)


def test_i32_overflow_is_an_input_error():
    raw = deep(fa_contract())
    raw["params"][0]["fields"][0]["value"] = ["q.stride.0", "q.shape.0", "*"]
    c = load_contract(raw)
    t = fa_arrays(b=1 << 14, sq=128, sk=4, hq=8, hkv=2)   # q batch stride * batch = 2^31
    b = bind(c, t)
    with pytest.raises(InputError, match=r"param 0 \(q_coord\) field 0 at \+0: 2147483648 does not fit in i32"):
        param_bytes(c.params[0], b, fake_encode)


def test_real_into_int_field_is_a_contract_error():
    raw = deep(fa_contract())
    raw["params"][0]["fields"][0]["value"] = ["seqlen_q", 2, "/"]
    c = load_contract(raw)
    with pytest.raises(ContractError, match="got the real 150.0"):
        param_bytes(c.params[0], bind(c, fa_arrays()), fake_encode)


def test_wrong_encoded_size_is_caught():
    c = load_contract(fa_contract())
    with pytest.raises(ContractError, match="built 64 bytes, contract says 128"):
        param_bytes(c.params[2], bind(c, fa_arrays()), lambda *a: bytes(64))
