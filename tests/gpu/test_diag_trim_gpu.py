"""GPU tests of the diag_trim candidates (bench.ab's `diag-trim` set: in a causal tile's first key
block a consumer warpgroup runs QK^T, its mask and softmax, and the PV GEMM over only the keys
its rows see, or skips them) against the float64 reference of test_runtime_gpu.py.

The cases put the tile's first block everywhere the trim decides something: seqlen_q = seqlen_k
off and on tile multiples (warpgroup 0 sees 63 / 64 / 65 keys of a 128-key block), one query
row, sq < sk (the diagonal moves right: the trim must switch off) and sq > sk (the first rows
see no key: warpgroups that see none of the block skip both GEMMs), GQA, and a batch of more
tiles than SMs so a persistent CTA walks several. Out and LSE NaN-poisoned, every element checked.

The A/B home: $CUBINFORGE_AB_HOME, else ./.cubinforge-ab-diagtrim, built with
`python -m cubinforge.bench.ab build --home .cubinforge-ab-diagtrim --experiments diag-trim`.
Skips without a GPU or without the home. No cutlass import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cubinforge.runtime import Kernel
from cubinforge.runtime.registry_source import LocalSource, manifests
from test_runtime_gpu import ARCH, NO_GPU, reference_errors

HOME = Path(os.environ.get("CUBINFORGE_AB_HOME", ".cubinforge-ab-diagtrim"))


def _candidates() -> list:
    if not (HOME / "manifests").is_dir():
        return []
    found, _broken = manifests(LocalSource(HOME), "fa3_fwd")
    return sorted((m for m in found if "+" in m.variant and "diag-trim" in m.variant.split("+", 1)[1]
                   and m.contract.arch == ARCH), key=lambda m: m.variant)


CANDIDATES = _candidates()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv)
CASES = [
    (1, 1, 1, 4, 4),
    (2, 63, 63, 4, 2),
    (1, 65, 65, 8, 8),
    (2, 128, 128, 4, 4),
    (1, 200, 200, 4, 1),
    (2, 333, 333, 8, 2),
    (1, 129, 1000, 4, 1),     # sq < sk: every row sees more than its tile's diagonal
    (1, 1000, 127, 2, 2),     # sq > sk: the first rows see no key
    (1, 700, 651, 4, 4),      # sq > sk by less than a warpgroup
    (2, 4097, 4097, 8, 2),    # 66 query tiles a (batch, head): more tiles than 132 CTAs
]


@pytest.mark.parametrize("variant", [m.variant for m in CANDIDATES] or ["(no diag-trim candidate)"])
def test_diag_trim_candidate_matches_reference(variant):
    if not CANDIDATES:
        pytest.skip(f"no diag-trim candidate in {HOME} (bench.ab build --experiments diag-trim)")
    m = next(m for m in CANDIDATES if m.variant == variant)
    errs = reference_errors(Kernel.from_manifest(m, LocalSource(HOME)), m, CASES)
    assert not errs, f"{variant}:\n" + "\n".join(errs)
