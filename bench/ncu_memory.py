"""Memory traffic of attention kernels on one cell: HBM bytes read and written, L2's hit rate
and the kernel's time under Nsight Compute, for bench.ab variants beside cuDNN.

    python3 -m bench.ncu_memory --home .cubinforge-ab-pairs --variants NAME,NAME --head-dim 128 \\
        --causal 1 --batch 32 --heads 16 --seqlen 512 --json out.json

Each target runs in bench/_ncu_torch_child.py (one warm-up launch, the second profiled, clocks
left alone). A cell whose kernel reads its K and V from HBM more than once shows it here as
dram bytes well above q + k + v + o (printed as `unique`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .ncu import find_ncu, parse_raw_csv

HERE = Path(__file__).resolve().parent
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct", "gpu__time_duration.sum")


def profile(ncu: str, backend: str, shape: list[str], variant: str | None, env: dict) -> dict:
    from ._ncu_torch_child import KERNEL_REGEX

    cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--kernel-name", KERNEL_REGEX[backend],
           "--launch-skip", "1", "--launch-count", "1", "--metrics", ",".join(METRICS),
           sys.executable, str(HERE / "_ncu_torch_child.py"), "--backend", backend, *shape,
           *(["--variant", variant] if variant else [])]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    values = parse_raw_csv(p.stdout)
    if not values:
        return {"skipped": " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:]), "command": " ".join(cmd)}
    return {"kernel": values.pop("Kernel Name", None), "metrics": values, "command": " ".join(cmd)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--variants", required=True, help="comma-separated variant names in --home")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    ncu = find_ncu()
    if ncu is None:
        raise SystemExit("ncu not found on PATH or in /usr/local/cuda/bin")
    shape = ["--dtype", a.dtype, "--head-dim", str(a.head_dim), "--causal", str(a.causal), "--batch", str(a.batch),
             "--seqlen", str(a.seqlen), "--heads", str(a.heads)]
    env = dict(os.environ, CUBINFORGE_HOME=str(a.home.resolve()))
    unique = 4 * a.batch * a.seqlen * a.heads * a.head_dim * 2  # q, k, v read, o written (16-bit)
    rows = {f"ours:{v}": profile(ncu, "ours", shape, v, env) for v in a.variants.split(",")}
    rows["cudnn"] = profile(ncu, "cudnn", shape, None, env)
    print(f"q + k + v + o: {unique / 1e6:.1f} MB")
    for name, r in rows.items():
        m = r.get("metrics", {})
        # ncu --page raw names each roll-up (`dram__bytes_read.sum (byte)`; .avg is per partition).
        get = lambda key: next((float(str(v).replace(",", "")) for k, v in m.items() if k.split(" ")[0] == key),
                               float("nan"))
        if "skipped" in r:
            print(f"{name}: skipped: {r['skipped']}")
            continue
        rd, wr, t = get("dram__bytes_read.sum"), get("dram__bytes_write.sum"), get("gpu__time_duration.sum")
        print(f"{name}: dram read {rd / 1e6:.1f} MB, written {wr / 1e6:.1f} MB, L2 hit "
              f"{get('lts__t_sector_hit_rate.pct'):.1f}%, {t / 1e3:.1f} us, {(rd + wr) / t / 1e3:.2f} TB/s")
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"unique_bytes": unique, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
