"""flash_attn_with_kvcache's plumbing against the real contracts of built inference variants,
with the driver faked: every launch it prepares binds (names, dtypes, shapes, alignment,
checks), packs its parameters and validates its tensor-map recipes. Skips unless the local
registry ($CUBINFORGE_HOME or ./.cubinforge) holds the bf16 hd128 decode variants (the
default set has them: `make kernels ARCH=sm90`)."""

from __future__ import annotations

import itertools

import pytest

from cubinforge.runtime import kvcache, launcher
from cubinforge.runtime.arrays import DeviceArray, OwnedDeviceArray
from cubinforge.runtime.registry_source import LocalSource, manifests
from test_runtime_fixtures import checked_plan

# Pinned here: other tests swap the process's default source while they run.
SRC = LocalSource()
_found, _ = manifests(SRC, "fa3_fwd")
HAVE = [m for m in _found if m.axes.get("pack_gqa") and m.axes.get("dtype") == "bf16" and m.axes.get("head_dim") == 128]
pytestmark = pytest.mark.skipif(len(HAVE) < 4, reason=f"no bf16 hd128 decode variants in {SRC.home}")
_ptr = itertools.count(1 << 32, 1 << 24)


def arr(shape, dtype):
    return DeviceArray.from_pointer(next(_ptr), tuple(shape), None, dtype, device=0)  # compact row-major


@pytest.fixture
def fake_driver(monkeypatch):
    launched = []
    d = kvcache.driver
    monkeypatch.setattr(d, "device_arch", lambda dev: "sm_90a")
    monkeypatch.setattr(d, "sm_count", lambda dev: 132)
    monkeypatch.setattr(d, "resolve_stream", lambda s: (0, None))
    monkeypatch.setattr(OwnedDeviceArray, "empty", classmethod(lambda cls, shape, dtype, device, stream=None, strides=None: arr(shape, dtype)))
    monkeypatch.setattr(kvcache, "_fill_i32", lambda value, n, device, stream, handle: arr((n,), "i32"))

    monkeypatch.setattr(launcher.Kernel, "plan", checked_plan)
    monkeypatch.setattr(launcher.Kernel, "run", lambda self, plan, stream: launched.append((self.variant, plan.grid)))
    kvcache.clear_cache()
    yield launched
    kvcache.clear_cache()


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("num_splits", [0, 1, 5])
@pytest.mark.parametrize("sq,causal", [(1, True), (4, True), (4, False)])
def test_every_launch_binds_its_contract(fake_driver, paged, num_splits, sq, causal):
    b, hq, hkv, d = 8, 32, 8, 128
    q = arr((b, sq, hq, d), "bf16")
    if paged:
        k, v, table = arr((b * 16, 256, hkv, d), "bf16"), arr((b * 16, 256, hkv, d), "bf16"), arr((b, 16), "i32")
    else:
        k, v, table = arr((b, 4096, hkv, d), "bf16"), arr((b, 4096, hkv, d), "bf16"), None
    seqlens = arr((b,), "i32")
    out, lse = kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, page_table=table, causal=causal,
                                               num_splits=num_splits, source=SRC)
    names = [n for n, _ in fake_driver]
    assert all("packgqa" in n for n in names if n.startswith("fa3")), names
    assert all(("paged" in n) == paged for n in names if n.startswith("fa3")), names
    if num_splits == 5:
        assert "splitkv" in names[0] and names[1].startswith("attn-combine") and fake_driver[0][1][0] == 5
    assert out.shape == q.shape and lse.shape == (b, hq, sq)


def test_append_binds_and_runs_first(fake_driver):
    b, hq, hkv, d = 4, 16, 4, 128
    q = arr((b, 2, hq, d), "bf16")
    k, v, table = arr((64, 16, hkv, d), "bf16"), arr((64, 16, hkv, d), "bf16"), arr((b, 16), "i32")
    kvcache.flash_attn_with_kvcache(q, k, v, k=arr((b, 2, hkv, d), "bf16"), v=arr((b, 2, hkv, d), "bf16"),
                                    cache_seqlens=100, page_table=table, source=SRC)
    names = [n for n, _ in fake_driver]
    if not names[0].startswith("kv-append"):
        pytest.fail(f"append must launch first: {names}")
    assert fake_driver[0][1] == (2, hkv, b)


def test_explicit_unpacked_form_is_used_when_built(fake_driver):
    if not any(not m.axes.get("pack_gqa") and m.axes.get("split_kv") for m in _found):
        pytest.skip("no unpacked split form built (SET=inference)")
    q = arr((2, 1, 8, 128), "bf16")
    k, v = arr((2, 4096, 8, 128), "bf16"), arr((2, 4096, 8, 128), "bf16")
    kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=4000, pack_gqa=False, num_splits=3, source=SRC)
    assert "packgqa" not in fake_driver[0][0] and "splitkv" in fake_driver[0][0]
    assert fake_driver[0][1] == (3, 8, 2)  # 1 m tile x 3 splits, 8 query heads, batch 2


def test_small_pages_gather_then_attend_dense(fake_driver):
    found, _ = manifests(SRC, "kv_gather")
    if not found:
        pytest.skip("no kv_gather built")
    b, hq, hkv, d = 2, 16, 4, 128
    q = arr((b, 1, hq, d), "bf16")
    k, v, table = arr((512, 1, hkv, d), "bf16"), arr((512, 1, hkv, d), "bf16"), arr((b, 200), "i32")
    kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=arr((b,), "i32"), page_table=table, source=SRC)
    names = [n for n, _ in fake_driver]
    assert names[0].startswith("kv-gather") and fake_driver[0][1] == (200, hkv, b)
    assert "paged" not in names[1], names


# --------------------------------------------------------------------------- cache_batch_idx

@pytest.mark.parametrize("s_cache", [4096, 4000])      # whole 128-key tiles per page, and 16-row boxes
@pytest.mark.parametrize("append", [False, True])
def test_cache_batch_idx_runs_the_paged_forms_over_the_dense_cache(fake_driver, monkeypatch, s_cache, append):
    b, hq, hkv, d = 4, 16, 4, 128
    bound = []
    real = launcher.Kernel.plan

    def spy(self, arrays, scalars, stream=0):
        bound.append((self.variant, dict(arrays)))
        return real(self, arrays, scalars, stream)

    monkeypatch.setattr(launcher.Kernel, "plan", spy)
    q = arr((b, 1, hq, d), "bf16")
    k, v = arr((12, s_cache, hkv, d), "bf16"), arr((12, s_cache, hkv, d), "bf16")  # 12 cache rows, batch 4
    idx = arr((b,), "i32")
    new = dict(k=arr((b, 1, hkv, d), "bf16"), v=arr((b, 1, hkv, d), "bf16")) if append else {}
    kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=arr((b,), "i32"), cache_batch_idx=idx, source=SRC, **new)
    names = [n for n, _ in fake_driver]
    fwd = [n for n in names if n.startswith("fa3")]
    assert fwd and all("paged" in n for n in fwd), names
    assert not any(n.startswith("kv-gather") for n in names), "no copy of the cache"
    if append:
        assert names[0].startswith("kv-append") and "paged" in names[0]
    for variant, arrays in bound:
        if "page_table" in arrays:
            t = arrays["page_table"]        # cache_batch_idx itself, viewed (batch, 1)
            assert (t.ptr, t.shape, t.dtype) == (idx.ptr, (b, 1), "i32"), variant
        for name in ("k", "k_cache"):
            if name in arrays and arrays[name].shape[0] == 12:
                assert arrays[name].ptr == k.ptr and arrays[name].shape == (12, s_cache, hkv, d)


@pytest.mark.parametrize("kw,match", [
    (dict(s_cache=4001), "multiple of 16"),
    (dict(idx=("i32", (5,))), r"int32 \(batch=4,\)"),
    (dict(idx=("f32", (4,))), r"int32 \(batch=4,\)"),
    (dict(page_table=True), "with a page_table"),
])
def test_cache_batch_idx_errors(fake_driver, kw, match):
    b, hq, hkv, d = 4, 16, 4, 128
    s_cache = kw.get("s_cache", 4096)
    dt, shape = kw.get("idx", ("i32", (b,)))
    k = arr((12, s_cache, hkv, d), "bf16")
    with pytest.raises(kvcache.InputError, match=match):
        kvcache.flash_attn_with_kvcache(arr((b, 1, hq, d), "bf16"), k, k, cache_seqlens=10,
                                        cache_batch_idx=arr(shape, dt),
                                        page_table=arr((b, 1), "i32") if kw.get("page_table") else None, source=SRC)
    assert not fake_driver


def test_cache_batch_idx_checked_on_the_host(fake_driver, monkeypatch):
    monkeypatch.setattr(kvcache, "_to_host_i32", lambda a, device, handle: [0, 11, 12, -1])
    k = arr((12, 4096, 4, 128), "bf16")
    with pytest.raises(kvcache.InputError, match=r"outside the cache's 0..11 at \[2\] = 12, \[3\] = -1"):
        kvcache.flash_attn_with_kvcache(arr((4, 1, 16, 128), "bf16"), k, k, cache_seqlens=10,
                                        cache_batch_idx=arr((4,), "i32"), check=True, source=SRC)
    assert not fake_driver
