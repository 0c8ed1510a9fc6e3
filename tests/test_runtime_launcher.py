"""Kernel.launch and flash_attn_func end to end on the CPU, with the driver replaced by fakes:
what reaches cuLaunchKernelEx (grid, block, smem, stream, parameter bytes), plan reuse,
and the allocation path."""

from __future__ import annotations

import contextlib
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_fixtures import BASE, arr, fa_arrays, manifest, write_registry  # noqa: E402

from cubinforge.runtime import (InputError, Kernel, LocalSource, OwnedDeviceArray, clear_cache,  # noqa: E402
                                flash_attn_func, last_launch, select_attention_variant)
from cubinforge.runtime import driver, launcher, tensormap  # noqa: E402

CUBIN = b"\x7fELF not really"


class FakeDriver:
    def __init__(self, monkeypatch, arch="sm_90a"):
        self.launches, self.encodes, self.allocs, self.smem = [], 0, [], []
        fake = self

        class Fn:
            entry = "kernel_fa3_fwd"

            def require_dynamic_smem(self, n):
                fake.smem.append(n)

        class Mod:
            def function(self, entry):
                return Fn()

        class Alloc:
            def __init__(self, nbytes, device, stream, keep=None):
                self.ptr = BASE + (8 << 30) + 4096 * len(fake.allocs)
                fake.allocs.append((nbytes, device, stream))

        def encode(args):
            fake.encodes += 1
            return struct.pack("<Q", args.global_address) + bytes(120)

        def launch(fn, grid, block, cluster, smem, stream, params):
            raw = [bytes(b) for b in params._buffers]
            fake.launches.append(dict(grid=grid, block=block, cluster=cluster, smem=smem, stream=stream, params=raw))

        monkeypatch.setattr(driver, "device_arch", lambda ordinal: arch)
        # bind reads the SM count (the contracts' sm_count symbol): without this the test
        # passed only after another had filled driver's cache.
        monkeypatch.setattr(driver, "sm_count", lambda ordinal: 132)
        monkeypatch.setattr(driver, "device_context", lambda ordinal: contextlib.nullcontext())
        monkeypatch.setattr(launcher, "_current_context", lambda: 0)   # no context: the slow path
        monkeypatch.setattr(driver, "load_module", lambda image, sha: Mod())
        monkeypatch.setattr(driver, "launch", launch)
        monkeypatch.setattr(driver, "DeviceAllocation", Alloc)
        monkeypatch.setattr(tensormap, "encode", encode)


@pytest.fixture
def source(tmp_path):
    ms = [manifest(dtype=dt, hd=hd, causal=c, cubin=CUBIN) for dt in ("bf16", "fp16") for hd in (64, 128)
          for c in (False, True)]
    write_registry(tmp_path, ms, [CUBIN])
    clear_cache()
    yield LocalSource(tmp_path)
    clear_cache()


def test_kernel_launch_passes_contract_values(monkeypatch, source):
    fake = FakeDriver(monkeypatch)
    m = select_attention_variant("bf16", 128, True, arch="sm_90a", source=source)
    k = Kernel.from_manifest(m, source)
    t = fa_arrays(b=2, sq=300, sk=500, hq=8, hkv=2)
    rec = k.launch(t, {"softmax_scale": 0.5}, stream=0x1234)
    (call,) = fake.launches
    assert call["grid"] == (3, 8, 2) and call["block"] == (384, 1, 1) and call["cluster"] == (1, 1, 1)
    assert call["smem"] == 164864 and call["stream"] == 0x1234 and fake.smem == [164864]
    assert call["params"][0] == struct.pack("<4i", 300, 128, 8, 2)
    assert call["params"][2][:8] == struct.pack("<Q", t["q"].ptr)
    assert rec == last_launch() and rec.variant == m.variant and rec.device == 0


def test_repeated_launch_reuses_the_plan(monkeypatch, source):
    fake = FakeDriver(monkeypatch)
    k = Kernel.from_manifest(select_attention_variant("bf16", 128, False, arch="sm_90a", source=source), source)
    t = fa_arrays()
    k.launch(t)
    k.launch(t)
    assert fake.encodes == 1 and len(fake.launches) == 2
    assert fake.launches[0]["params"] == fake.launches[1]["params"]
    t2 = dict(t, q=arr(t["q"].shape, base=BASE + (16 << 30)))     # a new q buffer: new plan
    k.launch(t2)
    assert fake.encodes == 2 and fake.launches[2]["params"][2][:8] == struct.pack("<Q", BASE + (16 << 30))
    k.launch(t, {"softmax_scale": 0.25})                             # a new scalar: new plan
    assert fake.launches[3]["params"][3] != fake.launches[0]["params"][3]


def test_wrong_arch_device_is_refused(monkeypatch, source):
    FakeDriver(monkeypatch, arch="sm_100a")
    k = Kernel.from_manifest(select_attention_variant("bf16", 128, False, arch="sm_90a", source=source), source)
    with pytest.raises(InputError, match="built for sm_90a; device 0 is sm_100a"):
        k.launch(fa_arrays())


def test_flash_attn_func_given_outputs(monkeypatch, source):
    fake = FakeDriver(monkeypatch)
    t = fa_arrays(b=1, sq=17, sk=40, hq=4, hkv=1, d=64, dtype="fp16")
    out, lse = flash_attn_func(t["q"], t["k"], t["v"], causal=True, out=t["o"], lse=t["lse"],
                               stream=0x99, source=source)
    assert out is t["o"] and lse is t["lse"] and not fake.allocs
    assert last_launch().variant == "fa3_fwd-sm_90a-fp16-hd64-causal"
    assert fake.launches[0]["stream"] == 0x99 and fake.launches[0]["grid"] == (1, 4, 1)


def test_flash_attn_func_allocates_outputs(monkeypatch, source):
    fake = FakeDriver(monkeypatch)
    t = fa_arrays(b=2, sq=17, sk=40, hq=4, hkv=2, d=128)
    out, lse = flash_attn_func(t["q"], t["k"], t["v"], source=source)
    assert isinstance(out, OwnedDeviceArray) and isinstance(lse, OwnedDeviceArray)
    assert out.shape == (2, 17, 4, 128) and out.dtype == "bf16" and out.strides == (17 * 4 * 128, 4 * 128, 128, 1)
    assert lse.shape == (2, 4, 17) and lse.dtype == "f32" and lse.strides == (68, 17, 1)
    assert [a[0] for a in fake.allocs] == [2 * 17 * 4 * 128 * 2, 2 * 4 * 17 * 4]
    assert out.__cuda_array_interface__["typestr"] == "<V2" and out.__dlpack_device__() == (2, 0)
    assert last_launch().variant == "fa3_fwd-sm_90a-bf16-hd128"


def test_missing_variant_is_reported_before_anything_runs(monkeypatch, source):
    fake = FakeDriver(monkeypatch)
    t = fa_arrays(d=96)
    with pytest.raises(LookupError, match="head_dim=96"):
        flash_attn_func(t["q"], t["k"], t["v"], source=source)
    assert not fake.launches and not fake.allocs


def test_flash_attn_func_lets_the_dispatcher_choose_by_shape(monkeypatch, tmp_path):
    """Two hd128 causal variants: the persistent one up to 3,072 query rows, lpt beyond;
    each variant's module is loaded once however many shapes choose it."""
    fake = FakeDriver(monkeypatch)
    loads = []
    real = Kernel.from_manifest.__func__

    def counting(cls, m, src):
        loads.append(m.variant)
        return real(cls, m, src)

    monkeypatch.setattr(Kernel, "from_manifest", classmethod(counting))
    ms = [manifest(causal=True, cubin=CUBIN, variant=f"fa3_fwd-sm_90a-bf16-hd128-causal-{s}", scheduler=s)
          for s in ("lpt", "persistent")]
    write_registry(tmp_path, ms, [CUBIN])
    clear_cache()
    src = LocalSource(tmp_path)
    for sq, want in ((512, "persistent"), (300, "persistent"), (4096, "lpt"), (3073, "lpt"), (512, "persistent")):
        t = fa_arrays(b=1, sq=sq, sk=sq, hq=4, hkv=4, d=128)
        flash_attn_func(t["q"], t["k"], t["v"], causal=True, source=src)
        assert last_launch().variant.endswith(want), (sq, last_launch().variant)
    assert sorted(loads) == sorted(m["variant"] for m in ms)
    assert len(fake.launches) == 5
    clear_cache()
