"""Inference attention on the CPU: the split range, the dispatcher's heuristics, the spec's
new sets, the contracts' bindings, and (slow) real cross-compiles checked against the cubin."""

from __future__ import annotations

import importlib.util
import math

import pytest
from conftest import module_available

from cubinforge.generator import spec
from cubinforge.generator.kernels.fa3_fwd_sm90.config import PAGE_CHUNK, FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import split_range
from cubinforge.runtime import kvcache
from cubinforge.runtime.arrays import DeviceArray
from cubinforge.runtime.contract import bind, load_contract

HAS_DSL = module_available("cutlass")


# --------------------------------------------------------------------------- split range

@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 1), (0, 7), (3, 64), (0, 256), (5, 6)])
@pytest.mark.parametrize("splits", [1, 2, 3, 5, 8, 16, 64])
def test_split_range_covers_each_block_once_in_order(lo, hi, splits):
    ranges = [split_range(lo, hi, s, splits) for s in range(splits)]
    seen = [n for a, b in ranges for n in range(a, b)]
    assert seen == list(range(lo, hi))  # disjoint, contiguous, in split order
    per = math.ceil((hi - lo) / splits) if hi > lo else 0
    assert all(b - a <= per for a, b in ranges)
    # empty splits only at the end, and they are empty (lo >= hi)
    sizes = [max(b - a, 0) for a, b in ranges]
    assert sizes == sorted(sizes, reverse=True)


def test_split_range_empty_tile_gives_every_split_nothing():
    assert all(a >= b for a, b in (split_range(0, 0, s, 4) for s in range(4)))


# --------------------------------------------------------------------------- heuristics

H200 = 132


def test_no_split_when_the_tiles_fill_the_gpu():
    assert kvcache.num_splits_heuristic(tiles=512, n_blocks=32, sm_count=H200) == 1
    assert kvcache.num_splits_heuristic(tiles=106, n_blocks=1000, sm_count=H200) == 1  # >= 80% of a wave


def test_no_split_for_short_key_ranges():
    assert kvcache.num_splits_heuristic(tiles=8, n_blocks=2 * kvcache.MIN_BLOCKS_PER_SPLIT - 1, sm_count=H200) == 1


@pytest.mark.parametrize("tiles,n_blocks", [(64, 256), (8, 256), (1, 4096), (32, 64), (100, 40)])
def test_split_fills_a_wave_and_keeps_blocks_per_split(tiles, n_blocks):
    s = kvcache.num_splits_heuristic(tiles, n_blocks, H200)
    assert s > 1
    assert n_blocks // s >= kvcache.MIN_BLOCKS_PER_SPLIT
    assert s <= kvcache.MAX_SPLITS
    waves = tiles * s / H200
    assert waves / math.ceil(waves) >= 0.8  # the SMs of the last wave are mostly busy


def test_plan_decode_issue_cases():
    # long context: batch 8 x 32k, 32/8 heads, pack-GQA rows 4 -> 64 tiles: split
    p = kvcache.plan_decode(8, 1, 32, 8, 32768, H200, 64, 128)
    assert p.pack_gqa and p.tiles == 64 and p.num_splits > 1
    # paged decode batch 64 x 4096: 512 tiles already fill the GPU
    assert kvcache.plan_decode(64, 1, 32, 8, 4096, H200, 64, 128).num_splits == 1
    # explicit values are kept
    p = kvcache.plan_decode(2, 1, 8, 8, 1000, H200, 128, 128, pack_gqa=False, num_splits=7)
    assert (p.pack_gqa, p.num_splits) == (False, 7)


def test_pack_gqa_heuristic():
    assert kvcache.pack_gqa_heuristic(1, 32, 8, 64)
    assert kvcache.pack_gqa_heuristic(4, 64, 8, 64)
    assert not kvcache.pack_gqa_heuristic(1, 8, 8, 64)  # MHA: nothing to pack
    assert not kvcache.pack_gqa_heuristic(4096, 32, 8, 128)  # prefill fills the tile already


# --------------------------------------------------------------------------- spec

def test_default_set_serves_decode_and_keeps_the_dense_variants():
    names = [v.name for v in spec.expand_set("default")]
    assert "fa3-fwd-sm_90a-bf16-hd128-causal-lpt" in names  # the dense names stay
    assert "attn-combine-sm_90a-bf16-hd128" in names
    decode = [n for n in names if "packgqa" in n]
    assert any("splitkv" in n and "paged" in n for n in decode)
    assert any("splitkv" not in n and "paged" not in n for n in decode)
    for n in names:
        assert spec.parse_name(n).name == n


def test_inference_set_has_every_form_and_the_combine():
    vs = spec.expand_set("inference")
    forms = {(v["split_kv"], v["pack_gqa"], v["paged_kv"]) for v in vs if v.family == "fa3_fwd" and not v["varlen"]}
    assert len(forms) == 7 and (False, False, False) not in forms
    assert any(v.family == "attn_combine" for v in vs)
    # The decode forms run one tile per CTA (varlen's walk: tests/test_varlen.py).
    assert all(v["scheduler"] == "single" for v in vs if v.family == "fa3_fwd" and not v["varlen"])


def test_inference_axes_need_one_tile_per_cta():
    with pytest.raises(spec.SpecError, match="scheduler=single"):
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=False,
                          split_kv=True, scheduler="persistent")
    with pytest.raises(ValueError, match="scheduler 'single'"):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, pack_gqa=True, scheduler="persistent")


def test_paged_needs_tiles_of_whole_chunks():
    with pytest.raises(ValueError, match=str(PAGE_CHUNK)):
        FwdConfig(arch="sm_90a", dtype="bf16", head_dim=256, causal=False, paged_kv=True, tile_n=88)


# --------------------------------------------------------------------------- contracts

def _contract(cfg, boxes=None):
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import inference_contract
    boxes = boxes or {"q": (64, cfg.tile_m), "k": (64, cfg.tile_n), "v": (64, cfg.tile_n),
                      "kc": (64, PAGE_CHUNK), "vc": (64, PAGE_CHUNK)}
    c = inference_contract(cfg, boxes, 128)
    return load_contract({"contract_version": 1, "variant": "t", "arch": "sm_90a", "entry": "e",
                          "block": [cfg.threads, 1, 1], "cluster": [1, 1, 1], "dynamic_smem_bytes": 1,
                          "static_smem_bytes": 0, **c})


def arr(shape, dtype, ptr=1 << 20):
    return DeviceArray.from_pointer(ptr, tuple(shape), None, dtype, device=0)  # compact row-major


def test_split_pack_paged_contract_binds_the_grid():
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, split_kv=True, pack_gqa=True,
                    paged_kv=True, tile_m=64)
    c = _contract(cfg)
    b, sq, hq, hkv, pages, page, splits = 8, 4, 32, 8, 512, 256, 5
    t = {"q": arr((b, sq, hq, 128), "bf16"), "k": arr((pages, page, hkv, 128), "bf16"),
         "v": arr((pages, page, hkv, 128), "bf16"), "seqused_k": arr((b,), "i32"),
         "page_table": arr((b, 64), "i32"), "o_partial": arr((splits, b, sq, hq, 128), "f32"),
         "lse_partial": arr((splits, b, hq, sq), "f32")}
    bound = bind(c, t, {}, {"sm_count": 132})
    # rows = 4 tokens x 4 heads of a group = 16 -> one 64-row tile per KV head, per split
    assert bound.grid == (1 * splits, hkv, b)
    t["page_table"] = arr((b + 1, 64), "i32")
    with pytest.raises(Exception, match="page_table"):
        bind(c, t, {}, {"sm_count": 132})


def test_paged_contract_refuses_small_pages():
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, paged_kv=True)
    c = _contract(cfg)
    t = {"q": arr((2, 1, 8, 128), "bf16"), "k": arr((16, 8, 8, 128), "bf16"), "v": arr((16, 8, 8, 128), "bf16"),
         "seqused_k": arr((2,), "i32"), "page_table": arr((2, 8), "i32"), "o": arr((2, 1, 8, 128), "bf16"),
         "lse": arr((2, 8, 1), "f32")}
    with pytest.raises(Exception, match="multiple of 16"):
        bind(c, t, {}, {"sm_count": 132})


def test_unsplit_dense_contract_grid_counts_query_heads():
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, pack_gqa=False, split_kv=True)
    c = _contract(cfg)
    t = {"q": arr((3, 300, 16, 128), "bf16"), "k": arr((3, 999, 4, 128), "bf16"), "v": arr((3, 999, 4, 128), "bf16"),
         "seqused_k": arr((3,), "i32"), "o_partial": arr((2, 3, 300, 16, 128), "f32"),
         "lse_partial": arr((2, 3, 16, 300), "f32")}
    assert bind(c, t, {}, {"sm_count": 132}).grid == (3 * 2, 16, 3)


# --------------------------------------------------------------------------- real compiles

@pytest.mark.slow
@pytest.mark.skipif(not HAS_DSL, reason="needs the CuTe DSL")
def test_inference_variants_cross_compile_and_match_the_cubin(home):
    """Build one of each new kind through the pipeline: the contract's params are checked
    against the cubin's own table there (a mismatch fails the build)."""
    from cubinforge.generator import build
    from cubinforge.registry import Registry

    reg = Registry()
    chosen = [
        spec.make_variant("attn_combine", arch="sm_90a", dtype="bf16", head_dim=128),
        spec.make_variant("fa3_fwd", arch="sm_90a", dtype="bf16", head_dim=128, causal=True, split_kv=True,
                          pack_gqa=True, paged_kv=True, tile_m=64),
    ]
    outcomes = build.build(chosen, reg, jobs=2, progress=False)
    assert all(o.status == "built" for o in outcomes), build.summary(outcomes)
    rec = reg.get(chosen[1].name)
    names = [p["name"] for p in rec["contract"]["params"]]
    assert "tma_k_chunk" in names and "page_table" in names and "seqused_k" in names and "q" in names
    assert rec["metadata"]["sass"]["hgmma"] > 0 if "sass" in rec["metadata"] else True
