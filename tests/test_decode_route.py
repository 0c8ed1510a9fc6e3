"""flash_attn_func routes decode-shaped problems to the split-KV / pack-GQA forms, as the
dispatcher's `decode-split-kv` rule says, under the mocked driver (bench/host_overhead.py)
against the real contracts of the default set's decode forms: every launch binds, packs and
encodes; a repeated call of the layout is the cached path (pointers rewritten, no encode);
prefill shapes keep the plain kernel. Skips unless the local registry ($CUBINFORGE_HOME or
./.cubinforge) holds the bf16 hd128 decode forms (`make kernels ARCH=sm90`)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("cuda.bindings.driver")

from cubinforge.bench.host_overhead import MockDriver  # noqa: E402
from cubinforge.runtime import attention, kvcache, last_launch  # noqa: E402
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.registry_source import LocalSource, manifests  # noqa: E402

SRC = LocalSource()
_found, _ = manifests(SRC, "fa3_fwd")
# The plain decode forms: a model variant's (window, softcap, sink) serves other calls.
FORMS = [m for m in _found if m.axes.get("split_kv") and m.axes.get("dtype") == "bf16" and m.axes.get("head_dim") == 128
         and not m.axes.get("paged_kv")
         and not any(m.axes.get(a) for a in ("local", "softcap", "learnable_sink"))]
pytestmark = pytest.mark.skipif(len(FORMS) < 2, reason=f"no bf16 hd128 split-KV forms in {SRC.home}")
_ptr = itertools.count(1 << 40, 1 << 32)


def arr(shape, dtype="bf16"):
    return DeviceArray.from_pointer(next(_ptr), tuple(shape), None, dtype, device=0)  # compact row-major


@pytest.fixture
def mock():
    m = MockDriver().install()
    kvcache.clear_cache()
    yield m
    m.uninstall()
    kvcache.clear_cache()


# The bench's --decode cells at hd128: 16 heads, batch * seqlen_k = 128k.
@pytest.mark.parametrize("sq", [1, 16, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_cells_at_32k_keys_take_the_split_forms(mock, sq, causal):
    b, sk, h, d = 4, 32768, 16, 128
    q, k, v = arr((b, sq, h, d)), arr((b, sk, h, d)), arr((b, sk, h, d))
    o, lse = arr((b, sq, h, d)), arr((b, h, sq), "f32")
    attention.flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, source=SRC)
    assert mock.counts["cuLaunchKernelEx"] == 2                     # forward (2 splits) + combine
    # The 64 x 64 two-CTA form where it is built (decode-two-ctas), else the 64 x 128 one.
    fwd = sorted((m for m in FORMS if m.axes["causal"] == causal), key=lambda m: m.axes["tile_n"])[0]
    # last_launch() names the forward form; its note names the combine.
    assert last_launch().variant == fwd.variant and "attn-combine" in last_launch().note
    assert mock.counts["cuMemsetD32Async"] == 1                     # the key counts, once
    # The cached path: two launches, nothing encoded, nothing allocated or filled.
    mock.counts.clear()
    attention.flash_attn_func(q, k, v, causal=causal, out=o, lse=lse, source=SRC)
    assert dict(mock.counts) == {"cuCtxGetCurrent": 2, "cuLaunchKernelEx": 2}
    assert last_launch().variant == fwd.variant and "attn-combine" in last_launch().note
    # New buffers of the layout: their pointers are rewritten (descriptor addresses), not encoded.
    q2, o2 = arr(q.shape), arr(o.shape)
    mock.counts.clear()
    attention.flash_attn_func(q2, k, v, causal=causal, out=o2, lse=lse, source=SRC)
    assert mock.counts["cuLaunchKernelEx"] == 2 and mock.counts["cuTensorMapEncodeTiled"] == 0
    (ent,) = attention._calls.values()
    names = [kern.variant for kern, _, _ in ent.launches]
    assert names[0] == fwd.variant and names[1].startswith("attn-combine"), names
    assert ent.launches[0][1].grid[0] == 2                          # num_splits from the dispatcher
    # Each launch's rewritten parameters are the bytes a fresh build over the new buffers packs.
    now = {"q": q2, "k": k, "v": v, "o": o2, "lse": lse}
    for kern, plan, used in ent.launches:
        arrays = {**{n: plan.bound.tensors[n] for n in kern.contract.tensors}, **{n: now[n] for n in used}}
        fresh = kern.build_plan(arrays, {}, 0)
        assert b"".join(bytes(x) for x in plan.buffers) == b"".join(bytes(x) for x in fresh.buffers)


def test_outputs_allocated_on_the_decode_route(mock):
    b, sk, h, d = 4, 32768, 16, 128
    q, k, v = arr((b, 1, h, d)), arr((b, sk, h, d)), arr((b, sk, h, d))
    out, lse = attention.flash_attn_func(q, k, v, source=SRC)
    assert out.shape == (b, 1, h, d) and lse.shape == (b, h, 1)
    out2, _ = attention.flash_attn_func(q, k, v, source=SRC)
    assert out2.ptr != out.ptr and out2.shape == out.shape           # a new output per call, as FA


@pytest.mark.parametrize("sizes", [(16, 64, 8192), (4, 128, 32768), (1, 4096, 4096)])
def test_other_shapes_keep_the_plain_kernel(mock, sizes):
    b, sq, sk = sizes
    q, k, v = arr((b, sq, 16, 128)), arr((b, sk, 16, 128)), arr((b, sk, 16, 128))
    attention.flash_attn_func(q, k, v, causal=True, out=arr(q.shape), lse=arr((b, 16, sq), "f32"), source=SRC)
    assert mock.counts["cuLaunchKernelEx"] == 1
    axes = next(m for m in _found if m.variant == last_launch().variant).axes
    assert not axes["split_kv"] and not axes["pack_gqa"]


def test_a_window_or_softcap_keeps_the_plain_kernel(mock):
    b, sk = 4, 32768
    q, k, v = arr((b, 1, 16, 128)), arr((b, sk, 16, 128)), arr((b, sk, 16, 128))
    try:
        attention.flash_attn_func(q, k, v, softcap=30.0, out=arr(q.shape), lse=arr((b, 16, 1), "f32"), source=SRC)
    except Exception as e:      # no softcap variant for this mask: a clear miss, never a decode form
        assert "softcap" in str(e)
        return
    assert "splitkv" not in last_launch().variant and "packgqa" not in last_launch().variant


def test_plan_attention_binds_the_plain_kernel(mock):
    b, sk = 4, 32768
    q, k, v = arr((b, 1, 16, 128)), arr((b, sk, 16, 128)), arr((b, sk, 16, 128))
    plan = attention.plan_attention(q, k, v, out=arr(q.shape), lse=arr((b, 16, 1), "f32"), source=SRC)
    assert "splitkv" not in plan.variant and "packgqa" not in plan.variant


def _forms(dtype, d, split):
    return [m for m in _found if bool(m.axes.get("split_kv")) == split and m.axes.get("pack_gqa")
            and m.axes.get("dtype") == dtype and m.axes.get("head_dim") == d and not m.axes.get("paged_kv")]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True])
def test_hd64_decode_cells_take_the_64_row_form(mock, dtype, causal):
    # bench --decode at hd64, 8k keys: 32 heads, batch 16; one split fills the SMs.
    if not _forms(dtype, 64, False):
        pytest.skip(f"no {dtype} hd64 pack-GQA form in {SRC.home}")
    b, sq, sk, h, d = 16, 1, 8192, 32, 64
    q, k, v = arr((b, sq, h, d), dtype), arr((b, sk, h, d), dtype), arr((b, sk, h, d), dtype)
    attention.flash_attn_func(q, k, v, causal=causal, out=arr(q.shape, dtype), lse=arr((b, h, sq), "f32"),
                              source=SRC)
    assert mock.counts["cuLaunchKernelEx"] == 1                     # no split, no combine
    want = [m.variant for m in _forms(dtype, 64, False) if m.axes["causal"] == causal]
    assert last_launch().variant in want


@pytest.mark.parametrize("dtype,d", [("fp16", 128), ("bf16", 256), ("fp16", 256), ("bf16", 64)])
def test_long_decode_cells_of_every_head_dim_split(mock, dtype, d):
    # bench --decode at 32k keys: batch 4, 2048 / d heads (hd64: 2 x 32 so the tiles under-fill).
    if not _forms(dtype, d, True):
        pytest.skip(f"no {dtype} hd{d} split-KV form in {SRC.home}")
    h = 2048 // d
    b = 2 if d == 64 else 4
    q, k, v = arr((b, 1, h, d), dtype), arr((b, 32768, h, d), dtype), arr((b, 32768, h, d), dtype)
    attention.flash_attn_func(q, k, v, causal=True, out=arr(q.shape, dtype), lse=arr((b, h, 1), "f32"), source=SRC)
    assert mock.counts["cuLaunchKernelEx"] == 2                     # forward + combine
    assert last_launch().variant in [m.variant for m in _forms(dtype, d, True)]
    assert "attn-combine" in last_launch().note
