"""fa4_fwd's key-block arithmetic against the per-element rule (cutlass-free)."""

from __future__ import annotations

import itertools

from cubinforge.generator.kernels.fa4_fwd_sm100.mask import first_masked_block, key_blocks


def _visible(i, j, sq, sk, causal):
    return j < sk and (not causal or j <= i + sk - sq)


def test_blocks_visited_and_masked_match_the_element_rule():
    tm, tn = 128, 64
    for sq, sk, causal in itertools.product((1, 5, 127, 128, 129, 300, 640), (1, 63, 64, 65, 200, 512, 700),
                                            (False, True)):
        for m in range((sq + tm - 1) // tm):
            rows = range(m * tm, min((m + 1) * tm, sq))
            n = key_blocks(m, sq, sk, tm, tn, causal)
            first = first_masked_block(m, sq, sk, tm, tn, causal)
            needed = [b for b in range((sk + tn - 1) // tn)
                      if any(_visible(i, j, sq, sk, causal) for i in rows for j in range(b * tn, (b + 1) * tn))]
            # Every block holding a visible key is visited; none past the last is.
            assert n == max(max(needed, default=0) + 1, 1), (sq, sk, causal, m)
            for b in range(n):
                # In tile rows only (the TMA clips the rest): a block needs a mask iff some
                # (row, key) in it is not visible, keys past seqlen_k included.
                full = all(_visible(i, j, sq, sk, causal) for i in rows for j in range(b * tn, (b + 1) * tn))
                if b < first:
                    assert full, (sq, sk, causal, m, b, first)
