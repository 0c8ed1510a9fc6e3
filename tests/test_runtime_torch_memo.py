"""The repeated torch call's layout memo (attention._torch_memo, issue 10's host path): a call
whose layout equals the last hit's launches that entry without building the call key, and it
is never reused for anything that differs - new pointers are rewritten, new strides, shapes,
dtypes, devices, causal or scale take the keyed lookup or the full path, a tensor the
attribute path does not take goes through DLPack, and clear_cache forgets it. Stand-in torch
tensors and module, mocked driver (bench/host_overhead.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")
if importlib.util.find_spec("torch") is not None:
    pytest.skip("torch is installed: tests/gpu covers real tensors", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, manifest, refused_or_copied, registry_source, write_registry  # noqa: E402

from cubinforge.bench.host_overhead import FakeTorchTensor, fake_torch_module  # noqa: E402
from cubinforge.runtime import LocalSource, VariantNotFound, clear_cache, flash_attn_func  # noqa: E402
from cubinforge.runtime import attention  # noqa: E402

CUBIN = b"\x7fELF not really"
GB = 1 << 30
Q = (2, 300, 8, 128)
KV = (2, 500, 2, 128)


@pytest.fixture
def torch_mod():
    with fake_torch_module() as t:
        yield t


@pytest.fixture
def source(tmp_path):
    with registry_source(tmp_path, [manifest(dtype="bf16", hd=128, causal=c, cubin=CUBIN) for c in (False, True)], [CUBIN]) as src:
        yield src


def tensors(base=BASE, dtype="bf16", **kw):
    return {"q": FakeTorchTensor(base, Q, dtype, **kw), "k": FakeTorchTensor(base + GB, KV, dtype, **kw),
            "v": FakeTorchTensor(base + 2 * GB, KV, dtype, **kw), "o": FakeTorchTensor(base + 3 * GB, Q, dtype, **kw),
            "lse": FakeTorchTensor(base + 4 * GB, (2, 8, 300), "f32", **kw)}


def call(t, source, **kw):
    kw.setdefault("stream", 0)             # torch's current stream (the fake's): no ordering event
    return flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, **kw)


def address_of(ent, name):
    """The address the entry's parameters hold for tensor ``name`` (the fake descriptor keeps
    it in its first 8 bytes; a pointer field holds it at its offset); for a tensor no
    parameter points at (the test contract's o), the pointer the entry's plan records."""
    where = ent.kernel.pointer_params(name)
    if not where:
        return ent.plan.bound.tensors[name].ptr
    ordinal, how, off = where[0]
    raw = bytes(ent.plan.buffers[ordinal])
    return int.from_bytes(raw[off:off + 8], "little")


def primed(t, source):
    """Two calls: the first checks and caches, the second hits by key and sets the memo."""
    call(t, source)
    call(t, source)
    m = attention._torch_memo[0]
    assert m is not None and m[5] is next(iter(attention._calls.values()))
    return m


def test_a_repeated_call_launches_from_the_memo_without_the_key(mock, torch_mod, source, monkeypatch):
    t = tensors()
    primed(t, source)
    looked = []
    monkeypatch.setattr(attention, "torch_fields", lambda *a: looked.append(a) or None)
    mock.counts.clear()
    call(t, source)
    assert not looked                                        # no keyed lookup: the memo hit
    assert dict(mock.counts) == {"cuCtxGetCurrent": 1, "cuLaunchKernelEx": 1}


def test_new_pointers_through_the_memo_are_rewritten_and_launched(mock, torch_mod, source):
    t = tensors()
    m = primed(t, source)
    ent = m[5]
    t2 = dict(t, q=FakeTorchTensor(BASE + 9 * GB, Q, "bf16"), o=FakeTorchTensor(BASE + 10 * GB, Q, "bf16"))
    mock.counts.clear()
    call(t2, source)
    assert address_of(ent, "q") == BASE + 9 * GB and address_of(ent, "o") == BASE + 10 * GB
    assert mock.counts["cuLaunchKernelEx"] == 1 and mock.counts["cuTensorMapEncodeTiled"] == 0
    call(t, source)                                          # and back to the first buffers
    assert address_of(ent, "q") == BASE and address_of(ent, "o") == BASE + 3 * GB
    assert len(attention._calls) == 1


def test_a_misaligned_pointer_is_not_launched_from_the_memo(mock, torch_mod, source):
    t = tensors()
    m = primed(t, source)
    bad = dict(t, q=FakeTorchTensor(BASE + 9 * GB + 2, Q, "bf16"))
    # The full path either refused it or copied q into an aligned buffer; the entry still
    # holds the aligned pointer it had.
    refused_or_copied(mock, lambda: call(bad, source))
    assert address_of(m[5], "q") == BASE


@pytest.mark.parametrize("change", ["strides", "shape", "dtype", "device", "causal", "scale"])
def test_anything_but_pointers_is_not_taken_from_the_memo(mock, torch_mod, source, change):
    t = tensors()
    m = primed(t, source)
    kw = {}
    if change == "strides":      # q with padded rows: same shape, other strides
        t = dict(t, q=FakeTorchTensor(BASE, Q, "bf16", strides=(300 * 8 * 256, 8 * 256, 256, 1)))
    elif change == "shape":      # fewer query rows, outputs to match
        t = dict(t, q=FakeTorchTensor(BASE, (2, 299, 8, 128), "bf16"), o=FakeTorchTensor(BASE + 3 * GB, (2, 299, 8, 128), "bf16"),
                 lse=FakeTorchTensor(BASE + 4 * GB, (2, 8, 299), "f32"))
    elif change == "dtype":      # fp16: no fp16 variant in this registry
        t = tensors(dtype="fp16")
    elif change == "device":
        t = tensors(device=1)
        mock.pointer_device = 1
    elif change == "causal":
        kw["causal"] = True
    else:
        kw["softmax_scale"] = 0.125
    mock.counts.clear()
    if change == "dtype":
        with pytest.raises(VariantNotFound):                # the full path's error, as with no cache
            call(t, source, **kw)
        return
    call(t, source, **kw)
    # A new layout: checked and encoded in full as a new entry, the memo's entry untouched.
    assert mock.counts["cuTensorMapEncodeTiled"] >= 1 and len(attention._calls) == 2
    assert address_of(m[5], "q") == BASE
    assert attention._torch_memo[0] is m                     # a miss does not move the memo


def test_what_the_attribute_path_does_not_take_goes_through_dlpack(mock, torch_mod, source):
    t = tensors()
    primed(t, source)
    g = dict(t, k=FakeTorchTensor(BASE + GB, KV, "bf16", requires_grad=True))
    with pytest.raises(RuntimeError, match="gradient"):     # torch's own DLPack refusal
        call(g, source)
    s = FakeTorchTensor(BASE + GB, KV, "bf16")

    def no_strides():
        raise RuntimeError("sparse tensors do not have strides")
    s.stride = no_strides
    call(dict(t, k=s), source)                               # read from its capsule instead
    assert s.exports == 1


def test_clear_cache_forgets_the_memo(mock, torch_mod, source):
    t = tensors()
    primed(t, source)
    clear_cache()
    assert attention._torch_memo[0] is None
    mock.counts.clear()
    call(t, source)                                          # checked and encoded again
    assert mock.counts["cuTensorMapEncodeTiled"] >= 1


def test_another_source_does_not_take_the_memo(mock, torch_mod, source, tmp_path):
    t = tensors()
    m = primed(t, source)
    other = LocalSource(write_registry(tmp_path / "other", [manifest(dtype="bf16", hd=128, cubin=CUBIN)], [CUBIN]))
    mock.counts.clear()
    call(t, other)
    assert len(attention._calls) == 2 and mock.counts["cuTensorMapEncodeTiled"] >= 1
    assert attention._torch_memo[0] is m
