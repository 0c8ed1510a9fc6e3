"""GPU tests of the p_smem candidates (bench.ab's `hd96-pss` set: P through shared memory, SS PV
GEMM, hd96 at 192 x 144 / 192 x 128) against the float64 reference of test_runtime_gpu.py:
odd sequence lengths around the 192-row and 144/128-key tile edges, sq != sk both ways (causal
rows that see no key), GQA, and a batch of more tiles than SMs so a persistent CTA walks
several (P's slab reused across tiles). Out and LSE NaN-poisoned, every element checked.

The A/B home: $CUBINFORGE_AB_HOME, else ./.cubinforge-ab-hd96pss, built with
`python -m cubinforge.bench.ab build --home .cubinforge-ab-hd96pss --experiments hd96-pss`.
Skips without a GPU or without the home. No cutlass import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cubinforge.runtime import Kernel
from cubinforge.runtime.registry_source import LocalSource
from _helpers import labelled_candidates
from test_runtime_gpu import ARCH, NO_GPU, reference_errors

HOME = Path(os.environ.get("CUBINFORGE_AB_HOME", ".cubinforge-ab-hd96pss"))

CANDIDATES = labelled_candidates(HOME, "p-smem", ARCH)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): 1 x 1; one key tile's edge (143 / 145 / 127 /
# 129 keys) under one query tile's (191 / 193 rows); sq < sk and sq > sk (causal: the first rows
# see no key); then 2 x 9 x 8 = 144 query tiles (1537 rows) over 1000 keys, more than 132 CTAs.
CASES = [
    (1, 1, 1, 4, 4),
    (2, 191, 143, 4, 2),
    (1, 193, 145, 8, 8),
    (3, 129, 1000, 4, 1),
    (1, 1000, 127, 2, 2),
    (2, 1537, 1000, 8, 2),
]


@pytest.mark.parametrize("variant", [m.variant for m in CANDIDATES] or ["(no p-smem candidate)"])
def test_p_smem_candidate_matches_reference(variant):
    if not CANDIDATES:
        pytest.skip(f"no p-smem candidate in {HOME} (bench.ab build --experiments hd96-pss)")
    m = next(m for m in CANDIDATES if m.variant == variant)
    errs = reference_errors(Kernel.from_manifest(m, LocalSource(HOME)), m, CASES)
    assert not errs, f"{variant}:\n" + "\n".join(errs)
