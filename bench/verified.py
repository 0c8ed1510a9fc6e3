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
    p.add_argument("results", type=Path)
    p.add_argument("--home", type=Path, default=Path(os.environ.get("CUBINFORGE_HOME", ".cubinforge")))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text())
    doc = verified_doc(results, manifest_reader(args.home), str(args.results))
    out = args.out or args.results.with_name("verified.json")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{out}: {len(doc['records'])} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
