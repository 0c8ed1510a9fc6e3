"""What a build costs: the compile leaves out the host JIT engine (same cubin), and the summary
says how many CPU-seconds the build took and how many of them the compile jobs."""

import subprocess
import sys
import textwrap

import pytest
from conftest import module_available

pytest.importorskip("sqlalchemy", reason="the build writes a registry: needs the server extra")

from cubinforge.generator import build  # noqa: E402

AOT_VS_JIT = textwrap.dedent('''
    import os, sys
    os.environ["CUTE_DSL_ARCH"] = "sm_90a"
    os.environ["CUTE_DSL_DUMP_DIR"] = sys.argv[1]
    import cutlass, cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cubinforge.generator.kernels.common import aot_compile

    @cute.kernel
    def k(a: cute.Tensor, s: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx(); bidx, _, _ = cute.arch.block_idx()
        i = bidx * 128 + tidx
        if i < a.shape[0]:
            a[i] = a[i] * s

    @cute.jit
    def host(a: cute.Tensor, s: cutlass.Float32):
        k(a, s).launch(grid=[(a.shape[0] + 127) // 128, 1, 1], block=[128, 1, 1])

    a = make_fake_compact_tensor(cutlass.Float32, (cute.sym_int(),), assumed_align=16)
    options = "--gpu-arch sm_90a --keep-cubin"
    jit = cute.compile(host, a, cutlass.Float32(1.0), options=options)
    aot = aot_compile(host, a, cutlass.Float32(1.0), options=options)
    assert jit.engine is not None, "the plain compile was expected to build a host engine"
    assert aot.engine is None, "aot_compile built a host engine"
    assert list(aot.kernel_info) == list(jit.kernel_info)
    assert aot.__cubin__ == jit.__cubin__, "the cubin changed without the host engine"
    print("ok", len(aot.__cubin__))
''')


@pytest.mark.skipif(not module_available("cutlass"), reason="needs the CuTe DSL (the build extra)")
def test_aot_compile_gives_the_same_cubin_without_a_host_engine(tmp_path):
    script = tmp_path / "aot_vs_jit.py"
    script.write_text(AOT_VS_JIT)  # the DSL reads kernel source from a file
    (tmp_path / "dump").mkdir()
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "dump")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_summary_reports_the_build_cpu_and_the_compile_jobs_share():
    outcomes = [build.Outcome("a", "built", 2.0, cpu_seconds=1.5), build.Outcome("b", "built", 1.0, cpu_seconds=0.7),
                build.Outcome("c", "skipped")]
    text = build.summary(outcomes, elapsed=3.2, cpu=2.5)
    assert "2 built, 1 skipped, 0 failed in 3.2 s (2.5 CPU-s, 2.2 of them in compile jobs)" in text
    assert text.splitlines()[-1].endswith("in 3.2 s (2.5 CPU-s, 2.2 of them in compile jobs)")
    assert "CPU-s" not in build.summary(outcomes, elapsed=3.2)  # a caller without the figure
