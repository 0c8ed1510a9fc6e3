"""Inputs TMA cannot read in place (base or a stride not 16-byte aligned, head dim
contiguous) are copied into compact buffers, named in last_launch().copies; the mocked
driver records the copies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, fa_arrays, manifest, registry_source  # noqa: E402

from cubinforge.runtime import flash_attn_func, last_launch, plan_attention  # noqa: E402
from cubinforge.runtime.arrays import DeviceArray  # noqa: E402
from cubinforge.runtime.restage import needs_copy  # noqa: E402

CUBIN = b"\x7fELF not really"
GB = 1 << 30


@pytest.fixture
def source(tmp_path):
    with registry_source(tmp_path, [manifest(dtype="bf16", hd=128, cubin=CUBIN)], [CUBIN]) as src:
        yield src


def call(t, source):
    return flash_attn_func(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)


def test_needs_copy():
    assert not needs_copy(DeviceArray(BASE, (2, 3, 4, 128), None, "bf16"))
    assert needs_copy(DeviceArray(BASE + 8, (2, 3, 4, 128), None, "bf16"))
    assert needs_copy(DeviceArray(BASE, (2, 3, 4, 128), (3 * 4 * 132, 4 * 132, 132, 1), "bf16"))
    assert not needs_copy(DeviceArray(BASE, (2, 1, 4, 128), (4 * 128, 3, 128, 1), "bf16"))   # size-1 dim
    assert not needs_copy(DeviceArray(BASE + 8, (2, 0, 4, 128), None, "bf16"))             # nothing to read


def test_misaligned_base_is_copied_whole(mock, source):
    t = fa_arrays()
    t["q"] = arr(t["q"].shape, offset=8)
    call(t, source)
    assert last_launch().copies == ("q",) and last_launch().launched
    (src, dst, nbytes), = mock.copies
    assert src == BASE + 8 and dst % 256 == 0 and nbytes == 2 * 300 * 8 * 128 * 2
    # The kernel reads the copy: q's tensor map (the fake keeps its address) points at it.
    assert mock.counts["cuMemAllocAsync"] == 1
    call(t, source)                                  # not cached: copied again
    assert len(mock.copies) == 2 and mock.counts["cuLaunchKernelEx"] == 2


def test_unaligned_stride_is_copied_by_rows(mock, source):
    t = fa_arrays()
    t["v"] = arr((2, 500, 2, 128), strides=(500 * 2 * 132, 2 * 132, 132, 1), base=BASE + 2 * GB)
    call(t, source)
    assert last_launch().copies == ("v",)
    assert mock.copies == [(BASE + 2 * GB, mock.copies[0][1], 264, 256, 256, 2 * 500 * 2)]


def test_plan_copies_at_every_launch_from_the_bound_source(mock, source):
    t = fa_arrays()
    t["k"] = arr(t["k"].shape, offset=2, base=BASE + GB)
    plan = plan_attention(t["q"], t["k"], t["v"], out=t["o"], lse=t["lse"], source=source)
    plan.launch()
    plan.launch()
    assert [c[0] for c in mock.copies] == [BASE + GB + 2] * 3          # planning, then each launch
    assert last_launch().copies == ("k",)
    plan.run(k=arr(t["k"].shape, offset=2, base=BASE + 7 * GB))
    assert mock.copies[-1][0] == BASE + 7 * GB + 2 and mock.copies[-1][1] == mock.copies[0][1]
