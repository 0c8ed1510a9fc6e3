"""The persistent varlen scheduler on the CPU (bench.ab's `varlen-persist` candidates): the
key-block tile order and the kernel's warp mapping of it, every (tile, head) walked once by
the persistent CTAs, the grid rule the kernel and the contract share, the balance that made
the non-causal order what it is, and (slow) a cross-compile checked against the cubin."""

from __future__ import annotations

import random

import pytest
from conftest import module_available

from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.schedule import (
    TileScheduler, VARLEN_CTAS_PER_SM, strided_tile, tiles_keyed, varlen_ctas, varlen_persistent_walk, varlen_tile,
    varlen_tile_bound, varlen_tile_by_keys,
)
from test_runtime_fixtures import varlen_contract_of
from test_varlen import arr
from cubinforge.runtime.contract import bind

HAS_DSL = module_available("cutlass")
# bench/inference.py's varlen prefill case (VARLEN_LENS), 16 heads, 128 x 128 tiles.
BENCH_LENS = [512, 3000, 17, 1024, 2048, 777, 4096, 100, 1500, 64, 900, 333, 2222, 1, 256, 1000]


def _blocks(lens, tile):
    return [-(-n // tile) for n in lens]


def _cases():
    rng = random.Random(5)
    yield [0], [0]
    yield [1, 0, 2], [3, 0, 0]  # a sequence with queries and no keys: level 0
    yield [4] * 40, [2] * 40  # two chunks of 32 lanes, one level
    for _ in range(30):
        b = rng.randint(1, 70)
        yield ([rng.choice([0, 0, 1, 2, 5, 17]) for _ in range(b)], [rng.choice([0, 1, 3, 9, 33]) for _ in range(b)])


@pytest.mark.parametrize("tiles,kb", list(_cases()))
def test_key_order_covers_every_tile_once_costliest_first(tiles, kb):
    total = sum(tiles)
    got = [varlen_tile_by_keys(t, tiles, kb) for t in range(total)]
    assert sorted(got) == sorted((b, m) for b, n in enumerate(tiles) for m in range(n))  # a bijection
    levels = [kb[b] for b, _ in got]
    assert levels == sorted(levels, reverse=True)  # key blocks (a non-causal tile's cost) descending
    for b in set(b for b, _ in got):  # a sequence's tiles together, m blocks from the last
        ms = [m for bb, m in got if bb == b]
        assert ms == list(range(tiles[b] - 1, -1, -1))
    for x in set(levels):  # batches in order inside a level
        bs = [b for b, _ in got if kb[b] == x]
        assert bs == sorted(bs)
    assert varlen_tile_by_keys(total, tiles, kb) is None
    assert tiles_keyed(tiles, kb, 0) == total


def _warp_by_keys(t, tiles, kb):
    """inference.FlashFwdSm90Inference.varlen_tile_by_keys line by line, a warp as 32 lanes of
    lists (redux = sum/max over lanes, shuffle-up scan = inclusive prefix sum over lanes)."""
    nb = len(tiles)
    chunks = (nb + 31) // 32

    def lane(c):
        return ([tiles[c * 32 + l] if c * 32 + l < nb else 0 for l in range(32)],
                [kb[c * 32 + l] if c * 32 + l < nb else 0 for l in range(32)])

    n0, k0 = lane(0)
    total, top = sum(n0), max(k0)
    for c in range(1, chunks):
        n, k = lane(c)
        total, top = total + sum(n), max(top, max(k))
    lo, hi, a_hi = 0, top + 1, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        a = 0
        for c in range(chunks):
            n, k = (n0, k0) if c == 0 else lane(c)
            a += sum(x if y >= mid else 0 for x, y in zip(n, k))
        if a > t:
            lo = mid
        else:
            hi, a_hi = mid, a
    kk, batch, m_block, before = t - a_hi, 0, 0, 0
    for c in range(chunks):
        n, k = (n0, k0) if c == 0 else lane(c)
        sel = [x if y == lo else 0 for x, y in zip(n, k)]
        incl = list(sel)
        for i in range(5):  # shuffle_sync_up by 1 << i, added where lane >= 1 << i
            up = [incl[l - (1 << i)] if l >= (1 << i) else incl[l] for l in range(32)]
            incl = [incl[l] + up[l] if l >= (1 << i) else incl[l] for l in range(32)]
        mine_b, mine_m = [0] * 32, [0] * 32
        for l in range(32):
            first = before + incl[l] - sel[l]
            if sel[l] > 0 and first <= kk < first + sel[l]:
                mine_b[l], mine_m[l] = c * 32 + l, sel[l] - 1 - (kk - first)
        batch, m_block = max(batch, max(mine_b)), max(m_block, max(mine_m))
        before += sum(sel)
    return batch, m_block, int(t < total)


@pytest.mark.parametrize("tiles,kb", list(_cases()))
def test_the_kernels_warp_mapping_is_the_key_order(tiles, kb):
    for t in range(sum(tiles) + 3):
        want = varlen_tile_by_keys(t, tiles, kb)
        got = _warp_by_keys(t, tiles, kb)
        assert (got[:2] if got[2] else None) == want, (t, got, want)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [1, 3, 16])
def test_persistent_walk_visits_every_tile_and_head_once(causal, heads):
    rng = random.Random(heads + causal)
    for _ in range(12):
        lens_q = [rng.choice([0, 0, 1, 17, 127, 128, 129, 1000]) for _ in range(rng.randint(1, 40))]
        lens_k = [rng.choice([0, 1, 17, 300, 1000]) for _ in lens_q]
        tiles, kb = _blocks(lens_q, 128), _blocks(lens_k, 128)
        want = sorted((b, m, h) for b, n in enumerate(tiles) for m in range(n) for h in range(heads))
        for sms in (1, 7, 132, 5000):
            # The launcher's CTAs: at most the bound's (tile, head) pairs, at most the SMs'.
            ctas = varlen_ctas(sum(lens_q) + rng.randint(0, 9), len(lens_q), 128, heads, sms, True)
            assert ctas <= sms * VARLEN_CTAS_PER_SM
            if not want:
                continue
            walks = varlen_persistent_walk(tiles, kb, heads, ctas, causal)
            got = sorted(x for w in walks for x in w)
            assert got == want  # each once, and no work for a sequence without queries
            assert all(tiles[b] > 0 for b, _, _ in got)
            # Each CTA's share is within one tile of any other's.
            sizes = [len(w) for w in walks]
            assert max(sizes) - min(sizes) <= 1


def test_the_persistent_walk_strides_as_the_tile_scheduler_does():
    sched = TileScheduler("persistent", False, varlen=True)
    assert sched.zigzag and not TileScheduler("persistent", False).zigzag  # the dense rule kept
    tiles, kb = [3, 1, 2], [5, 1, 2]
    walks = varlen_persistent_walk(tiles, kb, 2, 4, False)
    order = [varlen_tile_by_keys(t, tiles, kb) for t in range(sum(tiles))]
    for cta, w in enumerate(walks):
        lins = [strided_tile(k, cta, 4, True) for k in range(len(w))]
        assert w == [(*order[x // 2], x % 2) for x in lins]


def _cta_loads(tiles, kb, lens, heads, ctas, causal, walk_order, overhead=1.0):
    """Key blocks each CTA visits (+ `overhead` a tile) under a static stride of walk_order."""
    def cost(b, m):
        n = kb[b]
        if causal:
            n = max(min(n, -(-((m + 1) * 128 + lens[b] - lens[b]) // 128)), 0)
        return n + overhead
    lin = [x for t in range(sum(tiles)) for x in [walk_order(t)] * heads]
    loads = [0.0] * ctas
    for cta in range(ctas):
        k = 0
        while (i := strided_tile(k, cta, ctas, True)) < len(lin):
            loads[cta] += cost(*lin[i])
            k += 1
    return max(loads) / (sum(cost(*x) for x in lin) / ctas)


def test_bench_case_balance_decides_the_orders():
    """bench/inference.py's case on 132 SMs: the busiest CTA's key blocks over the even split.
    Non-causal by key blocks 1.02 where the rounds of descending m block give 1.20 (a round
    mixes long and short sequences' tiles); causal tiles in those rounds are already by cost
    (1.01)."""
    tiles, kb = _blocks(BENCH_LENS, 128), _blocks(BENCH_LENS, 128)
    by_keys = _cta_loads(tiles, kb, BENCH_LENS, 16, 132, False, lambda t: varlen_tile_by_keys(t, tiles, kb))
    rounds_nc = _cta_loads(tiles, kb, BENCH_LENS, 16, 132, False, lambda t: varlen_tile(t, tiles))
    rounds_c = _cta_loads(tiles, kb, BENCH_LENS, 16, 132, True, lambda t: varlen_tile(t, tiles))
    assert by_keys < 1.03 and rounds_c < 1.03
    assert rounds_nc > 1.15


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_contract_grid_is_the_schedulers_rule(paged, causal):
    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=causal, varlen=True, paged_kv=paged,
                    scheduler="persistent")
    single = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=causal, varlen=True, paged_kv=paged)
    for b, total_q, hq, sms in ((16, 17850, 16, 132), (3, 40, 2, 132), (1, 1, 1, 7), (70, 900, 8, 114)):
        kv = arr((64, 256, 1, 128), "bf16") if paged else arr((20000, 1, 128), "bf16")
        t = {"q": arr((total_q, hq, 128), "bf16"), "k": kv, "v": kv, "o": arr((total_q, hq, 128), "bf16"),
             "lse": arr((hq, total_q), "f32"), "cu_seqlens_q": arr((b + 1,), "i32"),
             "cu_seqlens_k": arr((b + 1,), "i32"), "seqused_q": arr((b,), "i32"), "seqused_k": arr((b,), "i32")}
        if paged:
            t["page_table"] = arr((b, 32), "i32")
        for c, persistent in ((cfg, True), (single, False)):
            # the packed persistent walk takes its tiles from the counter (varlen_dynamic)
            counter = {"tile_counter": arr((2,), "i32")} if c.varlen_dynamic else {}
            got = bind(varlen_contract_of(c), {**t, **counter}, {}, {"sm_count": sms}).grid
            assert got == (varlen_ctas(total_q, b, 128, hq, sms, persistent), 1, 1)
        assert varlen_ctas(total_q, b, 128, hq, sms, True) == min(varlen_tile_bound(total_q, b, 128) * hq, sms)


def test_config_takes_persistent_for_varlen_only():
    assert FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=True, varlen=True,
                     scheduler="persistent", o_smem_store=True).inference
    for axis in ("split_kv", "paged_kv"):
        with pytest.raises(ValueError, match="scheduler 'single'"):
            FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, scheduler="persistent", **{axis: True})


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DSL, reason="needs the CuTe DSL")
@pytest.mark.parametrize("causal,paged", [(False, False), (True, True)])
def test_persistent_varlen_cross_compiles_and_matches_the_cubin(causal, paged):
    """Through the checks `make kernels` runs (the contract's params against the cubin's table)."""
    from cubinforge.bench.ab import experiment_config
    from cubinforge.generator.compile_worker import describe_build
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant

    cfg = experiment_config(dict(head_dim=128, varlen=True, causal=causal, paged_kv=paged, scheduler="persistent",
                                 o_smem_store=not paged))
    built = describe_build("t", cfg.arch, compile_variant(cfg))
    assert built.contract["grid"][0][-4:] == ["sm_count", VARLEN_CTAS_PER_SM, "*", "min"]
    assert built.metadata.get("spill_store_bytes", 0) == 0
