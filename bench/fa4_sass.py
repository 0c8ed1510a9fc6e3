"""Where FA4's SM90 forward waits for its PV GEMM, beside ours, from the SASS, on the CPU.

FA4 (flash-attn-4, CuTe DSL) compiles here without a GPU: under torch's FakeTensorMode with
FLASH_ATTENTION_ARCH=sm_90 its own interface builds the kernel it would launch, and
`--keep-cubin` leaves the cubin. That needs torch, triton and FA4 beside the pinned DSL, which
our environment does not carry, so the compile runs in a virtual environment of its own:

    python3 -m venv /tmp/fa4env
    /tmp/fa4env/bin/pip install torch==2.13.0 nvidia-cutlass-dsl==4.8.1 flash-attn-4==4.0.0b36 triton
    .venv/bin/python -m cubinforge.bench.fa4_sass --fa4-python /tmp/fa4env/bin/python \
        --head-dim 64 [--head-dim-v 128] [--causal] [--dtype fp16] [--ours VARIANT]

It prints, per overlapped key-block loop, the exp2s (MUFU) and FFMAs between the QK^T and PV
waits (work that runs under the PV GEMM) and the instructions after the PV wait
(generator.sass.pv_wait_windows), for FA4's cubin and, with --ours, for a variant of the local
registry ($CUBINFORGE_HOME). None of FA4's code is copied here: the child imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Run by --fa4-python: compile FA4's SM90 forward for one problem under FakeTensorMode and
# print the path of the cubin it kept.
_CHILD = r"""
import glob, json, os, sys, time
a = json.loads(sys.argv[1])
os.environ.update(FLASH_ATTENTION_ARCH="sm_90", CUTE_DSL_ARCH="sm_90a", FLASH_ATTENTION_NUM_SMS="132",
                  CUTE_DSL_DUMP_DIR=a["dump"])
import torch
import cutlass.cute as cute
from torch._subclasses.fake_tensor import FakeTensorMode
from flash_attn.cute import interface
from flash_attn.cute import flash_attn_func

compile_ = cute.compile
def keep_cubin(*args, options="", **kw):
    return compile_(*args, options=(options + " --keep-cubin").strip(), **kw)
cute.compile = interface.cute.compile = keep_cubin
dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[a["dtype"]]
t0 = time.time()
with FakeTensorMode(allow_non_fake_inputs=True):
    b, s, h = 2, 4096, max(1, 2048 // a["d"])
    q = torch.empty(b, s, h, a["d"], dtype=dt, device="cuda")
    k = torch.empty(b, s, h, a["d"], dtype=dt, device="cuda")
    v = torch.empty(b, s, h, a["dv"], dtype=dt, device="cuda")
    flash_attn_func(q, k, v, causal=a["causal"])
kept = [f for f in glob.glob(os.path.join(a["dump"], "**", "*.cubin"), recursive=True) if os.path.getmtime(f) >= t0]
print(json.dumps(kept))
"""


def fa4_cubin(python: str, head_dim: int, head_dim_v: int, causal: bool, dtype: str) -> bytes:
    """FA4's SM90 cubin for this problem, compiled by `python` (a venv with torch, triton, FA4)."""
    with tempfile.TemporaryDirectory() as dump:
        args = json.dumps({"d": head_dim, "dv": head_dim_v, "causal": causal, "dtype": dtype, "dump": dump})
        run = subprocess.run([python, "-c", _CHILD, args], capture_output=True, text=True, timeout=600)
        if run.returncode:
            raise SystemExit(f"FA4's compile failed ({python}):\n{run.stderr[-3000:]}")
        kept = json.loads(run.stdout.strip().splitlines()[-1])
        if len(kept) != 1:
            raise SystemExit(f"expected one cubin from FA4's compile, found {kept}")
        return Path(kept[0]).read_bytes()


def ours_cubin(variant: str) -> bytes:
    """A variant's cubin from the local registry."""
    from cubinforge.runtime.registry_source import default_source, fetch_cubin, manifests

    source = default_source()
    found, _ = manifests(source, "fa3_fwd")
    for m in found:
        if m.variant == variant:
            return fetch_cubin(m, source)
    names = sorted(m.variant for m in found)
    raise SystemExit(f"no variant {variant!r} in the local registry ({len(names)} fa3_fwd variants there)")


def describe(label: str, cubin: bytes) -> str:
    from cubinforge.generator.sass import pv_wait_windows, sass_counts

    windows, counts = pv_wait_windows(cubin) or [], sass_counts(cubin) or {}
    loops = "; ".join(f"{w['mufu_between']} exp2 + {w['ffma_between']} FFMA under PV, {w['after']} after"
                      for w in windows) or "no overlapped loop found"
    return f"{label}: {counts.get('instructions', '?')} instructions | {loops}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fa4-python", required=True, help="python of a venv with torch, triton and flash-attn-4")
    ap.add_argument("--head-dim", type=int, required=True)
    ap.add_argument("--head-dim-v", type=int, help="V's head dim (default: --head-dim)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--ours", help="a variant of the local registry to show beside FA4's")
    a = ap.parse_args(argv)
    dv = a.head_dim_v or a.head_dim
    print(describe(f"FA4 hd{a.head_dim}{f'/{dv}' if dv != a.head_dim else ''} "
                   f"{'causal' if a.causal else 'non-causal'} {a.dtype}",
                   fa4_cubin(a.fa4_python, a.head_dim, dv, a.causal, a.dtype)))
    if a.ours:
        print(describe(a.ours, ours_cubin(a.ours)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
