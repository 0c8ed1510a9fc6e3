"""p_smem (issue 10, hd96's long cells): P through a per-warpgroup shared-memory slab and an SS
PV GEMM, FA4's SM90 hd96 form. Its rules, its shared-memory budget, bench.ab's `hd96-pss` set,
and (slow) the SASS facts the A/B rests on: in the key-block loop every PV HGMMA takes A from a
descriptor, P is stored (STSM) only after the wait for the PV GEMM that read the slab, and the
PV GEMM is issued after the proxy fence and a 128-thread barrier; no spills, where the same
192-row tiles with P in registers spill."""

from __future__ import annotations

import re

import pytest

from cubinforge.generator.kernels.fa3_fwd_sm90 import FwdConfig
from cubinforge.generator.kernels.fa3_fwd_sm90.config import SMEM_LIMIT, SWITCHES

BF16 = dict(arch="sm_90a", dtype="bf16")
NC = dict(BF16, head_dim=96, causal=False, scheduler="persistent", tile_m=192, tile_n=144)
C = dict(BF16, head_dim=96, causal=True, scheduler="persistent", tile_m=192, tile_n=128)


def test_p_smem_ships_only_in_hd96s_192_row_forms():
    from cubinforge.generator.kernels.fa3_fwd_sm90 import config

    assert "p_smem" in SWITCHES
    on = {key for key, sw in config.TUNED.items() if sw.get("p_smem")}
    assert on == {(96, False, "persistent", (192, 144)), (96, True, "persistent", (192, 128))}  # check10/r2, s1
    for table in (config.TUNED_FP16, config.TUNED_FP8, config.TUNED_VARIANTS, config.TUNED_VARLEN,
                  config.TUNED_VARLEN_DTYPE):
        assert not any(sw.get("p_smem") for sw in table.values())
    assert FwdConfig(**dict(BF16, head_dim=96, causal=False, scheduler="persistent")).p_smem is False
    for tiles in (NC, C):
        for dtype in ("bf16", "fp16"):
            assert FwdConfig(**dict(tiles, dtype=dtype)).p_smem is True


def test_p_smem_counts_its_buffer_and_refuses_what_does_not_fit():
    off, on = FwdConfig(**NC, p_smem=False), FwdConfig(**NC, p_smem=True)
    assert on.smem_bytes - off.smem_bytes == 192 * 144 * 2
    # Q 36 KiB + 2 K/V stages 108 KiB + P 54 KiB + O 36 KiB = 234 KiB > 226 KiB.
    with pytest.raises(ValueError, match="P in shared memory.*separate_o_smem off"):
        FwdConfig(**NC, p_smem=True, separate_o_smem=True)
    assert FwdConfig(**C, p_smem=True, separate_o_smem=True).smem_bytes <= SMEM_LIMIT


@pytest.mark.parametrize("bad, what", [
    (dict(dtype="e4m3", head_dim=128, tile_m=128, tile_n=128, separate_o_smem=True), "e4m3"),
    (dict(varlen=True, tile_m=128, tile_n=128), "varlen"),
    (dict(softcap=True), "model variants"),
    (dict(chunked_p_convert=True), "chunked_p_convert"),
])
def test_p_smem_refuses_the_forms_it_is_not_built_for(bad, what):
    over = dict(NC, p_smem=True, **bad)
    if over.get("varlen"):
        over["scheduler"] = "single"
    with pytest.raises(ValueError, match="p_smem"):
        FwdConfig(**over)


def test_p_smem_barriers_are_new_ids():
    from cubinforge.generator.kernels.fa3_fwd_sm90.barriers import Barrier

    ids = [int(b) for b in Barrier]
    assert len(set(ids)) == len(ids) and max(ids) < 16  # 16 named barriers per CTA
    assert [int(Barrier.P_WG1), int(Barrier.P_WG2), int(Barrier.P_WG3)] == [8, 9, 10]


def test_hd96_pss_set_carries_the_shipped_forms_and_what_each_label_names():
    from cubinforge.bench.ab import EXPERIMENTS, ab_name, experiment_config

    rows = EXPERIMENTS["hd96-pss"]
    assert len(rows) <= 10
    names = [ab_name(experiment_config(o), label) for label, o in rows]
    assert len(set(names)) == len(names), names
    shipped = {label: o for label, o in rows if "tile-192" not in label}
    # The shipped bf16 hd96 forms (config.TUNED), as the dispatcher serves them at 8k / 16k.
    assert experiment_config(shipped["persistent+separate-o+chunked-p+tile-128x176"]) == FwdConfig(
        **dict(BF16, head_dim=96, causal=False, scheduler="persistent", tile_m=128, tile_n=176), stages=0)
    assert experiment_config(shipped["persistent-lpt+separate-o+mask-bits+in-order-sum"]) == FwdConfig(
        **dict(BF16, head_dim=96, causal=True, scheduler="persistent"), stages=0, causal_order="all")  # check13's walk since
    for label, o in rows:
        cfg = experiment_config(o)
        assert cfg.head_dim == 96 and cfg.dtype == "bf16"
        for flag, name in (("p-smem", "p_smem"), ("separate-o", "separate_o_smem"), ("mask-bits", "mask_bits"),
                           ("in-order-sum", "in_order_row_sum"), ("chunked-p", "chunked_p_convert")):
            assert getattr(cfg, name) == (flag in label), (label, name)
        assert f"tile-{cfg.tile_m}x{cfg.tile_n}" in label or label in shipped, label
        assert cfg.scheduler == ("lpt" if label.startswith("lpt") else "persistent"), label
    tiles = {(experiment_config(o).causal, experiment_config(o).tile_n) for label, o in rows if "p-smem" in label}
    assert {(False, 144), (True, 128)} <= tiles  # FA4's SM90 hd96 tiles


def _loop(cfg):
    from cubinforge.bench.loop_sass import loop_bodies
    from cubinforge.generator.kernels.fa3_fwd_sm90 import compile_variant
    from cubinforge.generator.sass import counts_of, cuobjdump

    sass = cuobjdump(["-sass"], compile_variant(cfg).cubin)
    counts = counts_of(sass)
    # Spills: local loads and stores (ptxas puts them on the stack frame, not LOCAL). The last
    # GEMM loop is the unmasked one (the masked blocks come first).
    return counts["ldl"] + counts["stl"], loop_bodies(sass)[-1][1]


PV = re.compile(r"HGMMA\.64x96x16\.F32\.BF16 R\d+, (\S+?)[,\s]")


@pytest.mark.slow
@pytest.mark.parametrize("tiles", [NC, dict(C, separate_o_smem=True, mask_bits=True, in_order_row_sum=True)],
                         ids=["noncausal-192x144", "causal-192x128"])
def test_sass_pv_reads_p_from_shared_memory_after_its_barrier(tiles):
    pytest.importorskip("cutlass")
    from cubinforge.generator.sass import find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip nvidia-cuda-cuobjdump)")
    spills, body = _loop(FwdConfig(**tiles, p_smem=True))
    assert spills == 0
    pv = [i for i, o in enumerate(body) if PV.match(o)]
    assert len(pv) == tiles["tile_n"] // 16  # one K=16 step per 16 keys
    assert all(PV.match(body[i])[1].startswith("gdesc[") for i in pv), [body[i] for i in pv]
    # P is written (one STSM per 16 keys and warp) after the PV GEMM's wait, and read after the
    # fence and this warpgroup's 128-thread barrier.
    stsm = [i for i, o in enumerate(body) if o.startswith("STSM")]
    drain = max(i for i, o in enumerate(body) if o.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    assert len(stsm) == tiles["tile_n"] // 16 and min(stsm) > drain
    before = body[:pv[0]]
    fence = max(i for i, o in enumerate(before) if o.startswith("FENCE.VIEW.ASYNC.S"))
    assert any(re.match(r"BAR\.SYNC\S* R\d+, 0x80\b", o) for o in before[fence:]), before[fence:]
    # The same tiles with P in registers: A from registers, and they spill.
    spills_rs, body_rs = _loop(FwdConfig(**tiles, p_smem=False))
    assert all(PV.match(o)[1].startswith("R") for o in body_rs if PV.match(o))
    assert not any(o.startswith("STSM") for o in body_rs)
    assert spills_rs > 0


@pytest.mark.slow
@pytest.mark.parametrize("tiles", [NC, C], ids=["192x144", "192x128"])
def test_each_warpgroup_writes_and_reads_only_its_own_slab(tiles):
    """A 128-thread barrier orders P's stores before the PV GEMM only if no warpgroup reads rows
    another writes: each thread's stmatrix partition of sP (the QK^T accumulator's) lies in its
    warp's 16 rows, and warpgroup w's A operand is rows 64w..64w+63, keys all of tile_n."""
    pytest.importorskip("cutlass")
    import os

    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    import cutlass.cute as cute

    from cubinforge.generator.kernels.fa3_fwd_sm90.kernel import FlashFwdSm90
    from cubinforge.generator.kernels.fa3_fwd_sm90.layouts import smem_store_atom

    cfg = FwdConfig(**tiles, p_smem=True)
    k = FlashFwdSm90(cfg)
    bad, written, read = [], set(), {}

    def check(qk, pv):
        full = cute.make_identity_tensor((cfg.tile_m, cfg.tile_n))
        atom = smem_store_atom(k.dtype)
        # Four lanes of every warp (all 384 threads take a minute here).
        for t in (32 * w + lane for w in range(k.consumer_threads // 32) for lane in (0, 3, 17, 31)):
            part = cute.make_tiled_copy_C(atom, qk).get_slice(t).partition_D(full)
            lo = 16 * (t // 32)
            if cute.size(part) != cfg.tile_m * cfg.tile_n // k.consumer_threads:
                bad.append((t, cute.size(part)))
            for i in range(cute.size(part)):
                written.add(part[i])
                if not lo <= part[i][0] < lo + 16:
                    bad.append((t, part[i]))
        for wg in range(k.num_wg):
            a = pv.get_slice(128 * wg).partition_A(full)
            read[wg] = {a[i] for i in range(cute.size(a))}

    @cute.jit
    def probe():
        qk, pv = k._tiled_mmas()
        check(qk, pv)

    cute.compile(probe, options="--gpu-arch sm_90a")
    assert not bad, bad[:5]
    assert {r // 16 for r, _ in written} == set(range(cfg.tile_m // 16))
    for wg, coords in read.items():
        assert coords == {(r, c) for r in range(64 * wg, 64 * wg + 64) for c in range(cfg.tile_n)}, wg
