"""ELF metadata from real cross-compiled cubins, checked against cuobjdump where it is installed."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from cubinforge.generator.contract import ContractError, verify
from cubinforge.generator.cubin_elf import read_cubin
from cubinforge.generator.sass import cuobjdump, find_cuobjdump

needs_cuobjdump = pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump not installed (pip nvidia-cuda-cuobjdump)")


def _cubin(reg, name):
    return reg.read_blob(reg.get(name)["cubin"]["sha256"])


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_demo_cubin_facts(demo_registry, arch):
    info = read_cubin(_cubin(demo_registry, f"demo-scale-{arch}-bf16"))
    assert info.arch == arch and info.toolkit
    (entry,) = info.entries
    assert entry.startswith("kernel_cutlass_scale_kernel")
    k = info.kernel(entry)
    assert k.registers and k.registers > 0
    assert k.reqntid == (128, 1, 1) and k.max_threads == 128
    assert [(p.ordinal, p.offset, p.size) for p in k.params] == [(0, 0, 16), (1, 16, 4)]
    assert k.param_bytes == 20 and k.stack_frame_bytes == 0 and k.static_smem_bytes == 0


@needs_cuobjdump
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_agrees_with_cuobjdump(demo_registry, arch):
    cubin = _cubin(demo_registry, f"demo-scale-{arch}-fp16")
    info = read_cubin(cubin)
    k = info.kernel(info.entries[0])
    usage = cuobjdump(["--dump-resource-usage"], cubin)
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", usage)
    assert (k.registers, k.stack_frame_bytes, k.static_smem_bytes) == tuple(map(int, m.groups()))
    elf = cuobjdump(["-elf"], cubin)
    kparams = re.findall(r"Ordinal : 0x([0-9a-f]+)\s+Offset\s+: 0x([0-9a-f]+)\s+Size\s+: 0x([0-9a-f]+)", elf)
    assert sorted((int(o, 16), int(f, 16), int(s, 16)) for o, f, s in kparams) == [
        (p.ordinal, p.offset, p.size) for p in k.params]
    assert f"sm={arch[3:]}" in elf.replace("_", "")


STACK_KERNEL = textwrap.dedent('''
    import os, sys
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"
    import cutlass, cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    @cute.kernel
    def k(a: cute.Tensor, s: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx(); bidx, _, _ = cute.arch.block_idx()
        i = bidx * 128 + tidx
        t = cute.make_rmem_tensor((256,), cutlass.Float32)
        for j in cutlass.range_constexpr(256):
            t[j] = a[j + i] * s
        if i < a.shape[0]:
            a[i] = t[i % 256]

    @cute.jit
    def host(a: cute.Tensor, s: cutlass.Float32):
        k(a, s).launch(grid=[(a.shape[0] + 127) // 128, 1, 1], block=[128, 1, 1])

    a = make_fake_compact_tensor(cutlass.Float32, (cute.sym_int(),), assumed_align=16)
    c = cute.compile(host, a, cutlass.Float32(1.0), options="--gpu-arch sm_90a --keep-cubin")
    open(sys.argv[1], "wb").write(c.__cubin__)
''')


def test_stack_frame_of_a_kernel_with_local_memory(tmp_path):
    """A dynamically indexed register array lands in local memory: EIATTR_FRAME_SIZE (0x11) says how much."""
    out, script = tmp_path / "stack.cubin", tmp_path / "stack_kernel.py"
    script.write_text(STACK_KERNEL)  # the DSL reads kernel source from a file
    env = {**os.environ, "CUTE_DSL_DUMP_DIR": str(tmp_path)}  # --keep-cubin writes a copy there
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True, timeout=300,
                   cwd=tmp_path, env=env)
    cubin = out.read_bytes()
    k = read_cubin(cubin).kernel(read_cubin(cubin).entries[0])
    assert k.stack_frame_bytes >= 1024 and k.min_stack_bytes == k.stack_frame_bytes
    if find_cuobjdump():
        m = re.search(r"STACK:(\d+)", cuobjdump(["--dump-resource-usage"], cubin))
        assert int(m.group(1)) == k.stack_frame_bytes


def test_contract_param_table_must_match_the_cubin(demo_registry):
    rec = demo_registry.get("demo-scale-sm_90a-bf16")
    info = read_cubin(_cubin(demo_registry, "demo-scale-sm_90a-bf16"))
    k = info.kernel(rec["contract"]["entry"])
    verify(rec["contract"], k, info.arch)  # the stored contract is right
    bad = {**rec["contract"], "params": [dict(p) for p in rec["contract"]["params"]]}
    bad["params"][0]["size"] = 24
    with pytest.raises(ContractError, match=r"param 0: contract \(ordinal, offset, size\) = \(0, 0, 24\), cubin = \(0, 0, 16\)"):
        verify(bad, k, info.arch)
    fewer = {**rec["contract"], "params": rec["contract"]["params"][:1]}
    with pytest.raises(ContractError, match="contract has 1 params, the cubin's KPARAM table has 2"):
        verify(fewer, k, info.arch)
    with pytest.raises(ContractError, match="the cubin is sm_90a"):
        verify({**rec["contract"], "arch": "sm_100a"}, k, info.arch)


def test_contract_structure_checks(demo_registry):
    rec = demo_registry.get("demo-scale-sm_90a-bf16")
    info = read_cubin(_cubin(demo_registry, "demo-scale-sm_90a-bf16"))
    k = info.kernel(rec["contract"]["entry"])
    bad = {**rec["contract"], "grid": [["m", 128, "ceil_div"], [1], [1, "+"]]}
    with pytest.raises(ContractError) as err:
        verify(bad, k, info.arch)
    # The runtime's validator names the first defect it meets.
    assert "grid[0]: unknown token 'm'" in str(err.value)
    bad = {**rec["contract"], "grid": [[1], [1], [1, "+"]]}
    with pytest.raises(ContractError, match=r"grid\[2\]: stack underflow at '\+'"):
        verify(bad, k, info.arch)
