"""plan_attention / AttentionPlan under the mocked driver: bound once, launched as is, or
pointed at other buffers with only the parameters holding a changed pointer rewritten."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, fa_arrays, manifest, registry_source  # noqa: E402

from cubinforge.bench.host_overhead import FakeCAIArray  # noqa: E402
from cubinforge.runtime import (AttentionPlan, DeviceArray, InputError, flash_attn_func,  # noqa: E402
                                last_launch, launch_count, plan_attention)

CUBIN = b"\x7fELF not really"
GB = 1 << 30


@pytest.fixture
def source(tmp_path):
    ms = [manifest(dtype="bf16", hd=128, causal=c, cubin=CUBIN) for c in (False, True)]
    with registry_source(tmp_path, ms, [CUBIN]) as src:
        yield src


def plan_of(t, source, **kw):
    return plan_attention(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source, **kw)


def param_bytes(plan: AttentionPlan) -> bytes:
    return b"".join(bytes(b) for b in plan._plan.buffers)


def test_launch_replays_the_bound_bytes(mock, source):
    t = fa_arrays()
    plan = plan_of(t, source, causal=True, stream=0x33)
    assert plan.variant.endswith("-causal") and mock.counts["cuLaunchKernelEx"] == 0   # planning launches nothing
    before = launch_count()
    plan.launch()                                   # the first loads the module
    assert mock.counts["cuModuleLoadData"] == 1
    mock.counts.clear()
    for _ in range(4):
        out, lse = plan.launch()
    assert out is t["o"] and lse is t["lse"]
    assert dict(mock.counts) == {"cuCtxGetCurrent": 4, "cuLaunchKernelEx": 4}   # nothing checked or encoded
    assert launch_count() == before + 5
    assert last_launch().stream == 0x33 and last_launch().grid == (3, 8, 2)
    plan.launch(0x44)
    assert last_launch().stream == 0x44 and int(mock.last_launch[0].hStream) == 0x44


def test_plan_allocates_missing_outputs_once(mock, source):
    t = fa_arrays()
    plan = plan_attention(t["q"], t["k"], t["v"], source=source)
    assert mock.counts["cuMemAllocAsync"] == 2
    o1, l1 = plan.launch()
    o2, l2 = plan.launch()
    assert o1 is o2 and l1 is l2 and o1.shape == t["q"].shape and mock.counts["cuMemAllocAsync"] == 2


@pytest.mark.parametrize("name", ["q", "k", "v", "o", "lse"])
def test_run_rewrites_only_changed_pointers_to_what_a_new_plan_would_pack(mock, source, name):
    t = fa_arrays()
    plan = plan_of(t, source)
    moved = dict(t)
    moved[name] = arr(t[name].shape, t[name].dtype, base=BASE + 9 * GB)
    mock.counts.clear()
    plan.run(**{("out" if name == "o" else name): moved[name]})
    # The fixture contract maps q with TMA; lse's pointer lives in a struct; o and k/v in none.
    assert mock.counts["cuTensorMapReplaceAddress"] == (1 if name == "q" else 0)
    assert mock.counts["cuTensorMapEncodeTiled"] == 0 and mock.counts["cuLaunchKernelEx"] == 1
    fresh = plan_of(moved, source)
    assert param_bytes(plan) == param_bytes(fresh)
    if name == "q":
        assert int.from_bytes(bytes(plan._plan.buffers[2])[:8], "little") == BASE + 9 * GB


def test_run_does_not_disturb_flash_attn_func_cache(mock, source):
    t = fa_arrays()
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    cached = mock.last_launch[2]
    plan = plan_of(t, source)
    plan.run(q=arr(t["q"].shape, base=BASE + 9 * GB))
    flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    assert mock.last_launch[2] == cached


def test_run_with_the_same_buffers_rewrites_nothing(mock, source):
    t = fa_arrays()
    plan = plan_of(t, source)
    before = param_bytes(plan)
    mock.counts.clear()
    plan.run(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"])
    assert param_bytes(plan) == before and "cuTensorMapReplaceAddress" not in mock.counts


def test_run_refuses_what_the_plan_cannot_take(mock, source):
    t = fa_arrays()
    plan = plan_of(t, source)
    with pytest.raises(InputError, match=r"q must be laid out as the planned one: shape \(2, 300, 8, 128\)"):
        plan.run(q=arr((2, 301, 8, 128), base=BASE + 9 * GB))
    with pytest.raises(InputError, match="strides"):
        plan.run(q=arr(t["q"].shape, strides=(300 * 8 * 256, 8 * 256, 256, 1), base=BASE + 9 * GB))
    with pytest.raises(InputError, match="not 16-byte aligned"):
        plan.run(q=arr(t["q"].shape, base=BASE + 9 * GB + 8))
    with pytest.raises(InputError, match="on device 1; the plan was made on device 0"):
        plan.run(k=arr(t["k"].shape, base=BASE + 9 * GB, device=1))
    ro = DeviceArray(BASE + 9 * GB, t["o"].shape, None, "bf16", 0, readonly=True)
    with pytest.raises(InputError, match="o is read-only"):
        plan.run(out=ro)
    assert mock.counts["cuLaunchKernelEx"] == 0


def test_run_locates_cai_arrays(mock, source):
    t = fa_arrays()
    plan = plan_of(t, source)
    q2 = FakeCAIArray(BASE + 9 * GB, t["q"].shape, "bf16")
    mock.pointer_devices[BASE + 9 * GB] = 1
    with pytest.raises(InputError, match="on device 1"):
        plan.run(q=q2)
    mock.pointer_devices.clear()
    plan.run(q=q2)
    assert mock.counts["cuLaunchKernelEx"] == 1


def test_plan_runs_the_same_checks_as_flash_attn_func(mock, source):
    t = fa_arrays()
    with pytest.raises(InputError, match=r"heads_q \(8\) must be a multiple of heads_kv \(3\)"):
        plan_attention(t["q"], arr((2, 500, 3, 128)), arr((2, 500, 3, 128)), source=source)
    with pytest.raises(InputError, match="not 16-byte aligned"):
        plan_attention(t["q"], t["k"], t["v"], out=arr(t["o"].shape, offset=8, base=BASE + 3 * GB), source=source)
