"""First calls of fresh processes, several at once, against torch's float32 attention.

On 2026-12-01 two H200 runs of bench.host_overhead (check6/h1, check7/i2) ended in "an
illegal instruction was encountered" at a sync after a first call. The cause was the bench's
`floor` replay, which launched with raw addresses into a plan it had let go (a garbage tensor
map; fixed in bench/host_overhead.py, CPU test in tests/test_runtime_rawlaunch.py); the
runtime's own first calls never failed. This keeps the checks that ruled them out: the first
call of new processes (hd64/128, causal or not, outputs allocated or given with a stream
handle as host_overhead gives them) and host_overhead's first call of a kind (`floor` among
them), CUBINFORGE_FIRST_CALL_RUNS processes at a time, each failing on any CUDA error.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _helpers import gpu_probe

NO_GPU, _ARCH = gpu_probe()
NO_TORCH = importlib.util.find_spec("torch") is None
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or ""),
              pytest.mark.skipif(NO_TORCH, reason="the first call under test is the torch-tensor path")]

REPO = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("CUBINFORGE_FIRST_CALL_RUNS", "2"))

CHILD = """
import sys, torch
from cubinforge.runtime import flash_attn_func, last_launch
d, causal, dtype, how = int(sys.argv[1]), sys.argv[2] == "1", getattr(torch, sys.argv[3]), sys.argv[4]
g = torch.Generator("cuda").manual_seed(d * 7 + causal)
q, k, v = (torch.randn(1, 128, 4, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
kw = {}
if how != "alloc":   # host_overhead's first call: outputs given (and its stream handle)
    kw = dict(out=torch.empty_like(q), lse=torch.empty(1, 4, 128, device="cuda"))
    if how == "given-stream":
        kw["stream"] = torch.cuda.current_stream().cuda_stream
o = torch.from_dlpack(flash_attn_func(q, k, v, causal=causal, **kw)[0])
torch.cuda.synchronize()
ref = torch.nn.functional.scaled_dot_product_attention(
    *(x.float().transpose(1, 2) for x in (q, k, v)), is_causal=causal).transpose(1, 2)
err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
print(last_launch().variant, err)
assert err < 2e-2, err
"""


def _fresh_processes(argvs: list[list[str]]) -> None:
    """Run each argv in a new process, all at once (concurrent first calls, module loads and
    first launches on one GPU); fail naming every one that did not exit 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    procs = [subprocess.Popen(a, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a in argvs]
    failed = []
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=240)
        if p.returncode != 0:
            failed.append(f"fresh process {i + 1} of {len(procs)} (rc {p.returncode}): {argvs[i][-4:]}\n"
                          f"{out[-2000:]}\n{err[-3000:]}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("how", ["alloc", "given-stream"])
@pytest.mark.parametrize("dtype", ["float16"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("d", [64, 128])
def test_first_call_of_fresh_processes(d, causal, dtype, how):
    _fresh_processes([[sys.executable, "-c", CHILD, str(d), str(int(causal)), dtype, how]] * RUNS)


@pytest.mark.parametrize("kind", ["prewrapped", "floor"])
def test_host_overhead_first_call_in_fresh_processes(kind):
    """The process that failed twice (check6/h1, check7/i2): bench.host_overhead's first calls."""
    _fresh_processes([[sys.executable, "-m", "cubinforge.bench.host_overhead", "--kinds", kind, "--iters", "20",
                       "--repeats", "1"]] * RUNS)
