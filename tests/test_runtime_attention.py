"""flash_attn_func's own checks, which run before any variant is chosen or the driver is
touched, with raw-pointer arrays on the CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr  # noqa: E402

from cubinforge.runtime import InputError, flash_attn_func  # noqa: E402
from cubinforge.runtime.attention import _padded_strides  # noqa: E402

GB = 1 << 30


def qkv(b=2, sq=100, sk=200, hq=8, hkv=2, d=128, dtype="bf16"):
    return (arr((b, sq, hq, d), dtype), arr((b, sk, hkv, d), dtype, base=BASE + GB),
            arr((b, sk, hkv, d), dtype, base=BASE + 2 * GB))


@pytest.mark.parametrize("args,match", [
    (lambda q, k, v: (q, k, arr(v.shape, "fp16", base=v.ptr)), r"one dtype; got q bf16, k bf16, v fp16"),
    (lambda q, k, v: (q, arr((2, 200, 2, 64)), arr((2, 200, 2, 64))), r"head_dim differs: q\.shape\[3\] = 128, k\.shape\[3\] = 64"),
    (lambda q, k, v: (q, k, arr((2, 201, 2, 128))), r"k and v must agree in \(batch, seqlen_k, heads_kv\)"),
    (lambda q, k, v: (q, arr((3, 200, 2, 128)), arr((3, 200, 2, 128))), r"batch differs"),
    (lambda q, k, v: (q, arr((2, 200, 3, 128)), arr((2, 200, 3, 128))), r"heads_q \(8\) must be a multiple of heads_kv \(3\)"),
    (lambda q, k, v: (arr((100, 8, 128)), k, v), r"q must be \(batch, seqlen, heads, head_dim\)"),
    (lambda q, k, v: (arr(q.shape, strides=(100 * 8 * 256, 8 * 256, 256, 2)), k, v), r"q: the last dimension \(head_dim\) must be contiguous"),
    (lambda q, k, v: (q, k, arr(v.shape, strides=(200 * 2 * 256, 2 * 256, 256, 2))), r"v: the last dimension"),
])
def test_input_checks(args, match):
    with pytest.raises(InputError, match=match):
        flash_attn_func(*args(*qkv()))


# Unaligned inputs are copied (tests/test_runtime_restage.py); unaligned outputs are refused.
@pytest.mark.parametrize("o,match", [
    (arr((2, 100, 8, 128), offset=8, base=BASE + 3 * GB), r"out: base pointer 0x[0-9a-f]+ is not 16-byte aligned \(offset 8\)"),
    (arr((2, 100, 8, 128), strides=(100 * 8 * 132, 8 * 132, 132, 1), base=BASE + 3 * GB), r"out: stride\[2\] is 132 elements = 264 B"),
])
def test_unaligned_outputs_are_refused(o, match):
    with pytest.raises(InputError, match=match):
        flash_attn_func(*qkv(), out=o)


def test_out_and_lse_checks():
    q, k, v = qkv()
    with pytest.raises(InputError, match=r"out must be \(2, 100, 8, 128\) bf16 \(q's shape with v's head dim\)"):
        flash_attn_func(q, k, v, out=arr((2, 100, 8, 64), base=BASE + 3 * GB))
    with pytest.raises(InputError, match=r"lse must be float32 \(batch, heads_q, seqlen_q\) = \(2, 8, 100\)"):
        flash_attn_func(q, k, v, out=arr(q.shape, base=BASE + 3 * GB), lse=arr((2, 8, 100), "bf16"))


def test_same_device():
    q, k, v = qkv()
    v = arr(v.shape, base=v.ptr, device=1)
    with pytest.raises(InputError, match=r"different devices \(q on device 0, v on device 1\)"):
        flash_attn_func(q, k, v)


def test_bad_stream():
    q, k, v = qkv()
    with pytest.raises(InputError, match="cannot read a CUDA stream handle from str"):
        flash_attn_func(q, k, v, stream="s0")


def test_padded_strides():
    assert _padded_strides((2, 8, 17), 4) == (8 * 20, 20, 1)
    assert _padded_strides((2, 17, 8, 128), 8) == (17 * 8 * 128, 8 * 128, 128, 1)
    assert _padded_strides((2, 8, 17), 1) == (136, 17, 1)


def test_valid_inputs_reach_the_driver():
    # All checks pass; the next step needs the GPU. Where there is no driver, say so plainly.
    from cubinforge.runtime import DriverUnavailable, driver
    try:
        driver.init()
    except DriverUnavailable:
        q, k, v = qkv()
        with pytest.raises(DriverUnavailable, match="CUDA driver"):
            flash_attn_func(q, k, v)
    else:
        pytest.skip("a CUDA driver is present: tests/gpu covers this path")
