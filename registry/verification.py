"""Where each variant was checked numerically: verification records, and the stamp in a manifest.

A verification record file (`verified.json`, written by the GPU sweep, `python3 -m bench`) is

    {"verification_version": 1,
     "records": [{"variant": ..., "family": ..., "arch": ..., "cubin_sha256": <64 hex or null>,
                  "device": "NVIDIA H200", "driver": "580.159.04", "commit": "0535a1f",
                  "date": "2026-11-29T09:59:51", "result": "passed" | "failed",
                  "cases": 14, "source": "bench/results/2026-11-29-h200/results.json"}]}

Each manifest carries `provenance.verification`, one of

    {"status": "verified", "device", "driver", "commit", "date", "result": "passed", "cases", "source"}
        this exact cubin (sha256) passed a numerical check on that GPU;
    {"status": "unverified", "reason", "arch_verified": bool}
        this cubin has not; `arch_verified` says whether any cubin of its family on its arch
        has passed one (sm_90a fa3_fwd: yes, on the H200; sm_100a: never - no GPU to run it).

The runtime and the C++ loader refuse a variant that is unverified on an arch never verified
(cubinforge.runtime.registry_source.refuses_unverified), unless the caller opts in (CUBINFORGE_ALLOW_UNVERIFIED=1 or an argument). A
rebuilt sm_90a cubin whose sha256 differs from the one the sweep checked is `unverified` but
still launches (its arch is verified), so the GPU sweep can re-verify it. Records checked into
the repository live in `registry/verified/`; `cubinforge verify import FILE` adds a file to the
registry's own `verified/` folder and stamps every matching manifest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

VERIFICATION_VERSION = 1
PACKAGED_RECORDS = Path(__file__).resolve().parent / "verified"
RECORD_KEYS = ("variant", "family", "arch", "cubin_sha256", "device", "driver", "commit", "date", "result")
STAMP_KEYS = ("device", "driver", "commit", "date", "result", "cases", "source")
_SHA = re.compile(r"^[0-9a-f]{64}$")


class VerificationError(ValueError):
    """A verification record file that cannot be used, with what is wrong."""


def load_records(path: str | Path) -> list[dict]:
    """The records of one file, checked: every key present, results passed/failed, sha256 hex or null."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise VerificationError(f"{path}: cannot read a verification record file ({e})") from e
    if not isinstance(doc, dict) or doc.get("verification_version") != VERIFICATION_VERSION:
        raise VerificationError(f"{path}: expected an object with verification_version {VERIFICATION_VERSION}")
    records = doc.get("records")
    if not isinstance(records, list):
        raise VerificationError(f"{path}: 'records' must be a list")
    for i, r in enumerate(records):
        missing = [k for k in RECORD_KEYS if k not in r]
        if missing:
            raise VerificationError(f"{path}: record {i} lacks {', '.join(missing)}")
        if r["result"] not in ("passed", "failed"):
            raise VerificationError(f"{path}: record {i} result must be 'passed' or 'failed', not {r['result']!r}")
        if r["result"] == "passed" and r["cubin_sha256"] is None and not (r["family"] and r["arch"]):
            raise VerificationError(f"{path}: record {i} names neither a cubin nor a family and arch")
        sha = r["cubin_sha256"]
        if sha is not None and not (isinstance(sha, str) and _SHA.match(sha)):
            raise VerificationError(f"{path}: record {i} cubin_sha256 must be 64 lowercase hex digits or null")
    return records


def record_files(home: str | Path | None = None) -> list[Path]:
    """The packaged record files, then the registry's own (`$CUBINFORGE_HOME/verified/`)."""
    dirs = [PACKAGED_RECORDS] + ([Path(home) / "verified"] if home is not None else [])
    return [p for d in dirs if d.is_dir() for p in sorted(d.glob("*.json"))]


def all_records(home: str | Path | None = None) -> list[dict]:
    return [r for p in record_files(home) for r in load_records(p)]


def stamp(family: str, arch: str, cubin_sha256: str, records: Iterable[Mapping[str, Any]]) -> dict:
    """The verification entry of one cubin: the latest passing record of its exact sha256, or
    `unverified` (a failed record for the sha256 is named in the reason)."""
    records = list(records)
    mine = sorted((r for r in records if r.get("cubin_sha256") == cubin_sha256), key=lambda r: str(r["date"]))
    passed = [r for r in mine if r["result"] == "passed"]
    if passed and not any(r["result"] == "failed" for r in mine):
        best = passed[-1]
        return {"status": "verified", **{k: best.get(k) for k in STAMP_KEYS}}
    arch_verified = any(r["result"] == "passed" and r["family"] == family and r["arch"] == arch for r in records)
    if mine:
        bad = next(r for r in mine if r["result"] == "failed")
        reason = f"this cubin FAILED its numerical check on {bad['device']} ({bad['date']}, commit {bad['commit']})"
    elif arch_verified:
        reason = (f"this cubin has not been checked on a GPU; other {family} cubins for {arch} have passed "
                  f"(run the GPU sweep, then `cubinforge verify import verified.json`)")
    else:
        reason = f"no {family} cubin for {arch} has ever been run on a GPU"
    return {"status": "unverified", "reason": reason, "arch_verified": arch_verified and not mine}
