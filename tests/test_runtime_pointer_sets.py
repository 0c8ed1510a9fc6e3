"""flash_attn_func's cached layouts keep parameters per pointer set (attention._Cached.plans):
the layers of a model call one layout with their own buffers in turn, and a set seen before
launches its own parameters with nothing rewritten. Every launch's bytes equal a plan built
afresh for those buffers; past the cap the last plan is rewritten in place, as before; a
misaligned set is still refused. Mocked driver (bench/host_overhead.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import arr, fa_arrays, manifest, refused_or_copied, registry_source  # noqa: E402

from cubinforge.runtime import Kernel, flash_attn_func, select_attention_variant  # noqa: E402
from cubinforge.runtime import attention  # noqa: E402

CUBIN = b"\x7fELF not really"
GB = 1 << 30


@pytest.fixture
def source(tmp_path):
    with registry_source(tmp_path, [manifest(dtype="bf16", hd=128, cubin=CUBIN)], [CUBIN]) as src:
        yield src


def layer(i):
    """Layer i's buffers: one layout, addresses of its own (16 GB apart)."""
    t = fa_arrays()
    return {n: arr(a.shape, a.dtype, base=a.ptr + i * 16 * GB) for n, a in t.items()}


def call(t, source):
    return flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, stream=0x77)


def launched_bytes(mock):
    """The parameter bytes the last cuLaunchKernelEx was handed (the plan it named)."""
    (ent,) = attention._calls.values()
    assert mock.last_launch[2] == ent.plan.pointers._addr
    return b"".join(bytes(b) for b in ent.plan.buffers)


def fresh_bytes(t, source):
    k = Kernel.from_manifest(select_attention_variant("bf16", 128, False, arch="sm_90a", source=source), source)
    return b"".join(bytes(b) for b in k.build_plan(t, {}, 0).buffers)


def test_layers_in_turn_launch_their_own_parameters(mock, source):
    layers = [layer(i) for i in range(4)]
    want = [fresh_bytes(t, source) for t in layers]
    mock.counts.clear()
    for t in layers:                                          # first pass: each set checked once
        call(t, source)
    assert mock.counts["cuTensorMapEncodeTiled"] == 1 and mock.counts["cuTensorMapReplaceAddress"] == 3
    (ent,) = attention._calls.values()
    assert len(ent.plans) == 4
    mock.counts.clear()
    for _ in range(3):
        for t, w in zip(layers, want):
            call(t, source)
            assert launched_bytes(mock) == w
    assert mock.counts["cuTensorMapReplaceAddress"] == 0 and mock.counts["cuTensorMapEncodeTiled"] == 0
    assert mock.counts["cuLaunchKernelEx"] == 12


def test_past_the_cap_the_last_plan_is_rewritten(mock, source, monkeypatch):
    monkeypatch.setattr(attention, "_MAX_POINTER_SETS", 2)
    layers = [layer(i) for i in range(3)]
    want = [fresh_bytes(t, source) for t in layers]
    for _ in range(2):
        for t, w in zip(layers, want):
            call(t, source)
            assert launched_bytes(mock) == w
    (ent,) = attention._calls.values()
    assert len(ent.plans) == 2 and ent.ptrs in ent.plans


def test_a_misaligned_set_is_refused_after_others_were_kept(mock, source):
    call(layer(0), source)
    call(layer(1), source)
    bad = dict(layer(2), q=arr(layer(2)["q"].shape, "bf16", base=layer(2)["q"].ptr + 2))
    refused_or_copied(mock, lambda: call(bad, source))
    (ent,) = attention._calls.values()
    assert bad["q"].ptr not in {p[0] for p in ent.plans}
    call(layer(0), source)                                    # the kept sets still launch
    assert launched_bytes(mock) == fresh_bytes(layer(0), source)
