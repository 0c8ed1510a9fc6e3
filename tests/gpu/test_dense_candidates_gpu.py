"""GPU tests of a dense bench.ab home's candidates (the `hd96-pss` set, P through shared memory:
CUBINFORGE_AB_HOME=.cubinforge-ab-hd96pss CUBINFORGE_AB_LABEL=p-smem; `late-k-release`, K's stage
released after the softmax behind a test of the row sums; `k-stages`) against the float64 reference of
test_runtime_gpu.py: sequence lengths off every tile edge, sq != sk both ways (causal rows that
see no key), GQA, a batch of more tiles than SMs (a persistent CTA walks several), and a long key
range (many releases: a release that never came would hang the kernel, not pass). Out and LSE
NaN-poisoned, every element checked.

The A/B home: $CUBINFORGE_AB_HOME, else ./.cubinforge-ab, built with e.g.
`python -m cubinforge.bench.ab build --home .cubinforge-ab --experiments k-stages`; the variants
whose label names $CUBINFORGE_AB_LABEL (a label token such as `late-k-release` or `stages-3`;
unset: every labelled variant, the controls too). Skips without a GPU or without the home. No
cutlass import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cubinforge.runtime import Kernel
from cubinforge.runtime.registry_source import LocalSource
from _helpers import labelled_candidates
from test_runtime_gpu import ARCH, NO_GPU, reference_errors

HOME = Path(os.environ.get("CUBINFORGE_AB_HOME", ".cubinforge-ab"))
LABEL = os.environ.get("CUBINFORGE_AB_LABEL", "")

CANDIDATES = labelled_candidates(HOME, LABEL, ARCH)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): 1 x 1; around the 128/192-row and 64-144-key
# tile edges; sq < sk and sq > sk; 2 x 9 x 8 query tiles over 1000 keys (more than 132 CTAs);
# 4,099 keys (33-65 key blocks a tile).
CASES = [
    (1, 1, 1, 4, 4),
    (2, 191, 143, 4, 2),
    (1, 193, 129, 8, 8),
    (1, 193, 145, 8, 8),
    (3, 129, 1000, 4, 1),
    (1, 1000, 127, 2, 2),
    (2, 1537, 1000, 8, 2),
    (1, 300, 4099, 4, 4),
]


@pytest.mark.parametrize("variant", [m.variant for m in CANDIDATES] or ["(no candidate)"])
def test_candidate_matches_reference(variant):
    if not CANDIDATES:
        pytest.skip(f"no candidate labelled {LABEL!r} in {HOME} (bench.ab build --home {HOME} --experiments ...)")
    m = next(m for m in CANDIDATES if m.variant == variant)
    errs = reference_errors(Kernel.from_manifest(m, LocalSource(HOME)), m, CASES)
    assert not errs, f"{variant}:\n" + "\n".join(errs)
