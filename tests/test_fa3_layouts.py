"""Layout facts the fa3 kernel relies on, checked by tracing CuTe layouts on the CPU.

wg_epilogue stores each consumer warpgroup's O through a one-warpgroup copy over its own
64-row slab, while the registers come from the full tiled MMA. That is only right if, for
every thread, the one-warpgroup partition names the same elements as the full one, shifted
by 64 rows per warpgroup: checked here for every consumer thread.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("head_dim", [64, 128])
def test_warpgroup_slab_store_matches_the_full_tile_store(head_dim):
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    import cutlass.cute as cute

    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    from cubinforge.generator.kernels.fa3_fwd_sm90.kernel import FlashFwdSm90
    from cubinforge.generator.kernels.fa3_fwd_sm90.layouts import smem_store_atom

    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=head_dim, causal=False, scheduler="persistent",
                    separate_o_smem=True, wg_epilogue=True)
    k = FlashFwdSm90(cfg)
    mismatches: list = []
    checked: list = []

    def compare(pv_all, pv_one):
        # A plain function: the DSL stages the loops of a @cute.jit body, not of what it calls.
        atom = smem_store_atom(k.dtype)
        full = cute.make_identity_tensor((cfg.tile_m, head_dim))
        slab = cute.make_identity_tensor((64, head_dim))
        for t in range(k.consumer_threads):
            a = cute.make_tiled_copy_C(atom, pv_all).get_slice(t).partition_D(full)
            b = cute.make_tiled_copy_C(atom, pv_one).get_slice(t % 128).partition_D(slab)
            if cute.size(a) != cute.size(b):
                mismatches.append((t, "size"))
                continue
            for i in range(cute.size(a)):
                x, y = a[i], b[i]
                if x[0] != y[0] + 64 * (t // 128) or x[1] != y[1]:
                    mismatches.append((t, i, x, y))
                    break
        checked.append(k.consumer_threads)

    @cute.jit
    def probe():
        _, pv_all = k._tiled_mmas()
        _, pv_one = k._tiled_mmas(warpgroups=1)
        compare(pv_all, pv_one)

    cute.compile(probe, options="--gpu-arch sm_90a")
    assert checked == [cfg.consumer_warpgroups * 128]
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
def test_p_fragment_keeps_s_registers_in_order(head_dim):
    """chunked_p_convert converts S to P register by register: right only if the A-operand
    view of S and P's fragment put every element at the same register index."""
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    import cutlass
    import cutlass.cute as cute

    from cubinforge.generator.kernels.fa3_fwd_sm90.config import FwdConfig
    from cubinforge.generator.kernels.fa3_fwd_sm90.kernel import FlashFwdSm90
    from cubinforge.generator.kernels.fa3_fwd_sm90.layouts import acc_as_operand_a, register_order_matches

    cfg = FwdConfig(arch="sm_90a", dtype="bf16", head_dim=head_dim, causal=False)
    k = FlashFwdSm90(cfg)
    seen: dict = {}

    def check(qk, pv):
        wg_qk, wg_pv = qk.get_slice(0), pv.get_slice(0)
        s = cute.make_rmem_tensor(wg_qk.partition_shape_C((cfg.tile_m, cfg.tile_n)), cutlass.Float32)
        p = wg_pv.make_fragment_A(wg_pv.partition_shape_A((cfg.tile_m, cfg.tile_n)))
        seen["match"] = register_order_matches(acc_as_operand_a(s), p)
        # The check can say no: the same registers read column-major instead do not match.
        flipped = cute.make_tensor(s.iterator, cute.make_layout(cute.size(s), stride=1))
        shuffled = cute.make_tensor(s.iterator, cute.make_layout((2, cute.size(s) // 2), stride=(cute.size(s) // 2, 1)))
        seen["negative"] = register_order_matches(cute.make_tensor(p.iterator, shuffled.layout), flipped)

    @cute.jit
    def probe():
        check(*k._tiled_mmas())

    cute.compile(probe, options="--gpu-arch sm_90a")
    assert seen == {"match": True, "negative": False}
