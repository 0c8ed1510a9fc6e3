"""Render the probe bundle: the sample fa3_fwd contract (sm_90a, bf16, hd128, causal) with a 2x1x1
cluster, pointing at probe.cubin (entry `probe`)."""

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from sample_manifests import manifest  # noqa: E402

from cubinforge.generator.cpp_bundle import render_cpp_bundle  # noqa: E402


def main(cubin: Path, out: Path, embed: bool) -> None:
    data = cubin.read_bytes()
    m, _ = manifest("sm_90a", "bf16", 128, True, cluster=(2, 1, 1))
    m["contract"]["entry"] = "probe"
    # The offsets nvcc's KPARAM table gives this signature: they are relative to the parameter
    # bank (c[0x0][0x210]), so the 64-byte aligned tensor maps sit at 112, 240, ... and the
    # contract's `align` can only promise 16 for them.
    offsets = [0, 12, 24, 36, 48, 112, 240, 368, 496, 624, 628, 629]
    for p, off in zip(m["contract"]["params"], offsets):
        p["offset"] = off
        if p["kind"] == "tensormap":
            p["align"] = 16
    # The grid's x must be a multiple of the cluster's: round ceil(seqlen_q / 128) up to even.
    m["contract"]["grid"][0] = ["seqlen_q", 128, "ceil_div", 2, "ceil_div", 2, "*"]
    m["cubin"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    render_cpp_bundle([m], {m["cubin"]["sha256"]: data}, out, embed=embed)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), "--embed" in sys.argv)
