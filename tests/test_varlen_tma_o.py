"""varlen O by one TMA store per tile through a ragged tensor map (FwdConfig.o_tma_ragged):
the view's arithmetic (runtime/tensormap.py ragged_*), the map's encode arguments, the
contract's two added parameters, the config's rule and the C++ bundle's refusal. No cutlass."""

from __future__ import annotations

import itertools
import struct

import pytest

from cubinforge.runtime import ContractError, InputError, bind
from cubinforge.runtime.arrays import DeviceArray
from cubinforge.runtime.params import struct_bytes
from cubinforge.runtime.tensormap import ragged_coords, ragged_extent, ragged_shift, tensormap_args
from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
from test_runtime_fixtures import varlen_contract_of

TILE_M = 128
BASE = 0x7F00_0000_0000


def _simulate_store(total, row_stride, offset, length, m_block):
    """The rows a TMA store of tile m_block of the sequence at [offset, offset + length) writes,
    as the hardware bound-checks the ragged map (every coordinate inside [0, globalDim)), and
    the element address of each: {tensor row: address - base in elements}."""
    extent, shift = ragged_extent(total), ragged_shift(total, row_stride)
    row0, outer = ragged_coords(total, offset, length)
    written = {}
    for r in range(TILE_M):
        c = row0 + m_block * TILE_M + r      # the tile's row r on the ragged dimension
        if 0 <= c < total and 0 <= outer < extent:
            written[offset + m_block * TILE_M + r] = -shift + c * row_stride + outer * row_stride
    return written


def _sequences():
    # 0-, 1- and 17-token sequences, ends on and beside tile edges, a sequence longer than the
    # rest of the tensor's rows would be were it not the last one (the bound is the total).
    lens = [0, 1, 17, 127, 128, 129, 255, 256, 0, 300, 1]
    offs = list(itertools.accumulate([0] + lens))
    return lens, offs, offs[-1]


@pytest.mark.parametrize("row_stride", [16 * 128, 40 * 128])   # packed heads, and a wider row
def test_ragged_store_writes_exactly_its_sequences_rows_at_their_addresses(row_stride):
    lens, offs, total = _sequences()
    for gap in (0, 7):   # rows nobody owns after each sequence (seqused_q < its slot), or none
        total_g = total + gap * len(lens)
        for b, length in enumerate(lens):
            offset = offs[b] + gap * b
            tiles = (length + TILE_M - 1) // TILE_M
            seen = {}
            for m in range(tiles):
                w = _simulate_store(total_g, row_stride, offset, length, m)
                assert set(w) == set(range(offset + m * TILE_M, offset + min((m + 1) * TILE_M, length))), (b, m)
                seen.update(w)
            # every row of the sequence, each at base + row * stride, nothing past its end
            assert seen == {t: t * row_stride for t in range(offset, offset + length)}, b


def test_ragged_bound_is_the_tensors_rows_not_a_constant():
    # the last sequence of a tensor ends at `total`: its outer coordinate is the extent's last
    rows = 1000
    assert ragged_coords(rows, 900, 100) == (900, 1000) and ragged_extent(rows) == 1001
    # one sequence holding every row: its first row at ragged coordinate 0
    assert ragged_coords(rows, 0, rows) == (0, rows)
    assert ragged_shift(rows, 2048) == rows * 2048


def _o_recipe(cfg=None):
    from cubinforge.generator.kernels.fa3_fwd_sm90.contract import ragged_o_params
    coords, tmap = ragged_o_params("bf16", (64, TILE_M), 128)
    return coords, tmap


def test_tensormap_args_of_the_ragged_o_map():
    _, recipe = _o_recipe()
    total, heads, d = 17850, 16, 128
    o = DeviceArray.from_pointer(BASE, (total, heads, d), None, "bf16", device=0)
    a = tensormap_args(recipe, o, "o")
    assert a.rank == 4 and a.box == (64, TILE_M, 1, 1) and a.element_strides == (1, 1, 1, 1)
    # (d, total, heads, total + 1), strides of dims 1.. in bytes: rows, heads, rows again
    assert a.global_dim == (d, total, heads, total + 1)
    assert a.global_strides == (heads * d * 2, d * 2, heads * d * 2)
    assert a.global_address == BASE - total * heads * d * 2
    # a view with a wider row (o a slice of a bigger buffer) shifts by its own row stride
    wide = DeviceArray.from_pointer(BASE, (total, heads, d), (3 * heads * d, d, 1), "bf16", device=0)
    assert tensormap_args(recipe, wide, "o").global_address == BASE - total * 3 * heads * d * 2


def test_ragged_map_refusals():
    _, recipe = _o_recipe()
    o = DeviceArray.from_pointer(BASE, (100, 4, 128), None, "bf16", device=0)
    with pytest.raises(ContractError, match="ragged_dim 2 must be one of the mapped dimensions"):
        tensormap_args(dict(recipe, ragged_dim=2), o, "o")   # the innermost (d) cannot be clipped
    with pytest.raises(ContractError, match=r"box .* need 4 entries"):
        tensormap_args(dict(recipe, box=[64, TILE_M, 1]), o, "o")
    low = DeviceArray.from_pointer(4096, (100, 4, 128), None, "bf16", device=0)
    with pytest.raises(InputError, match="below its own size"):
        tensormap_args(recipe, low, "o")


@pytest.mark.parametrize("causal", [False, True])
def test_contract_adds_the_coordinates_and_the_map_last(causal):
    # The static walk: the tile counter (varlen_dynamic) would add its own parameter after these.
    kw = dict(arch="sm_90a", dtype="bf16", head_dim=128, causal=causal, varlen=True, scheduler="persistent",
              o_smem_store=True, varlen_dynamic=False)
    plain, ragged = varlen_contract_of(FwdConfig(**kw)), varlen_contract_of(FwdConfig(**kw, o_tma_ragged=True))
    assert [p.name for p in ragged.params] == [p.name for p in plain.params] + ["o_tma_coords", "tma_o"]
    b, total_q, hq, hkv = 5, 1234, 16, 4
    arrs = {"q": (BASE, (total_q, hq, 128), "bf16"), "k": (BASE + (1 << 30), (2000, hkv, 128), "bf16"),
            "v": (BASE + (2 << 30), (2000, hkv, 128), "bf16"), "o": (BASE + (3 << 30), (total_q, hq, 128), "bf16"),
            "lse": (BASE + (4 << 30), (hq, total_q), "f32"), "cu_seqlens_q": (BASE + (5 << 30), (b + 1,), "i32"),
            "cu_seqlens_k": (BASE + (6 << 30), (b + 1,), "i32"), "seqused_q": (BASE + (7 << 30), (b,), "i32"),
            "seqused_k": (BASE + (8 << 30), (b,), "i32")}
    t = {k: DeviceArray.from_pointer(p, s, None, dt, device=0) for k, (p, s, dt) in arrs.items()}
    bound = bind(ragged, t, {}, {"sm_count": 132})
    coords, tmap = ragged.params[-2], ragged.params[-1]
    # the coordinate tensor's dynamic shapes, in the view's mode order: total, heads, extent
    assert struct.unpack("<3i", struct_bytes(coords, bound)) == (total_q, hq, ragged_extent(total_q))
    a = tensormap_args(tmap.spec, t["o"], "o")
    assert a.global_dim[-1] == ragged_extent(total_q) and a.global_dim[1] == total_q


def test_a_new_o_pointer_reencodes_the_ragged_map():
    """A plan pointed at a new o (launcher.rewrite_pointers) must not put the bare pointer in the
    ragged map (cuTensorMapReplaceAddress would drop the shift): the map is re-encoded."""
    from cubinforge.runtime.launcher import Kernel

    kw = dict(arch="sm_90a", dtype="bf16", head_dim=128, causal=False, varlen=True, scheduler="persistent",
              o_smem_store=True)
    c = varlen_contract_of(FwdConfig(**kw, o_tma_ragged=True))
    k = type("K", (), {"contract": c, "_ptr_params": {}})()
    by_name = {c.params[i].name: how for i, how, _ in Kernel.pointer_params(k, "o")}
    assert by_name["tma_o"] == "repack" and by_name["o"] == "ptr"
    q = {c.params[i].name: how for i, how, _ in Kernel.pointer_params(k, "q")}
    assert q["tma_q"] == "tensormap"   # a plain map keeps the cheap address swap


def test_config_needs_varlen_and_the_smem_stage():
    kw = dict(arch="sm_90a", dtype="bf16", head_dim=128, causal=False)
    with pytest.raises(ValueError, match="o_tma_ragged stores varlen O from shared memory"):
        FwdConfig(**kw, varlen=True, scheduler="persistent", o_smem_store=False, separate_o_smem=False,
                  o_tma_ragged=True)
    with pytest.raises(ValueError, match="o_tma_ragged|o_smem_store is built for the varlen"):
        FwdConfig(**kw, o_tma_ragged=True)
    # on where TUNED_VARLEN_DTYPE names it (bf16 hd128), off elsewhere unless set
    assert FwdConfig(**kw, varlen=True, scheduler="persistent").o_tma_ragged
    assert not FwdConfig(**dict(kw, dtype="fp16"), varlen=True, scheduler="persistent").o_tma_ragged
    assert not FwdConfig(**kw, varlen=True, scheduler="persistent", o_smem_store=True).o_tma_ragged
    assert not FwdConfig(**dict(kw, head_dim=64), varlen=True).o_tma_ragged
    with pytest.raises(ValueError, match="no O buffer options"):   # O's own buffer only with the ragged store
        FwdConfig(**kw, varlen=True, scheduler="persistent", o_smem_store=False, separate_o_smem=True,
                  o_tma_ragged=False)
    with pytest.raises(ValueError, match="o_tma_ragged is built for the persistent varlen walk"):
        FwdConfig(**kw, varlen=True, o_smem_store=False, separate_o_smem=True, o_tma_ragged=True)
    with pytest.raises(ValueError, match="o_tma_ragged is built for the persistent varlen walk"):
        FwdConfig(**kw, varlen=True, o_smem_store=True, o_tma_ragged=True)
    with pytest.raises(ValueError, match="one of o_smem_store"):   # both buffers at once: which one?
        FwdConfig(**kw, varlen=True, scheduler="persistent", o_smem_store=True, separate_o_smem=True,
                  o_tma_ragged=True)
    with pytest.raises(ValueError, match="q_double_buffer is built for the dense forward only"):
        FwdConfig(**kw, varlen=True, scheduler="persistent", o_smem_store=False, separate_o_smem=True,
                  o_tma_ragged=True, q_double_buffer=True)


def test_ab_set_pairs_each_shipped_form_with_its_ragged_twin():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import TUNED_VARLEN

    rows = EXPERIMENTS["varlen-tma-o"]
    names = [ab_name(experiment_config(o), label) for label, o in rows]
    assert len(set(names)) == len(names)
    for label, o in rows:
        cfg = experiment_config(o)
        assert cfg.varlen and cfg.scheduler == "persistent" and cfg.o_tma_ragged == label.endswith("+o-tma-ragged")
        assert cfg.separate_o_smem == ("separate-o" in label) and cfg.o_smem_store == ("o-smem" in label), label
        assert cfg.stages == (2 if cfg.separate_o_smem else 3), label   # O's own buffer leaves room for 2
        # These rows predate the tile counter (bench.ab varlen-dynamic): the shipped form without it.
        shipped = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=cfg.causal, varlen=True,
                            scheduler="persistent", varlen_dynamic=False)
        others = set(TUNED_VARLEN[(128, cfg.causal, "persistent", None)]) - {"o_smem_store"}
        assert {s: getattr(cfg, s) for s in others} == {s: getattr(shipped, s) for s in others}, label
        if not cfg.o_tma_ragged:   # the baseline: the Q-buffer form shipped before the promotion
            assert cfg == FwdConfig(arch="sm_90a", dtype="bf16", head_dim=128, causal=cfg.causal, varlen=True,
                                    scheduler="persistent", o_smem_store=True, varlen_dynamic=False), label
        # promoted (config.TUNED_VARLEN_DTYPE): O's own buffer + the ragged store is the bf16 build
        assert (cfg == shipped) == ("separate-o" in label), label


def test_cpp_bundle_carries_a_ragged_map():
    """The bundle keeps the ragged map (tests/test_cpp_ragged_tensormap.py compares its encode
    with Python's) and refuses, as tensormap_args does, a ragged innermost dimension."""
    from cubinforge.generator import cpp_bundle

    _, tmap = _o_recipe()
    fake = type("V", (), {"error": staticmethod(lambda m: ValueError(m)), "tensors": [{"dims": [0, 1, 2],
                "dtype": "bf16"}], "_tensor_index": lambda self, n, k: 0,
                "_enum": lambda self, v, table, k: v})()
    m = cpp_bundle._Variant._tensormap(fake, tmap, "tma_o")
    assert m["ragged"] and m["rank"] == 4 and m["dims"][:4] == [2, 0, 1, 0] and m["box"][:4] == [64, TILE_M, 1, 1]
    with pytest.raises(ValueError, match="ragged_dim 2 must be one of the mapped dimensions"):
        cpp_bundle._Variant._tensormap(fake, dict(tmap, ragged_dim=2), "tma_o")
