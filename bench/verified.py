"""verified.json: which cubins a GPU run checked, for `cubinforge verify import`.

From the bench's correctness sweep: one record per variant the sweep ran, its cubin sha256
(read from the manifest it launched), the device, driver, commit and date of the run, and
`passed` only when every case of that variant passed. From the GPU test-suite
(tests/gpu_verification_log.py, CUBINFORGE_VERIFIED_OUT): `records_from_gpu_tests`, one record
per (variant, cubin sha256) a float64 comparison checked, `failed` when any test that launched
it failed. Several files
(one per shard) merge into one with --merge. Format: registry/verification.py (the stdlib only
here: this runs on the GPU machine, which has no install).

    python3 -m bench.verified RESULTS_JSON [--home DIR] [--out verified.json]
    python3 -m bench.verified --merge SHARD.json ... --out verified.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VERIFICATION_VERSION = 1


def verified_doc(results: dict, manifest_of, source: str) -> dict:
    """Records from a results dict; `manifest_of(variant)` is the manifest the run launched
    (its cubin sha256, family and arch), or None when it cannot be read."""
    cases: dict[str, list[dict]] = {}
    for c in results.get("correctness") or []:
        cases.setdefault(c.get("ran_variant") or c["variant"], []).append(c)
    archs = {v["name"]: v.get("arch") for v in results.get("variants") or []}
    records = []
    for name in sorted(cases):
        m = manifest_of(name) or {}
        records.append({
            "variant": name, "family": m.get("family"), "arch": (m.get("axes") or {}).get("arch") or archs.get(name),
            "cubin_sha256": (m.get("cubin") or {}).get("sha256"),
            "device": results.get("gpu"), "driver": results.get("driver"),
            "commit": results.get("commit"), "date": results.get("date"),
            "result": "passed" if all(c.get("passed") for c in cases[name]) else "failed",
            "cases": len(cases[name]), "source": source,
        })
    return {"verification_version": VERIFICATION_VERSION, "records": records}


def records_from_gpu_tests(tests: list[dict], *, device, driver, commit, date, source: str) -> dict:
    """Records from the GPU tests' outcomes: each test {"outcome": "passed" | "failed" |
    "skipped", "launched": {(variant, sha256): (family, arch)}, "checked": [(variant, sha256),
    ...]} (the kernels a float64 comparison that found nothing wrong covered). Keyed by
    (variant, cubin sha256): an A/B candidate shares its variant name with the shipped cubin, and
    neither may vouch for the other. A kernel is `failed` when a test that launched it failed,
    `passed` when a passing test checked it and none that launched it failed; launched and never
    checked, it gets no record (it stays unverified)."""
    seen, failed, checked = {}, {}, {}
    for t in tests:
        seen.update(t["launched"])
        if t["outcome"] == "failed":
            for key in t["launched"]:
                failed[key] = failed.get(key, 0) + 1
        elif t["outcome"] == "passed":
            for key in t["checked"]:
                checked[tuple(key)] = checked.get(tuple(key), 0) + 1
    records = []
    for key in sorted(set(failed) | set(checked), key=lambda k: (k[0], k[1] or "")):  # a sha may be None
        (variant, sha), (family, arch) = key, seen[key]
        result, cases = ("failed", failed[key]) if key in failed else ("passed", checked[key])
        records.append({
            "variant": variant, "family": family, "arch": arch, "cubin_sha256": sha, "device": device,
            "driver": driver, "commit": commit, "date": date, "result": result, "cases": cases,
            "source": _gpu_test_source(source, result, cases),
        })
    return {"verification_version": VERIFICATION_VERSION, "records": records}


_GPU_TEST_SOURCE_SEP = ": "


def _gpu_test_source(source: str, result: str, cases: int) -> str:
    """What a GPU-test record says of itself; rebuilt by merge_docs when shards' counts add up."""
    what = (f"{cases} test(s) that launched it failed" if result == "failed" else
            f"{cases} test(s) compared it against a float64 reference; every test that launched it passed")
    return f"{source}{_GPU_TEST_SOURCE_SEP}{what}"


def merge_docs(docs: list[dict]) -> dict:
    """One record per (variant, cubin sha256) across files (shards of one run): `failed` if any
    file says so, else `passed` with the cases summed (and a GPU-test record's source text
    saying the summed count)."""
    out: dict[tuple, dict] = {}
    for doc in docs:
        for r in doc["records"]:
            key = (r["variant"], r["cubin_sha256"])
            have = out.get(key)
            if have is None:
                out[key] = dict(r)
            elif (have["result"] == "failed") == (r["result"] == "failed"):
                have["cases"] = (have.get("cases") or 0) + (r.get("cases") or 0)
                base, sep, _ = have.get("source", "").partition(_GPU_TEST_SOURCE_SEP)
                if sep and base == r.get("source", "").partition(_GPU_TEST_SOURCE_SEP)[0]:
                    have["source"] = _gpu_test_source(base, have["result"], have["cases"])
            elif r["result"] == "failed":
                out[key] = dict(r)
    return {"verification_version": VERIFICATION_VERSION, "records": [out[k] for k in sorted(out)]}


def manifest_reader(home: Path):
    def manifest_of(name: str):
        try:
            m = json.loads((home / "manifests" / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None
        return m if isinstance(m, dict) else None
    return manifest_of


def main(argv=None) -> int:
    import os

    p = argparse.ArgumentParser(prog="python3 -m bench.verified", description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, nargs="?")
    p.add_argument("--home", type=Path, default=Path(os.environ.get("CUBINFORGE_HOME", ".cubinforge")))
    p.add_argument("--out", type=Path)
    p.add_argument("--merge", type=Path, nargs="+", metavar="FILE", help="merge record files (needs --out)")
    args = p.parse_args(argv)
    if args.merge:
        if args.out is None:
            p.error("--merge needs --out")
        doc = merge_docs([json.loads(f.read_text()) for f in args.merge])
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"{args.out}: {len(doc['records'])} records from {len(args.merge)} files")
        return 0
    if args.results is None:
        p.error("give RESULTS_JSON or --merge FILE ...")
    results = json.loads(args.results.read_text())
    doc = verified_doc(results, manifest_reader(args.home), str(args.results))
    out = args.out or args.results.with_name("verified.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{out}: {len(doc['records'])} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
