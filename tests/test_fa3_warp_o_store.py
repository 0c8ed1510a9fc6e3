"""warp_o_store (issue 10, short causal hd128): each consumer warp stores its own 16 rows of O.
Its rules, the A/B set that times it, the contract's 16-row O box, and (slow) the layout and
SASS facts it rests on: each thread's stmatrix writes only its warp's rows, and the epilogue's
named barriers are gone while each warp's store reads its own 2 KiB runs of the O buffer."""

from __future__ import annotations

import os
import re

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig

BF16 = dict(arch="sm_90a", dtype="bf16")
SHORT = dict(BF16, head_dim=128, causal=True, scheduler="persistent")


def test_warp_o_store_needs_its_own_o_buffer_and_excludes_the_warpgroup_store():
    with pytest.raises(ValueError, match="warp_o_store"):
        FwdConfig(**SHORT, separate_o_smem=False, warp_o_store=True)
    with pytest.raises(ValueError, match="warp_o_store"):
        FwdConfig(**SHORT, separate_o_smem=True, wg_epilogue=True, warp_o_store=True)
    cfg = FwdConfig(**SHORT, separate_o_smem=True, warp_o_store=True)
    assert cfg.warp_o_store and not cfg.wg_epilogue


def test_only_the_timed_form_ships_it():
    """check9/n4 timed warp_o_store on hd128 causal's persistent form (the dispatcher's up to 768
    rows): TUNED names it there and nowhere else."""
    from cubinforge.generator.kernels.fa3_fwd_sm90.config import TUNED, TUNED_FP8, TUNED_VARIANTS, TUNED_VARLEN

    named = [(t, k) for t, table in enumerate((TUNED, TUNED_FP8, TUNED_VARIANTS, TUNED_VARLEN))
             for k, sw in table.items() if sw.get("warp_o_store")]
    assert named == [(0, (128, True, "persistent", None))]
    assert FwdConfig(**SHORT).warp_o_store is True
    assert FwdConfig(**dict(SHORT, head_dim=64)).warp_o_store is False


def test_short_epi_set_is_the_shipped_form_plus_what_each_label_names():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    rows = EXPERIMENTS["short-epi"]
    assert len(rows) <= 7  # the control and at most six candidates
    names = [ab_name(experiment_config(o), label) for label, o in rows]
    assert len(set(names)) == len(names), names
    # The controls: what the dispatcher served at <= 768 rows until check9/n4 promoted the warp
    # store (the third row, now the shipped form), and above.
    # (check13 promoted the sectioned causal walk since: these rows keep the walk they ran.)
    assert experiment_config(rows[0][1]) == FwdConfig(**SHORT, stages=0, warp_o_store=False, causal_order="all")
    assert rows[2][0].endswith("+warp-o-store") and experiment_config(rows[2][1]) == FwdConfig(
        **SHORT, stages=0, causal_order="all")
    assert experiment_config(rows[1][1]) == FwdConfig(**dict(SHORT, scheduler="lpt"), stages=0)
    for label, o in rows[2:]:
        cfg = experiment_config(o)
        assert (cfg.head_dim, cfg.causal, cfg.scheduler, cfg.separate_o_smem) == (128, True, "persistent", True)
        for flag, name in (("warp-o-store", "warp_o_store"), ("wg-epilogue", "wg_epilogue"),
                           ("mask-bits", "mask_bits"), ("q-double-buffer", "q_double_buffer"),
                           ("deferred-o", "deferred_o_store")):
            assert getattr(cfg, name) == (flag in label), (label, name)
        assert cfg.pingpong == ("no-pingpong" not in label), label


def test_the_contract_carries_a_16_row_o_box():
    """The runtime (runtime/tensormap.py) and the C++ loader encode tensor maps from the
    contract's box, so the 16-row box needs no code of theirs: only this entry."""
    pytest.importorskip("cutlass")
    from cubinforge.generator.compile_worker import describe_build
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant

    for warp, rows in ((False, 128), (True, 16)):
        built = describe_build("fa3-fwd-sm_90a-bf16-hd128-causal-persistent", "sm_90a",
                               compile_variant(FwdConfig(**SHORT, separate_o_smem=True, warp_o_store=warp)))
        (tma_o,) = [p for p in built.contract["params"] if p["name"] == "tma_o"]
        assert tma_o["box"][:2] == [64, rows], tma_o
        # The runtime takes the contract as it is and encodes O's map with that box.
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).parent))
        from test_runtime_fixtures import arr

        from cubinforge.runtime import load_contract
        from cubinforge.runtime.tensormap import tensormap_args

        (spec,) = [p.spec for p in load_contract(built.contract).params if p.name == "tma_o"]
        assert tensormap_args(spec, arr((2, 777, 16, 128)), "o").box == (64, rows, 1, 1)


@pytest.mark.slow
def test_each_thread_stores_only_its_own_warps_rows():
    """The epilogue keeps the full tile's stmatrix partition; with only a warp sync before a
    warp's store, every element a thread writes must lie in its warp's 16 rows."""
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    import cutlass.cute as cute

    from cubinforge.generator.kernels.fa3_fwd_sm90.kernel import WARP_O_ROWS, FlashFwdSm90
    from cubinforge.generator.kernels.fa3_fwd_sm90.layouts import smem_store_atom

    cfg = FwdConfig(**SHORT, separate_o_smem=True, warp_o_store=True)
    k = FlashFwdSm90(cfg)
    bad: list = []
    rows_seen: set = set()

    def check(pv):
        atom = smem_store_atom(k.dtype)
        full = cute.make_identity_tensor((cfg.tile_m, cfg.head_dim))
        for t in range(k.consumer_threads):
            part = cute.make_tiled_copy_C(atom, pv).get_slice(t).partition_D(full)
            lo = WARP_O_ROWS * (t // 32)
            for i in range(cute.size(part)):
                r = part[i][0]
                rows_seen.add(r)
                if not lo <= r < lo + WARP_O_ROWS:
                    bad.append((t, i, part[i]))
                    break

    @cute.jit
    def probe():
        _, pv = k._tiled_mmas()
        check(pv)

    cute.compile(probe, options="--gpu-arch sm_90a")
    assert rows_seen == set(range(cfg.tile_m))
    assert not bad, bad[:5]


def _epilogue(sass: str) -> list[str]:
    """The instructions from the first STSM (O into shared memory) to the last UTMASTG."""
    lines = [ln.split(";")[0].strip() for ln in sass.splitlines() if "/*" in ln and "*/" in ln]
    first = next(i for i, ln in enumerate(lines) if "STSM" in ln)
    last = max(i for i, ln in enumerate(lines) if "UTMASTG" in ln)
    return lines[first:last + 1]


@pytest.mark.slow
def test_sass_has_no_epilogue_barrier_and_per_warp_store_offsets():
    pytest.importorskip("cutlass")
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant
    from cubinforge.generator.sass import counts_of, cuobjdump, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip nvidia-cuda-cuobjdump)")
    bars, epi = {}, {}
    for warp in (False, True):
        sass = cuobjdump(["-sass"], compile_variant(FwdConfig(**SHORT, separate_o_smem=True,
                                                              warp_o_store=warp)).cubin)
        counts = counts_of(sass)
        assert counts["ldl"] == 0 and counts["stl"] == 0, counts
        bars[warp] = len(re.findall(r"BAR\.SYNC", sass))
        epi[warp] = _epilogue(sass)
    # The shipped form meets at barrier 1 (Barrier.EPILOGUE) before and after the stmatrix.
    assert bars[False] - bars[True] == 2, bars
    named = re.compile(r"(?<!MEM)BAR\.")  # BAR.SYNC / BAR.ARV, not the MEMBAR before the fence
    assert any(named.search(ln) for ln in epi[False])
    assert not any(named.search(ln) for ln in epi[True]), epi[True]
    # Each warp's smem address: the buffer's plus warp x 2 KiB (a left shift by 11).
    assert any(re.search(r"ULEA UR\d+, UR\d+, UR\d+, 0xb\b", ln) for ln in epi[True]), epi[True]
