"""bench.decode_ab (issue 11's hd128 decode cells at 0.99 of the anchors): the cells, the launch
geometry it prints, bench.ab's `decode-hd128` candidates and FwdConfig's ctas_per_sm switch.
CPU only: no torch, no GPU (the timing itself runs on the H200)."""

from __future__ import annotations

import json
import re

import pytest


def test_cells_are_the_grid_decode_cells_and_spec_gqa():
    from cubinforge.bench.decode_ab import decode_cells, kv_bytes

    cells = decode_cells()
    ids = [c.id for c in cells]
    assert len(ids) == len(set(ids)) == 14
    assert {c.head_dim for c in cells} == {128} and {c.dtype for c in cells} == {"bf16"}
    assert "bf16-hd128-q1-k8192-full" in ids and "bf16-hd128-q64-k32768-causal" in ids
    spec = next(c for c in cells if c.id == "bf16-hd128-q4-k8192-gqa4-causal")
    # inference.py's spec_decode_b32_q4_k8192_h32_8: 1 GiB of K and V.
    assert (spec.batch, spec.heads, spec.heads_kv, spec.seqlen_q) == (32, 32, 8, 4)
    assert kv_bytes(spec) == 2 * 32 * 8192 * 8 * 128 * 2
    assert [c.id for c in decode_cells(["k32768"])] == [i for i in ids if "k32768" in i]


def test_geometry_of_the_shipped_form():
    from cubinforge.bench.decode_ab import decode_cells, geometry

    cells = {c.id: c for c in decode_cells()}
    # 256 tiles at one CTA an SM: two waves, the second 124 CTAs; auto keeps one split.
    g = geometry(cells["bf16-hd128-q4-k8192-gqa4-causal"], 0)
    assert (g["splits"], g["tiles"], g["ctas"], g["last_wave_ctas"], g["blocks_per_cta"]) == (1, 256, 256, 124, 64)
    assert g["waves"] == pytest.approx(256 / 132, abs=1e-3) and g["combine_fraction"] == 0
    # Two CTAs an SM: the same 256 CTAs are one wave of 264 slots.
    g2 = geometry(cells["bf16-hd128-q4-k8192-gqa4-causal"], 1, tile_n=64, ctas_per_sm=2)
    assert (g2["slots"], g2["last_wave_ctas"], g2["blocks_per_cta"]) == (264, 256, 128) and g2["waves"] < 1
    # 32k keys, batch 4: 64 tiles fill under 80% of the SMs, so auto takes 2 splits (128 CTAs, one wave).
    g = geometry(cells["bf16-hd128-q1-k32768-full"], 0)
    assert (g["splits"], g["ctas"], g["last_wave_ctas"]) == (2, 128, 128)
    # The combine's fp32 partials, written and read: 2 * s * b * sq * h * d * 4 bytes.
    g = geometry(cells["bf16-hd128-q64-k8192-full"], 2)
    assert g["combine_fraction"] == pytest.approx(2 * 2 * 16 * 64 * 16 * 128 * 4 / (2 * 16 * 8192 * 16 * 128 * 2),
                                                  abs=1e-5)


def test_plan_table_needs_no_gpu(capsys):
    from cubinforge.bench.decode_ab import main

    assert main(["--plan", "--cells", "gqa4", "--splits", "0,1,2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["cell", "form", "s"]
    assert len(out) == 1 + 3 * 3  # one cell x three forms x three split counts
    assert all("gqa4" in line for line in out[1:])


def _rows():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    return [(label, experiment_config(o), ab_name(experiment_config(o), label)) for label, o in EXPERIMENTS["decode-hd128"]]


def test_decode_hd128_candidates_say_what_they_change():
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import SMEM_CTA_OVERHEAD, SMEM_PER_SM

    rows = _rows()
    names = [n for _, _, n in rows]
    assert len(set(names)) == len(names) == 20
    for label, c, name in rows:
        assert (c.dtype, c.head_dim, c.tile_m, c.pack_gqa, c.paged_kv) == ("bf16", 128, 64, True, False), label
        assert ("splitkv" in name) == c.split_kv
        tile = re.search(r"tile-(\d+)x(\d+)", label)
        assert (c.tile_m, c.tile_n) == tuple(map(int, tile.groups())), label
        stages = re.search(r"stages-(\d+)", label)
        assert c.stages == (int(stages.group(1)) if stages else 3), label
        assert c.ctas_per_sm == (2 if "2cta" in label else 1), label
        if c.ctas_per_sm == 2:
            assert 2 * (c.smem_bytes + SMEM_CTA_OVERHEAD) <= SMEM_PER_SM
            assert sum(c.register_split) * 128 * 2 <= 65536  # two CTAs' warpgroups in the SM's registers
    # Each label is built causal and not, split and unsplit: the runtime needs both forms.
    by_label = {}
    for label, c, _ in rows:
        by_label.setdefault(label, set()).add((c.causal, c.split_kv))
    assert all(v == {(False, False), (False, True), (True, False), (True, True)} for v in by_label.values())


def test_ctas_per_sm_is_refused_where_it_cannot_hold():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

    base = dict(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, tile_m=64, pack_gqa=True, split_kv=True)
    assert FwdConfig(**base).ctas_per_sm == 1
    assert FwdConfig(**base).register_split == (256, 56)  # the shipped split, unchanged
    two = FwdConfig(**base, tile_n=64, stages=2, ctas_per_sm=2)
    assert two.register_split == (216, 40)
    with pytest.raises(ValueError, match="two CTAs fit"):
        FwdConfig(**base, ctas_per_sm=2)  # 64 x 128 x 3 stages: 208 KiB
    with pytest.raises(ValueError, match="two CTAs fit"):
        FwdConfig(**base, tile_n=64, stages=3, ctas_per_sm=2)  # 112 KiB: just over half an SM
    with pytest.raises(ValueError, match="1 or 2"):
        FwdConfig(**base, tile_n=64, stages=2, ctas_per_sm=3)
    with pytest.raises(ValueError, match="decode forms"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, scheduler="persistent", ctas_per_sm=2)
    with pytest.raises(ValueError, match="decode forms"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, tile_m=128, tile_n=64, stages=2,
                  pack_gqa=True, ctas_per_sm=2)


def test_candidates_group_an_ab_home_by_label(tmp_path):
    from cubinforge.bench.decode_ab import candidates

    (tmp_path / "manifests").mkdir()
    rows = [("fa3-fwd-sm_90a-bf16-hd128-causal-packgqa+tile-64x64", {"pack_gqa": True}),
            ("fa3-fwd-sm_90a-bf16-hd128-causal-packgqa-splitkv+tile-64x64", {"pack_gqa": True, "split_kv": True}),
            ("fa3-fwd-sm_90a-bf16-hd128-causal-varlen+persistent", {"varlen": True}),
            ("fa3-fwd-sm_90a-e4m3-hd128-causal-packgqa+default", {"pack_gqa": True, "dtype": "e4m3"}),
            ("fa3-fwd-sm_90a-bf16-hd128-causal+default", {})]
    for name, axes in rows:
        (tmp_path / "manifests" / f"{name}.json").write_text(json.dumps({"variant": name, "axes": {"dtype": "bf16", **axes}}))
    assert candidates(tmp_path) == {"tile-64x64": [rows[0][0], rows[1][0]]}


def test_with_combine_serves_a_label_and_the_combine():
    from cubinforge.bench.inference import _WithCombine

    class Src:
        def __init__(self, names):
            self.names = names

        def list(self):
            return self.names

        def get(self, name):
            return ("own" if name in self.names else "?", name)

        def blob(self, sha):
            raise KeyError(sha)

    base, shipped = Src(["a+x", "b+x"]), Src(["attn-combine-sm_90a-bf16-hd128", "fa3-fwd-other"])
    w = _WithCombine(base, ["a+x", "b+x"], shipped)
    assert w.list() == ["a+x", "b+x", "attn-combine-sm_90a-bf16-hd128"]
    assert w.get("b+x") == ("own", "b+x") and w.get("attn-combine-sm_90a-bf16-hd128")[0] == "own"
    assert _WithCombine(base, "a+x", shipped).list()[0] == "a+x"  # one name, as run_fp8_decode_ab passes it


def test_a_two_cta_form_plans_its_splits_over_the_sms():
    from cubinforge.runtime.decode_plan import plan_decode

    # 32k keys, batch 4, 16/16 heads: 64 tiles, 2 splits (128 CTAs) at 64 x 128 and at the
    # two-CTA 64 x 64 alike (check7: split over 264 slots, 4 ways, it lost to 2 ways).
    assert plan_decode(4, 1, 16, 16, 32768, 132, 64, 128).num_splits == 2
    assert plan_decode(4, 1, 16, 16, 32768, 132, 64, 64).num_splits == 2
    # 256 tiles (8k keys, batch 32; spec / GQA decode) fill the SMs: one split.
    assert plan_decode(32, 4, 32, 8, 8192, 132, 64, 64).num_splits == 1


def test_geometry_counts_a_two_cta_form_waves_over_its_slots():
    from cubinforge.bench.decode_ab import decode_cells, geometry

    cell = next(c for c in decode_cells() if c.id == "bf16-hd128-q1-k32768-full")
    g = geometry(cell, 0, tile_n=64, ctas_per_sm=2)
    assert (g["splits"], g["ctas"], g["slots"], g["last_wave_ctas"]) == (2, 128, 264, 128)


def test_summary_names_the_promotion_figures():
    from cubinforge.bench.decode_ab import summary

    rec = {"cell": "bf16-hd128-q4-k8192-gqa4-causal", "best_anchor": "fa4", "entries": {
        "fa4": {"ms": 0.2412, "kv_TBps": 4.45, "vs_best_anchor": 1.0},
        "route": {"ms": 0.2443, "vs_best_anchor": 0.2412 / 0.2443},
        "s=1": {"ms": 0.2443, "vs_best_anchor": 0.2412 / 0.2443},
        "s=2": {"ms": 0.2450, "vs_best_anchor": 0.2412 / 0.2450},
        "tile-64x64+stages-2+2cta s=1": {"ms": 0.2400, "vs_best_anchor": 0.2412 / 0.2400},
        "tile-64x64 s=2": {"ok": False, "error": "x"}}}
    line = summary([rec]).splitlines()[1].split()
    assert line[:4] == ["bf16-hd128-q4-k8192-gqa4-causal", "fa4", "4.450", "0.987"]
    assert line[4:6] == ["s=1", "0.987"] and line[-3:] == ["tile-64x64+stages-2+2cta", "s=1", "1.005"]
