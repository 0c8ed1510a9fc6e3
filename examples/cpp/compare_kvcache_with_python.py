"""Run examples/cpp/kvcache_example and the Python runtime's flash_attn_with_kvcache on the
same inputs (the example's q, cache, cache_seqlens, page_table or cache_batch_idx, new k/v),
and compare: the variants launched (append, gather, forward, combine), the split count, and
O, LSE and the caches after the append bit for bit. Needs a GPU, CuPy and the same
registry the bundle was rendered from.

    python examples/cpp/compare_kvcache_with_python.py --exe build/cpp/kvcache_example --matrix
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# (batch, seqlen_q, capacity, heads_q, heads_kv, causal, page_size (0: dense), num_splits (0: auto),
#  seqlen_new (k/v appended first), batch_idx (1: cache_batch_idx over a dense cache))
MATRIX = [
    (8, 1, 32768, 32, 8, 1, 0, 0, 0, 0),       # dense decode: auto splits (2 on an H200)
    (8, 1, 32768, 32, 8, 1, 256, 0, 0, 0),     # paged, page 256
    (4, 1, 32768, 16, 16, 1, 0, 0, 0, 0),      # the bench's --decode cell: no GQA to pack
    (4, 16, 32768, 16, 16, 0, 0, 0, 0, 0),
    (32, 4, 8192, 32, 8, 1, 0, 0, 0, 0),       # speculative: 4 query tokens, pack-GQA
    (2, 3, 5000, 8, 2, 1, 16, 5, 0, 0),        # explicit 5 splits, page 16 (16-row boxes)
    (64, 1, 4096, 32, 8, 1, 256, 1, 0, 0),     # never split
    (8, 1, 8192, 32, 8, 1, 0, 0, 1, 0),        # decode step: append 1 token (dense), then attend
    (8, 4, 8192, 32, 8, 1, 256, 0, 4, 0),      # append 4 (paged, page 256)
    (4, 1, 4096, 32, 8, 1, 0, 0, 0, 1),        # cache_batch_idx: shuffled rows of a larger cache
    (4, 2, 4096, 32, 8, 1, 0, 3, 2, 1),        # cache_batch_idx + append, 3 splits
    (3, 1, 1000, 16, 4, 1, 1, 0, 0, 0),        # page size 1: gathered first
    (3, 2, 1000, 16, 4, 1, 24, 0, 2, 0),       # page 24 (not a multiple of 16) + append: gathered
]
KEYS = ("batch", "seqlen_q", "capacity", "heads_q", "heads_kv", "causal", "page_size", "num_splits", "seqlen_new",
        "batch_idx")
NP = {"bf16": np.uint16, "f32": np.float32, "i32": np.int32}


def compare(exe: Path, problem: dict, keep: Path | None) -> str:
    import cupy as cp

    from cubinforge.runtime import as_device_array, prepare_kvcache

    out = keep or Path(tempfile.mkdtemp(prefix="cubinforge-kv-"))
    out.mkdir(parents=True, exist_ok=True)
    args = [str(exe), "--out", str(out)]
    for k, v in problem.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run(args, capture_output=True, text=True)
    label = " ".join(f"{k}={v}" for k, v in problem.items())
    if proc.returncode != 0:
        skip = "CUDA_ERROR_NOT_FOUND" in proc.stderr
        print(f"{'SKIP' if skip else 'FAIL'} {label}: the example failed: {proc.stderr.strip()}")
        return "skip" if skip else "fail"
    meta = json.loads((out / "meta.json").read_text())
    t = meta["tensors"]

    on_device = {}

    def upload(name):
        host = np.fromfile(out / t[name]["file"], dtype=NP[t[name]["dtype"]]).reshape(t[name]["shape"])
        on_device[name] = cp.asarray(host)
        return as_device_array(on_device[name], dtype=t[name]["dtype"], what=name)

    o_cp = cp.zeros(t["o"]["shape"], dtype=np.uint16)
    lse_cp = cp.zeros(t["lse"]["shape"], dtype=np.float32)
    kc, vc = upload("k_cache"), upload("v_cache")  # appended to in place
    prepared = prepare_kvcache(upload("q"), kc, vc, k=upload("k") if "k" in t else None,
                               v=upload("v") if "v" in t else None, cache_seqlens=upload("cache_seqlens"),
                               cache_batch_idx=upload("cache_batch_idx") if "cache_batch_idx" in t else None,
                               page_table=upload("page_table") if "page_table" in t else None,
                               causal=bool(problem["causal"]), num_splits=problem["num_splits"],
                               out=as_device_array(o_cp, dtype="bf16"), lse=as_device_array(lse_cp, dtype="f32"))
    prepared.run()
    cp.cuda.Device().synchronize()
    ok = True
    want = meta["kernels"]
    if prepared.kernels != want or prepared.plan.num_splits != meta["num_splits"]:
        print(f"FAIL {label}: Python ran {prepared.kernels} with {prepared.plan.num_splits} splits, "
              f"C++ {want} with {meta['num_splits']}")
        ok = False
    for name, arr in (("o", o_cp), ("lse", lse_cp), ("k_cache_after", on_device["k_cache"]),
                      ("v_cache_after", on_device["v_cache"])):
        if cp.asnumpy(arr).tobytes() != (out / t[name]["file"]).read_bytes():
            a = cp.asnumpy(arr).ravel()
            b = np.fromfile(out / t[name]["file"], dtype=a.dtype)
            print(f"FAIL {label}: {name} differs in {int(np.count_nonzero(a != b))} of {a.size} elements")
            ok = False
    if ok:
        print(f"OK   {label}: {' + '.join(want)}, {meta['num_splits']} split(s): O, LSE and caches identical")
    return "ok" if ok else "fail"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", type=Path, required=True)
    ap.add_argument("--matrix", action="store_true", help="run MATRIX (else the one problem given)")
    ap.add_argument("--keep", type=Path, help="write the example's files here")
    for k, default in zip(KEYS, MATRIX[0]):
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=default)
    a = ap.parse_args(argv)
    problems = [dict(zip(KEYS, p)) for p in MATRIX] if a.matrix else [{k: getattr(a, k) for k in KEYS}]
    results = [compare(a.exe, p, a.keep) for p in problems]
    print(f"{results.count('ok')} agree, {results.count('skip')} skipped, {results.count('fail')} differ")
    return 1 if "fail" in results or not results.count("ok") else 0


if __name__ == "__main__":
    sys.exit(main())
