"""The GPU tests' verification log, a plugin tests/conftest.py loads. With
CUBINFORGE_VERIFIED_OUT=FILE, every kernel a test launches through the runtime (Kernel.run:
direct calls, plans, CUDA graph captures) is noted with its cubin's sha256; a float64
comparison that finds nothing wrong (tests/gpu/_helpers.py numerics_checked) marks the kernels
launched so far in that test as checked (the comparison sees host arrays, not which launch made
them, so a kernel a test launches and never compares rides on a later comparison); at the end
FILE gets the verification records of what was checked (bench/verified.py
records_from_gpu_tests) for `cubinforge verify import FILE`.
Under CUBINFORGE_TEST_SHARD=i/n each shard writes FILE with `.shard<i>` before its suffix;
`python3 -m bench.verified --merge ... --out FILE` joins them. Unset, nothing is patched and
nothing written.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

OUT = os.environ.get("CUBINFORGE_VERIFIED_OUT")
_test: dict = {}          # the running test: launched {(variant, sha256): (family, arch)}, checked
_tests: list[dict] = []   # every finished test's outcome


def _out_path() -> Path:
    path = Path(OUT)
    # One file per process (a shard, or one of several per-file runs into one folder).
    shard = os.environ.get("CUBINFORGE_TEST_SHARD")
    tag = f"shard{shard.split('/')[0]}" if shard else f"pid{os.getpid()}"
    return path.with_name(f"{path.stem}.{tag}{path.suffix}")


def _marker() -> Path:
    """Present from configure to a finished session: left behind by a process that was killed
    or crashed, whose failures are then missing (bench/h200_check.sh merges nothing then)."""
    path = _out_path()
    return path.with_name(path.name + ".running")


def _device() -> tuple[str, str]:
    """(GPU name, driver version) as nvidia-smi says, else the arch and "unknown"."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
        name, driver = (x.strip() for x in out.split(","))
        return name, driver
    except Exception:
        return f"a {_gpu_helpers().gpu_probe()[1]} GPU", "unknown"


def _gpu_helpers():
    """tests/gpu/_helpers.py, the module the GPU tests import by that name."""
    gpu = str(Path(__file__).resolve().parent / "gpu")
    if gpu not in sys.path:
        sys.path.insert(0, gpu)
    import _helpers

    return _helpers


def pytest_configure(config):
    if not OUT:
        return
    from cubinforge.runtime.launcher import Kernel

    run = Kernel.run

    def noted_run(self, plan, stream):
        rec = run(self, plan, stream)
        if _test:
            m = self.manifest
            key = (m.variant, m.cubin_sha256)   # an A/B candidate shares the shipped form's name
            _test["launched"][key] = (m.family, m.axes.get("arch"))
        return rec

    Kernel.run = noted_run
    _marker().parent.mkdir(parents=True, exist_ok=True)
    _marker().write_text(f"{os.getpid()}\n")
    _gpu_helpers().CHECK_LISTENERS.append(lambda: _test and _test["checked"].update(_test["launched"]))


def pytest_runtest_logstart(nodeid, location):
    if OUT:
        _test.clear()
        _test.update(nodeid=nodeid, launched={}, checked=set(), outcome="passed")


def pytest_runtest_logreport(report):
    if not (OUT and _test):
        return
    if report.failed or hasattr(report, "wasxfail"):   # an xfail fails for verification too
        _test["outcome"] = "failed"
    elif report.skipped and _test["outcome"] != "failed":
        _test["outcome"] = "skipped"
    if report.when == "teardown":
        _tests.append({**_test, "checked": list(_test["checked"])})
        _test.clear()


def pytest_sessionfinish(session, exitstatus):
    if not OUT:
        return
    _marker().unlink(missing_ok=True)
    if not any(t["launched"] for t in _tests):
        return
    from cubinforge.bench.verified import records_from_gpu_tests

    device, driver = _device()
    doc = records_from_gpu_tests(_tests, device=device, driver=driver, commit=os.environ.get("CUBINFORGE_COMMIT", "unknown"),
                    date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
                    source="pytest -m gpu tests/gpu")
    path = _out_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
