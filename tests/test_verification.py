"""Verification status (issue 16): record files, the stamp in each manifest, `verify import`,
`cubinforge ls`, the refusal rule, and the record the GPU sweep writes."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from cubinforge.registry import ArtifactInput, Registry  # noqa: E402
from cubinforge.registry import verification as V  # noqa: E402
from cubinforge.runtime.registry_source import refuses_unverified  # noqa: E402


def _input(name, cubin, family="fa3_fwd", arch="sm_90a"):
    return ArtifactInput(
        name=name, family=family, axes={"arch": arch, "dtype": "bf16", "head_dim": 128, "causal": True},
        cubin=cubin, metadata={"entry": "k", "registers": 1}, contract={"entry": "k", "arch": arch},
        source="src", template="t.j2", dsl_version="x", ptxas_version=None, compile_options="",
        content_key=hashlib.sha256(cubin).hexdigest(), build_seconds=0.1)


def _record(name, cubin, result="passed", family="fa3_fwd", arch="sm_90a", date="2026-12-01T07:00:00"):
    return {"variant": name, "family": family, "arch": arch,
            "cubin_sha256": hashlib.sha256(cubin).hexdigest() if cubin is not None else None,
            "device": "NVIDIA H200", "driver": "580.159.04", "commit": "abc1234", "date": date,
            "result": result, "cases": 14, "source": "results.json"}


def _write(path: Path, records) -> Path:
    path.write_text(json.dumps({"verification_version": 1, "records": records}))
    return path


def test_the_checked_in_h200_record_marks_sm90_fa3_as_run():
    records = V.all_records()
    # The checked-in records: the H200 sweeps of 2026-11-29 and 2026-12-01, the inference
    # families' GPU tests of 2026-12-01 and session 20's GPU suite (2026-12-07, on an H100: the
    # same sm_90 tensor cores; each stamp names its device); every one passed, none on sm_100a.
    assert records and {"fa3_fwd"} <= {r["family"] for r in records} and {r["arch"] for r in records} == {"sm_90a"}
    assert all(r["result"] == "passed" for r in records)
    assert {r["device"] for r in records} == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    # 2026-11-29's did not log cubin sha256s: the arch counts as run, no cubin is verified by it.
    old = [r for r in records if r["date"].startswith("2026-11-29")]
    assert old and all(r["cubin_sha256"] is None for r in old)
    assert all(r["cubin_sha256"] for r in records if r["date"].startswith("2026-12-01"))
    sm90 = V.stamp("fa3_fwd", "sm_90a", "0" * 64, records)
    assert sm90["status"] == "unverified" and sm90["arch_verified"] and not refuses_unverified(sm90)
    sm100 = V.stamp("fa4_fwd", "sm_100a", "0" * 64, records)
    assert sm100 == {"status": "unverified", "arch_verified": False,
                     "reason": "no fa4_fwd cubin for sm_100a has ever been run on a GPU"}
    assert refuses_unverified(sm100)


def test_stamp_rules():
    a, b = b"cubin a", b"cubin b"
    recs = [_record("x", a)]
    v = V.stamp("fa3_fwd", "sm_90a", hashlib.sha256(a).hexdigest(), recs)
    assert v["status"] == "verified" and v["device"] == "NVIDIA H200" and v["commit"] == "abc1234"
    assert not refuses_unverified(v)
    # A rebuilt cubin (other sha256) is unverified until re-checked, but its arch has run.
    other = V.stamp("fa3_fwd", "sm_90a", hashlib.sha256(b).hexdigest(), recs)
    assert other["status"] == "unverified" and other["arch_verified"] and not refuses_unverified(other)
    # A cubin that failed its check is refused, whatever the arch's history.
    failed = V.stamp("fa3_fwd", "sm_90a", hashlib.sha256(b).hexdigest(), recs + [_record("y", b, "failed")])
    assert failed["status"] == "unverified" and "FAILED" in failed["reason"] and refuses_unverified(failed)
    assert not refuses_unverified({})  # a manifest from before verification was recorded


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(verification_version=2), "verification_version 1"),
    (lambda d: d["records"][0].pop("device"), "lacks device"),
    (lambda d: d["records"][0].update(result="ok"), "'passed' or 'failed'"),
    (lambda d: d["records"][0].update(cubin_sha256="abc"), "64 lowercase hex"),
])
def test_bad_record_files_say_what_is_wrong(tmp_path, edit, message):
    doc = {"verification_version": 1, "records": [_record("x", b"a")]}
    edit(doc)
    p = tmp_path / "v.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(V.VerificationError, match=message):
        V.load_records(p)


def test_build_stamps_and_import_restamps(home, tmp_path):
    reg = Registry()
    reg.put_artifact(_input("fa3-fwd-sm_90a-bf16-hd128-causal", b"sm90 cubin"))
    reg.put_artifact(_input("fa4-fwd-sm_100a-bf16-hd128-causal", b"sm100 cubin", "fa4_fwd", "sm_100a"))
    m90 = reg.manifest("fa3-fwd-sm_90a-bf16-hd128-causal")["provenance"]["verification"]
    assert m90["status"] == "unverified" and m90["arch_verified"]
    changed = reg.import_verification(_write(tmp_path / "verified.json",
                                             [_record("fa3-fwd-sm_90a-bf16-hd128-causal", b"sm90 cubin")]))
    assert [c["variant"] for c in changed] == ["fa3-fwd-sm_90a-bf16-hd128-causal"]
    v = reg.manifest("fa3-fwd-sm_90a-bf16-hd128-causal")["provenance"]["verification"]
    assert v["status"] == "verified" and v["driver"] == "580.159.04"
    assert reg.get("fa3-fwd-sm_90a-bf16-hd128-causal")["provenance"]["verification"] == v
    assert reg.manifest("fa4-fwd-sm_100a-bf16-hd128-causal")["provenance"]["verification"]["status"] == "unverified"
    # The file is kept: a rebuild of the same cubin is stamped verified at once.
    assert (home / "verified" / "verified.json").is_file()
    reg.put_artifact(_input("fa3-fwd-sm_90a-bf16-hd128-causal", b"sm90 cubin"))
    assert reg.manifest("fa3-fwd-sm_90a-bf16-hd128-causal")["provenance"]["verification"]["status"] == "verified"


def test_cli_verify_import_and_ls(home, tmp_path, capsys):
    pytest.importorskip("elftools")
    from cubinforge.cli import main

    reg = Registry()
    reg.put_artifact(_input("fa3-fwd-sm_90a-bf16-hd128-causal", b"sm90 cubin"))
    reg.put_artifact(_input("fa4-fwd-sm_100a-bf16-hd128-causal", b"sm100 cubin", "fa4_fwd", "sm_100a"))
    f = _write(tmp_path / "verified.json", [_record("fa3-fwd-sm_90a-bf16-hd128-causal", b"sm90 cubin")])
    assert main(["verify", "import", str(f)]) == 0
    out = capsys.readouterr().out
    assert "fa3-fwd-sm_90a-bf16-hd128-causal: verified (NVIDIA H200, driver 580.159.04" in out
    assert main(["ls", "--arch", "sm100"]) == 0
    out = capsys.readouterr().out
    assert "fa4-fwd-sm_100a-bf16-hd128-causal" in out and "unverified (refused)" in out and "fa3-fwd" not in out
    assert main(["ls"]) == 0
    assert "verified (NVIDIA H200)" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["verify", "import", str(bad)]) == 2
    assert "verification_version" in capsys.readouterr().err


def test_bench_writes_records_verify_import_reads(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.verified import verified_doc

    results = {"gpu": "NVIDIA H200", "driver": "580.159.04", "commit": "abc1234", "date": "2026-12-01T07:00:00",
               "variants": [{"name": "fa3-fwd-sm_90a-bf16-hd64-causal", "arch": "sm_90a"}],
               "correctness": [{"variant": "fa3-fwd-sm_90a-bf16-hd64-causal", "ran_variant": "fa3-fwd-sm_90a-bf16-hd64-causal",
                                "passed": True},
                               {"variant": "fa3-fwd-sm_90a-bf16-hd64-causal", "ran_variant": "fa3-fwd-sm_90a-bf16-hd64-causal",
                                "passed": False}]}
    manifest = {"family": "fa3_fwd", "axes": {"arch": "sm_90a"}, "cubin": {"sha256": "a" * 64}}
    doc = verified_doc(results, lambda n: manifest, "results.json")
    (r,) = doc["records"]
    assert r["result"] == "failed" and r["cases"] == 2 and r["cubin_sha256"] == "a" * 64
    assert r["family"] == "fa3_fwd" and r["arch"] == "sm_90a"
    # A run whose manifests cannot be read still records what it can.
    (u,) = verified_doc(results, lambda n: None, "results.json")["records"]
    assert u["cubin_sha256"] is None and u["family"] is None and u["arch"] == "sm_90a"
    p = _write(tmp_path / "verified.json", doc["records"])
    assert V.load_records(p)[0]["variant"] == "fa3-fwd-sm_90a-bf16-hd64-causal"
