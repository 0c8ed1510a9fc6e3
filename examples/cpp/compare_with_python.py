"""Run the C++ example and the Python runtime on the same inputs; their O and LSE must agree
bit for bit (same variant, same contract, same parameters -> the same kernel run).

On the GPU machine (CuPy, numpy and cubinforge installed; the bundle rendered from the same
registry the Python runtime reads):

    python examples/cpp/compare_with_python.py --exe build/cpp/flash_attn_example \
        --batch 2 --seqlen-q 300 --seqlen-k 500 --heads-q 8 --heads-kv 2 --head-dim 128 --causal 1
    python examples/cpp/compare_with_python.py --exe build/cpp/flash_attn_example --matrix

For each problem it runs the example (which writes Q, K, V, O, LSE), uploads the same Q, K, V
as CuPy arrays, calls cubinforge.runtime.flash_attn_func with the same softmax_scale handling
(the contract's default unless --softmax-scale is given), and compares: the variant chosen,
the grid, and the O and LSE bytes. Exit status 0 when every problem agrees exactly.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, dtype)
MATRIX = [
    (2, 512, 512, 8, 8, 128, False, "bf16"),
    (2, 512, 512, 8, 8, 128, True, "bf16"),
    (1, 300, 777, 16, 4, 128, True, "bf16"),   # seqlen_q != seqlen_k: bottom-right causal, GQA
    (1, 777, 300, 16, 16, 128, True, "bf16"),  # rows that see no key
    (3, 129, 65, 4, 1, 64, False, "bf16"),     # MQA, ragged tiles
    (2, 256, 256, 8, 8, 128, True, "fp16"),
]

NP_DTYPES = {"bf16": np.uint16, "fp16": np.float16, "f32": np.float32}


def run_example(exe: Path, out: Path, problem: dict, extra: list[str]) -> subprocess.CompletedProcess:
    args = [str(exe), "--out", str(out)]
    for key, value in problem.items():
        args += [f"--{key.replace('_', '-')}", str(int(value) if isinstance(value, bool) else value)]
    return subprocess.run(args + extra, capture_output=True, text=True)


def compare(exe: Path, problem: dict, softmax_scale: float | None, keep: Path | None) -> str:
    """'ok', 'skip' (the bundle has no variant for the problem) or 'fail'."""
    import cupy as cp
    from cubinforge.runtime import as_device_array, flash_attn_func, last_launch

    out = keep or Path(tempfile.mkdtemp(prefix="cubinforge-cmp-"))
    out.mkdir(parents=True, exist_ok=True)
    extra = [] if softmax_scale is None else ["--softmax-scale", repr(softmax_scale)]
    proc = run_example(exe, out, problem, extra)
    label = " ".join(f"{k}={v}" for k, v in problem.items())
    if proc.returncode != 0:
        skip = "CUDA_ERROR_NOT_FOUND" in proc.stderr  # a variant the bundle lacks
        print(f"{'SKIP' if skip else 'FAIL'} {label}: the example failed: {proc.stderr.strip()}")
        return "skip" if skip else "fail"
    meta = json.loads((out / "meta.json").read_text())
    t = meta["tensors"]

    def upload(name: str):
        # bf16 travels as uint16 CuPy arrays, reinterpreted by dtype= (CuPy has no bfloat16).
        host = np.fromfile(out / t[name]["file"], dtype=NP_DTYPES[t[name]["dtype"]]).reshape(t[name]["shape"])
        return as_device_array(cp.asarray(host), dtype=t[name]["dtype"], what=name)

    q, k, v = upload("q"), upload("k"), upload("v")
    o_cp = cp.zeros(t["o"]["shape"], dtype=NP_DTYPES[t["o"]["dtype"]])
    lse_cp = cp.zeros(t["lse"]["shape"], dtype=np.float32)
    o = as_device_array(o_cp, dtype=t["o"]["dtype"], what="o")
    lse = as_device_array(lse_cp, dtype="f32", what="lse")
    flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=bool(problem["causal"]), out=o, lse=lse)
    cp.cuda.Device().synchronize()
    record = last_launch()

    ok = True
    if record is not None and record.variant != meta["variant"]:
        print(f"FAIL {label}: Python launched {record.variant}, C++ {meta['variant']}")
        ok = False
    if record is not None and list(record.grid) != list(meta["grid"]):
        print(f"FAIL {label}: grid Python {list(record.grid)} vs C++ {meta['grid']}")
        ok = False
    for name, arr in (("o", o_cp), ("lse", lse_cp)):
        py = cp.asnumpy(arr).tobytes()
        cpp = (out / t[name]["file"]).read_bytes()
        if py != cpp:
            a = np.frombuffer(py, dtype=NP_DTYPES[t[name]["dtype"]])
            b = np.frombuffer(cpp, dtype=NP_DTYPES[t[name]["dtype"]])
            n = int(np.count_nonzero(a != b)) if a.shape == b.shape else -1
            print(f"FAIL {label}: {name} differs ({n} of {a.size} elements; {len(py)} vs {len(cpp)} bytes)")
            ok = False
    if ok:
        print(f"OK   {label}: {meta['variant']} grid {meta['grid']}: O and LSE identical "
              f"({len((out / t['o']['file']).read_bytes())} + {len((out / t['lse']['file']).read_bytes())} bytes)")
    return "ok" if ok else "fail"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="C++ example vs cubinforge.runtime, bit for bit")
    ap.add_argument("--exe", type=Path, default=Path("build/cpp/flash_attn_example"))
    ap.add_argument("--matrix", action="store_true", help="run the built-in list of problems")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seqlen-q", type=int, default=512)
    ap.add_argument("--seqlen-k", type=int, default=512)
    ap.add_argument("--heads-q", type=int, default=8)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--softmax-scale", type=float, default=None)
    ap.add_argument("--out", type=Path, default=None, help="keep the example's files here")
    args = ap.parse_args(argv)

    keys = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal", "dtype")
    if args.matrix:
        problems = [dict(zip(keys, p)) for p in MATRIX]
    else:
        problems = [{k: getattr(args, k) for k in keys}]
    results = []
    for i, p in enumerate(problems):
        p["seed"] = args.seed + i
        keep = args.out / f"run{i}" if args.out else None
        results.append(compare(args.exe, p, args.softmax_scale, keep))
    print(f"{results.count('ok')} agree, {results.count('skip')} skipped (no variant), "
          f"{results.count('fail')} differ")
    return 0 if "fail" not in results and "ok" in results else 1


if __name__ == "__main__":
    sys.exit(main())
