"""GPU tests of the persistent varlen candidates (bench.ab's `varlen-persist` set) against the
float64 reference of test_varlen_gpu.py, each candidate pinned (the runtime launches exactly
it): ragged batches with 0-, 1- and 17-token sequences, queries with no keys, seqused shorter
than the slots, more than 32 sequences, and batches of several hundred (tile, head) pairs so
every CTA walks several tiles, empty ones among them; paged candidates through shuffled page
tables. Out and LSE NaN-poisoned, every element checked (rows no sequence owns still NaN).

The A/B home: $CUBINFORGE_AB_HOME, else ./.cubinforge-ab-varlen-persist, built here with
`python -m cubinforge.bench.ab build --home .cubinforge-ab-varlen-persist --experiments
varlen-persist`; the ragged TMA O candidates' home with `--home .cubinforge-ab-vtma --experiments
varlen-tma-o` (then CUBINFORGE_AB_HOME=.cubinforge-ab-vtma). Skips without a GPU or without
the home. No cutlass import.
"""

from __future__ import annotations

import functools

import json
import os
from pathlib import Path

import numpy as np
import pytest

import test_varlen_gpu as vg
from _helpers import label_names
from cubinforge.bench.anchors import _PinnedSource
from cubinforge.runtime.registry_source import LocalSource
from test_inference_gpu import NO_GPU

HOME = Path(os.environ.get("CUBINFORGE_AB_HOME", ".cubinforge-ab-varlen-persist"))
# Only the candidates whose label (after the variant's "+") names this token, when set (an A/B
# home's controls are the shipped cubins, tested already: e.g. CUBINFORGE_AB_LABEL=late-k-release).
LABEL = os.environ.get("CUBINFORGE_AB_LABEL", "")


def _candidates() -> list[tuple[str, dict]]:
    if not (HOME / "manifests").is_dir():
        return []
    out = []
    for p in sorted((HOME / "manifests").glob("*.json")):
        axes = json.loads(p.read_text()).get("axes", {})
        if axes.get("varlen") and axes.get("scheduler") == "persistent" and (not LABEL or label_names(p.stem, LABEL)):
            out.append((p.stem, axes))
    return out


CANDIDATES = _candidates()
MODEL_AXES = ("local", "softcap", "learnable_sink")  # checked by test_model_variants_on_the_walk
_model = lambda a: any(a.get(m) for m in MODEL_AXES)  # noqa: E731
PACKED = [n for n, a in CANDIDATES if not a.get("paged_kv") and not _model(a)] or ["(no packed candidate)"]
PAGED = [n for n, a in CANDIDATES if a.get("paged_kv") and not _model(a)] or ["(no paged candidate)"]
MODEL = [n for n, a in CANDIDATES if _model(a)] or ["(no model-variant candidate)"]
AXES = dict(CANDIDATES)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU is not None, reason=NO_GPU or "")]


_RUN_VARLEN = vg.run_varlen


class _Pinned(_PinnedSource):
    """The home's registry showing one variant only: the runtime's selection can pick nothing else."""

    def __init__(self, name: str):
        super().__init__(LocalSource(HOME), name)
        self.home = HOME  # the skip messages of the modules whose SRC it stands in for name it


@pytest.fixture
def pin(monkeypatch):
    def use(name):
        if name not in AXES:
            pytest.skip(f"no persistent varlen candidate in {HOME} (bench.ab build --experiments varlen-persist)")
        monkeypatch.setattr(vg, "SRC", _Pinned(name))  # run_varlen launches with source=SRC
        # ... on inputs of the variant's own dtype and head dim (a home may hold fp16 forms too)
        monkeypatch.setattr(vg, "run_varlen", functools.partial(
            _RUN_VARLEN, dtype=AXES[name]["dtype"], d=AXES[name]["head_dim"],
            dv=AXES[name].get("head_dim_v", AXES[name]["head_dim"])))
        return AXES[name]["causal"]
    return use


# 304 (tile, head) pairs at 16 heads: more than the SMs, so each CTA walks two or three, empty
# tiles among them (5 queries with no key; causal, 129 queries on 1 key leave the first tile
# seeing none).
WALK_Q = [0, 1, 17, 600, 129, 700, 5, 0, 300]
WALK_K = [5, 0, 17, 600, 1, 800, 0, 3, 300]


@pytest.mark.parametrize("name", PACKED)
def test_ragged_self_attention(pin, name):
    causal = pin(name)
    for hq, hkv in ((8, 8), (16, 4)):
        vg.run_varlen(np.random.default_rng(hq), vg.RAGGED, vg.RAGGED, hq=hq, hkv=hkv, causal=causal)


@pytest.mark.parametrize("name", PACKED)
def test_every_cta_walks_several_tiles(pin, name):
    causal = pin(name)
    vg.run_varlen(np.random.default_rng(3), WALK_Q, WALK_K, hq=16, hkv=4, causal=causal)


@pytest.mark.parametrize("name", PACKED)
def test_cross_lengths_tile_edges_and_seqused(pin, name):
    causal = pin(name)
    rng = np.random.default_rng(5)
    vg.run_varlen(rng, [127, 128, 129, 1, 17, 0, 191, 192, 193], [300, 5, 129, 0, 1, 9, 1000, 192, 64],
                  hq=16, hkv=4, causal=causal)
    vg.run_varlen(rng, [20, 1, 300, 17, 0, 700], [40, 3, 300, 17, 2, 900], hq=8, hkv=8, causal=causal,
                  used_q=[3, 0, 299, 17, 0, 1], used_k=[40, 1, 5, 0, 2, 650])


@pytest.mark.parametrize("name", PACKED)
def test_a_plan_run_again_and_again(pin, name):
    """One prepared plan run four times, poisoned before each: a form that hands tiles out from
    a counter (varlen_dynamic) must leave it as it found it; the first run after preparing and
    every replay walk every tile."""
    causal = pin(name)
    vg.run_varlen(np.random.default_rng(13), WALK_Q, WALK_K, hq=16, hkv=4, causal=causal, runs=4)


@pytest.mark.parametrize("name", PACKED)
def test_more_sequences_than_a_warp(pin, name):
    causal = pin(name)
    rng = np.random.default_rng(7)
    lens = rng.integers(0, 100, size=70).tolist()
    vg.run_varlen(rng, lens, lens, hq=16, hkv=4, causal=causal, host_cu=True)


@pytest.mark.parametrize("name", PAGED)
@pytest.mark.parametrize("page_size", [16, 64, 256])
def test_paged(pin, name, page_size):
    causal = pin(name)
    rng = np.random.default_rng(11 + page_size)
    vg.run_varlen(rng, [0, 1, 17, 200, 129], [5, 300, 17, 1000, 129], hq=32, hkv=8, causal=causal,
                  page_size=page_size, check=True)
    vg.run_varlen(rng, WALK_Q, [max(n, 1) for n in WALK_K], hq=16, hkv=4, causal=causal, page_size=page_size,
                  used_q=[0, 1, 17, 600, 100, 700, 5, 0, 300])


@pytest.mark.parametrize("name", PAGED)
def test_a_paged_plan_run_again_and_again(pin, name):
    """test_a_plan_run_again_and_again through a shuffled page table (a paged candidate with the
    tile counter must leave it zero too)."""
    causal = pin(name)
    vg.run_varlen(np.random.default_rng(19), WALK_Q, [max(n, 1) for n in WALK_K], hq=16, hkv=4, causal=causal,
                  page_size=64, runs=4)


@pytest.mark.parametrize("name", PACKED)
def test_no_row_past_a_sequence_end_is_written(pin, name):
    """Every sequence but the last is followed by 129 rows no sequence owns (seqused_q short of
    its slot), more than a tile: a store reaching past a sequence's end (a TMA box the ragged map
    does not clip there, a row predicate off by one) leaves a value where run_varlen asserts the
    NaN poison is still in place, in O and LSE. Lengths end before, on and after tile edges, 0-,
    1- and 17-token sequences among them; GQA and MHA; the last sequence fills its slot and, in
    the GQA run, o has no spare rows after it, so its tiles end at total_q (the ragged map's own
    bound); in the MHA run 3 spare rows follow it, which must stay poisoned too."""
    causal = pin(name)
    rng = np.random.default_rng(13)
    used = [1, 17, 0, 127, 128, 129, 255, 256, 300]
    slots = [u + 129 for u in used[:-1]] + [used[-1]]
    keys = [u + 40 for u in used]
    for hq, hkv, spare in ((16, 4, 0), (8, 8, 3)):
        vg.run_varlen(rng, slots, keys, hq=hq, hkv=hkv, causal=causal, used_q=used, spare=spare)


@pytest.mark.parametrize("name", PACKED)
def test_rising_scores(pin, name):
    """Scores that rise block after block in the kernel's order (keys scaled up towards each
    sequence's start): every block moves the rows' maximum, FA4's conditional rescale's case
    (a form without it checks the same way)."""
    causal = pin(name)
    vg.run_varlen(np.random.default_rng(17), [300, 1, 700, 129], [300, 5, 900, 129], hq=8, hkv=8, causal=causal,
                  k_ramp=True)


@pytest.mark.parametrize("name", MODEL)
def test_model_variants_on_the_walk(pin, monkeypatch, name):
    """A window / softcap / sink candidate (bench.ab varlen-model, varlen-walk-rest; packed or
    paged) pinned, against the float64 reference of test_inference_variants_gpu.run_varlen:
    windows narrower than a tile, one tile wide, one side unbounded and wider than most
    sequences; the ragged batch there and a batch with several tiles per CTA (empty tiles among
    them); GQA 4."""
    import test_inference_variants_gpu as iv

    causal = pin(name)
    monkeypatch.setattr(iv, "SRC", _Pinned(name))
    a = AXES[name]
    windows = ([(0, 0), (1, 1), (63, 0), (127, 127), (128, 0), (16, -1), (2000, 0)] if a.get("local")
               else [(-1, -1)])
    rng = np.random.default_rng(23)
    # A paged candidate reads its keys through shuffled page tables, the page size taking turns:
    # smaller than, equal to and larger than a key tile.
    pages = (16, 64, 256) if a.get("paged_kv") else (None,)
    for i, window in enumerate(windows):
        for j, (slots_q, slots_k) in enumerate(((iv.SLOTS_Q, iv.SLOTS_K), (WALK_Q, WALK_K))):
            iv.run_varlen(rng, slots_q, slots_k, hq=16, hkv=4, d=a["head_dim"], causal=causal, window=window,
                          softcap=30.0 if a.get("softcap") else 0.0, sink=bool(a.get("learnable_sink")),
                          page_size=pages[(2 * i + j) % len(pages)], dtype=a["dtype"])
