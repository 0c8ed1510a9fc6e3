"""The sm_100a launch contracts through both launchers, with no GPU: the C++ loader (compiled
against a rendered bundle, linked with the stub libcuda) and the Python runtime must bind the
same grid and identical parameter bytes, tensor-map requests included; and both must refuse
the variants, which have never run, unless the caller opts in."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime" / "cpp" / "tests"))
import harness  # noqa: E402

from cubinforge.generator.kernels.fa4_fwd_sm100 import SWIZZLE_BYTES, tma_boxes  # noqa: E402
from cubinforge.generator.kernels.fa4_fwd_sm100.config import FwdConfig  # noqa: E402
from cubinforge.generator.kernels.fa4_fwd_sm100.contract import family_contract  # noqa: E402
from cubinforge.runtime import DeviceArray, Kernel, UnverifiedVariant, load_manifest  # noqa: E402
from cubinforge.runtime.contract import bind, load_contract  # noqa: E402
from cubinforge.runtime.params import param_bytes  # noqa: E402

SPECS = [(dt, hd, causal) for dt in ("bf16", "fp16") for hd in (64, 128) for causal in (False, True)]
UNVERIFIED = {"status": "unverified", "reason": "no fa4_fwd cubin for sm_100a has ever been run on a GPU",
              "arch_verified": False}
# cuda.h enum values for the names the contracts use.
ENUMS = {"CU_TENSOR_MAP_DATA_TYPE_BFLOAT16": 9, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16": 6,
         "CU_TENSOR_MAP_INTERLEAVE_NONE": 0, "CU_TENSOR_MAP_SWIZZLE_128B": 3,
         "CU_TENSOR_MAP_L2_PROMOTION_L2_128B": 2, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE": 0}


def fa4_manifest(dtype: str, hd: int, causal: bool) -> tuple[dict, bytes]:
    """A manifest as the build writes it, from the family's own contract (cutlass-free); the
    entry and smem sizes stand in for the compiler's (test_fa4_static checks the real ones)."""
    cfg = FwdConfig("sm_100a", dtype, hd, causal)
    name = f"fa4-fwd-sm_100a-{dtype}-hd{hd}-{'causal' if causal else 'noncausal'}"
    cubin = b"\x7fELF stand-in for " + name.encode()
    contract = {"contract_version": 1, "variant": name, "arch": "sm_100a", "entry": "kernel_fa4_fwd_0",
                "block": [cfg.threads, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": cfg.smem_bytes + 2048,
                "static_smem_bytes": 1024, **family_contract(cfg, tma_boxes(cfg), SWIZZLE_BYTES)}
    axes = {"arch": "sm_100a", "dtype": dtype, "head_dim": hd, "causal": causal, "varlen": False,
            "paged_kv": False, "pack_gqa": False, "split_kv": False, "scheduler": "single",
            "tile_m": cfg.tile_m, "tile_n": cfg.tile_n}
    return ({"manifest_version": 1, "variant": name, "family": "fa4_fwd", "axes": axes,
             "cubin": {"sha256": hashlib.sha256(cubin).hexdigest(), "size": len(cubin)},
             "contract": contract, "metadata": {}, "provenance": {"verification": dict(UNVERIFIED)}}, cubin)


def serialise(recipe, array, tensor=None) -> bytes:
    """The C++ test's serialisation of a cuTensorMapEncodeTiled request (param_dump.cpp)."""
    from cubinforge.runtime.tensormap import tensormap_args

    a = tensormap_args(recipe, array, tensor)
    out = struct.pack("<IIQ", ENUMS[a.data_type], a.rank, a.global_address)
    out += struct.pack("<4Q", *a.global_dim) + struct.pack("<3Q", *a.global_strides)
    out += struct.pack("<4I", *a.box) + struct.pack("<4I", *a.element_strides)
    out += struct.pack("<4I", *(ENUMS[x] for x in (a.interleave, a.swizzle, a.l2_promotion, a.oob_fill)))
    return out.ljust(128, b"\0")


def python_dump(m: dict) -> list[str]:
    c = load_contract(m["contract"])
    dt, d = m["axes"]["dtype"], m["axes"]["head_dim"]
    arrays = {
        "q": DeviceArray.from_pointer(0x10000000, (2, 300, 8, d), dtype=dt),
        "k": DeviceArray.from_pointer(0x20000000, (2, 500, 2, d), dtype=dt),
        "v": DeviceArray.from_pointer(0x30000000, (2, 500, 2, d), dtype=dt),
        "o": DeviceArray.from_pointer(0x40000000, (2, 300, 8, d), dtype=dt),
        "lse": DeviceArray.from_pointer(0x50000000, (2, 8, 300), dtype="f32"),
    }
    b = bind(c, arrays, None, {"sm_count": 148})
    lines = [f"variant {m['variant']}",
             "grid {} {} {} block {} {} {} cluster {} {} {} smem {}".format(
                 *b.grid, *c.block, *c.cluster, c.dynamic_smem_bytes)]
    for p in c.params:
        lines.append(f"param {p.ordinal} {p.offset} {p.size} {param_bytes(p, b, serialise).hex()}")
    return lines


@pytest.fixture(scope="module")
def cpp_dump(tmp_path_factory):
    harness.skip_unless_bundle_tools()
    tmp = tmp_path_factory.mktemp("fa4-cpp")
    made = [fa4_manifest(*s) for s in SPECS]
    exe = harness.build_bundle_program(tmp, made, "param_dump")
    env = {k: v for k, v in os.environ.items() if k != "CUBINFORGE_ALLOW_UNVERIFIED"}
    out = subprocess.run([str(exe)], cwd=tmp / "bundle", env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    allowed = subprocess.run([str(exe)], cwd=tmp / "bundle", env={**env, "CUBINFORGE_ALLOW_UNVERIFIED": "1"},
                             capture_output=True, text=True, timeout=60)
    return out.stdout, allowed.stdout, [m for m, _ in made]


def _blocks(text: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("variant "):
            name = line.split()[1]
            blocks[name] = []
        blocks[name].append(line)
    return blocks


def test_cpp_and_python_bind_identical_bytes(cpp_dump):
    text, _, manifests = cpp_dump
    blocks = _blocks(text)
    assert sorted(blocks) == sorted(m["variant"] for m in manifests)
    for m in manifests:
        cpp = [l for l in blocks[m["variant"]] if not l.startswith("load")]
        assert cpp == python_dump(m), m["variant"]
        # The grid is the kernel's: one CTA per 128 rows, head, batch; 12 params, 4 tensor maps.
        assert cpp[1].startswith("grid 3 8 2 block 384 1 1 cluster 1 1 1")
        assert len([l for l in cpp if l.startswith("param")]) == 12


def test_both_launchers_refuse_the_unverified_variants(cpp_dump):
    text, allowed, manifests = cpp_dump
    for name, lines in _blocks(text).items():
        load = next(l for l in lines if l.startswith("load "))
        assert "is unverified: no fa4_fwd cubin for sm_100a has ever been run on a GPU" in load
        assert "CUBINFORGE_ALLOW_UNVERIFIED=1" in load
        # With the argument, the loader goes on to the driver (the stub has no device).
        forced = next(l for l in lines if l.startswith("load-allowed"))
        assert "unverified" not in forced
    for name, lines in _blocks(allowed).items():
        assert "unverified" not in next(l for l in lines if l.startswith("load "))
    m = load_manifest(manifests[0])
    with pytest.raises(UnverifiedVariant, match="has ever been run on a GPU.*CUBINFORGE_ALLOW_UNVERIFIED=1"):
        Kernel(m, b"")
    assert Kernel(m, b"", allow_unverified=True).variant == m.variant


def test_the_python_opt_in_by_environment(monkeypatch):
    m = load_manifest(fa4_manifest("bf16", 128, True)[0])
    monkeypatch.setenv("CUBINFORGE_ALLOW_UNVERIFIED", "1")
    assert Kernel(m, b"").variant == m.variant
    monkeypatch.setenv("CUBINFORGE_ALLOW_UNVERIFIED", "0")
    with pytest.raises(UnverifiedVariant):
        Kernel(m, b"")


def test_dump_is_not_vacuous(cpp_dump):
    """The compared lines carry the values that matter (a guard on the comparison itself)."""
    text, _, _ = cpp_dump
    lines = _blocks(text)["fa4-fwd-sm_100a-bf16-hd128-causal"]
    params = {int(l.split()[1]): bytes.fromhex(l.split()[4]) for l in lines if l.startswith("param")}
    assert struct.unpack("<3i", params[0]) == (300, 8, 2)          # q coords
    assert struct.unpack("<3i", params[2]) == (500, 2, 2)          # v coords
    assert struct.unpack_from("<Q", params[4])[0] == 0x50000000    # lse pointer
    tma_v = params[7]
    assert struct.unpack_from("<IIQ", tma_v) == (9, 4, 0x30000000)  # bf16, rank 4, v's address
    assert struct.unpack_from("<4I", tma_v, 72) == (64, 128, 1, 1)  # box: 64 head-dim x 128 keys
    assert params[10] == params[11] == bytes(32)                    # tiled MMAs: never read
