"""On a Blackwell GPU (sm_100a) only: the first numerical check the fa4_fwd family would get.

Every fa4_fwd variant in the local registry is launched (with the explicit opt-in: they are
unverified) on the cases of test_runtime_gpu.py against its float64 reference. With
CUBINFORGE_VERIFY_OUT=FILE set, a verification record of the outcome is written there for
`cubinforge verify import FILE`. Skipped everywhere else; it has never run (no Blackwell GPU).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_runtime_gpu as G  # noqa: E402  (its host <-> device helpers and reference)

from cubinforge.runtime import Kernel, driver  # noqa: E402
from cubinforge.runtime.registry_source import default_source, manifests  # noqa: E402


def _fa4():
    if G.NO_GPU is not None or G.ARCH != "sm_100a":
        return []
    found, _ = manifests(default_source(), "fa4_fwd")
    return sorted((m for m in found if m.contract.arch == "sm_100a"), key=lambda m: m.variant)


FA4 = _fa4()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(G.ARCH != "sm_100a", reason="fa4_fwd needs an sm_100a (Blackwell) GPU"),
              pytest.mark.skipif(not FA4, reason="no fa4_fwd variant in the local registry (make kernels ARCH=sm100)")]
_RESULTS: dict[str, dict] = {}


@pytest.mark.parametrize("variant", [m.variant for m in FA4] or ["none"])
def test_fa4_variant_matches_reference(variant):
    m = next(m for m in FA4 if m.variant == variant)
    kernel = Kernel.from_manifest(m, default_source(), allow_unverified=True)
    dtype, d, causal = m.axes["dtype"], int(m.axes["head_dim"]), bool(m.axes["causal"])
    rng = np.random.default_rng(zlib.crc32(variant.encode()))
    errs = []
    for n, (b, sq, sk, hq, hkv) in enumerate(G.CASES):
        (qh, kh, vh), (q, k, v) = G.make_inputs(rng, b, sq, sk, hq, hkv, d, dtype)
        o, lse = G.poisoned((b, sq, hq, d), dtype), G.poisoned((b, hq, sq), "f32")
        scale = None if n % 2 else 0.7 / math.sqrt(d)
        kernel.launch({"q": G.wrap(q, dtype), "k": G.wrap(k, dtype), "v": G.wrap(v, dtype),
                       "o": G.wrap(o, dtype), "lse": lse}, {} if scale is None else {"softmax_scale": scale})
        ref_o, ref_lse = G.reference(qh, kh, vh, scale or 1 / math.sqrt(d), causal)
        errs += G.compare(G.download(G.wrap(o, dtype)), G.download(lse), ref_o, ref_lse,
                          f"b={b} sq={sq} sk={sk} hq={hq} hkv={hkv}")
    _RESULTS[variant] = {"manifest": m, "passed": not errs, "cases": len(G.CASES)}
    _write_record()
    assert not errs, f"{variant}:\n" + "\n".join(errs)


def _device_and_driver() -> tuple[str, str]:
    name = driver.call("cuDeviceGetName", 256, driver.call("cuDeviceGet", 0))
    name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
    v = int(driver.call("cuDriverGetVersion"))
    return name, f"CUDA {v // 1000}.{v % 1000 // 10}"


def _write_record() -> None:
    out = os.environ.get("CUBINFORGE_VERIFY_OUT")
    if not out:
        return
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    device, version = _device_and_driver()
    records = [{"variant": name, "family": r["manifest"].family, "arch": r["manifest"].contract.arch,
                "cubin_sha256": r["manifest"].cubin_sha256, "device": device,
                "driver": version, "commit": commit or None,
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "result": "passed" if r["passed"] else "failed", "cases": r["cases"],
                "source": "tests/gpu/test_fa4_gpu.py"} for name, r in sorted(_RESULTS.items())]
    Path(out).write_text(json.dumps({"verification_version": 1, "records": records}, indent=1) + "\n")
