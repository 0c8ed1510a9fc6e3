"""GPU tests of decode-form candidates (bench.ab's `decode-hd64` / `decode-hd128` sets: pack-GQA
forms on a dense cache, split or not) against the float64 reference of test_inference_gpu.py,
each candidate pinned so the runtime launches exactly it (split forms beside the default
registry's combine). Ragged cache_seqlens with empty and 1-key rows, lengths off the key tile,
1 to 16 query tokens, GQA 1 and 4, several split counts; O and LSE NaN-poisoned, every element
checked. A candidate that passes here is what a promotion may ship (its rebuild sha256-equal).

The A/B home: $CUBINFORGE_AB_HOME, else ./.cubinforge-ab-dec64 (`python -m cubinforge.bench.ab
build --home .cubinforge-ab-dec64 --experiments decode-hd64`). Skips without a GPU or the home.
No cutlass import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import test_inference_gpu as G
from cubinforge.bench.inference import _WithCombine
from cubinforge.runtime.registry_source import LocalSource

HOME = Path(os.environ.get("CUBINFORGE_AB_HOME", ".cubinforge-ab-dec64"))


def _candidates() -> dict[str, dict]:
    if not (HOME / "manifests").is_dir():
        return {}
    out = {}
    for p in sorted((HOME / "manifests").glob("*.json")):
        axes = json.loads(p.read_text()).get("axes", {})
        if axes.get("pack_gqa") and not axes.get("varlen") and not axes.get("paged_kv"):
            out[p.stem] = axes
    return out


AXES = _candidates()
NAMES = sorted(AXES) or ["(no decode candidate)"]
pytestmark = G.pytestmark


@pytest.fixture
def pin(monkeypatch):
    def use(name):
        if name not in AXES:
            pytest.skip(f"no decode candidate in {HOME} (bench.ab build --experiments decode-hd64)")
        a = AXES[name]
        if a.get("split_kv"):
            G.need_combine(a["dtype"], a["head_dim"])
        # The candidate alone, beside the default registry's combine kernels (a split candidate
        # needs one; the A/B home builds none): run_case prepares with source=SRC.
        monkeypatch.setattr(G, "SRC", _WithCombine(LocalSource(HOME), name, G.SRC))
        return a
    return use


def _run(a, rng, **kw):
    splits = kw.pop("splits")
    for n in splits if a.get("split_kv") else (1,):
        prepared = G.run_case(rng, causal=a["causal"], num_splits=n, pack_gqa=True, dtype=a["dtype"],
                              d=a["head_dim"], **kw)
        names = " ".join(str(k) for k in prepared.kernels)
        assert G.SRC.names[0] in names, f"the pinned candidate did not run: {names}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sq", [1, 4, 16])
def test_ragged_gqa_decode(pin, name, sq):
    a = pin(name)
    _run(a, np.random.default_rng(sq), b=5, sq=sq, hq=32, hkv=8, lens=[0, 1, 3, 257, 2000], capacity=2048,
         splits=(2, 3, 0))


@pytest.mark.parametrize("name", NAMES)
def test_mha_long_keys_off_the_tile(pin, name):
    """Heads not grouped (one query head per KV head), 64 query tokens (the --decode cells'
    largest), keys that end off every tile size the candidates use."""
    a = pin(name)
    _run(a, np.random.default_rng(64), b=2, sq=64, hq=8, hkv=8, lens=[5000, 4097], capacity=5000,
         splits=(4, 0))
