"""verified.json: which cubins the correctness sweep checked, for `cubinforge verify import`.

One record per variant the sweep ran: its cubin sha256 (read from the manifest it launched),
the device, driver, commit and date of the run, and `passed` only when every case of that
variant passed. Format: registry/verification.py (the stdlib only here: this runs on the GPU
machine, which has no install).

    python3 -m bench.verified RESULTS_JSON [--home DIR] [--out verified.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VERIFICATION_VERSION = 1


def verified_doc(results: dict, sha_of, source: str) -> dict:
    """Records from a results dict; `sha_of(variant)` is the cubin sha256 the run used, or None."""
    cases: dict[str, list[dict]] = {}
    for c in results.get("correctness") or []:
        cases.setdefault(c.get("ran_variant") or c["variant"], []).append(c)
    archs = {v["name"]: v.get("arch") for v in results.get("variants") or []}
    records = []
    for name in sorted(cases):
        family = "fa4_fwd" if name.startswith("fa4-fwd-") else "fa3_fwd"
        records.append({
            "variant": name, "family": family, "arch": archs.get(name) or name.split("-")[2],
            "cubin_sha256": sha_of(name), "device": results.get("gpu"), "driver": results.get("driver"),
            "commit": results.get("commit"), "date": results.get("date"),
            "result": "passed" if all(c.get("passed") for c in cases[name]) else "failed",
            "cases": len(cases[name]), "source": source,
        })
    return {"verification_version": VERIFICATION_VERSION, "records": records}


def manifest_sha(home: Path):
    def sha_of(name: str):
        try:
            return json.loads((home / "manifests" / f"{name}.json").read_text())["cubin"]["sha256"]
        except (OSError, ValueError, KeyError):
            return None
    return sha_of


def main(argv=None) -> int:
    import os

    p = argparse.ArgumentParser(prog="python3 -m bench.verified", description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--home", type=Path, default=Path(os.environ.get("CUBINFORGE_HOME", ".cubinforge")))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text())
    doc = verified_doc(results, manifest_sha(args.home), str(args.results))
    out = args.out or args.results.with_name("verified.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{out}: {len(doc['records'])} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
