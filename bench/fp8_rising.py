"""The rising-score gate case (bench.ab.rising), at its sizes with plain and with rising scores,
on shipped e4m3 hd128 forwards with and without the conditional rescale, in one process: whether
the LSE error the lazy rows showed in the mufu A/B (1.9e-2, against 2.5e-4 on Gaussian inputs)
is the rescale's or the input's.

    PYTHONPATH=. python3 -m bench.fp8_rising
"""

from __future__ import annotations

import json

from .ab import RISING_SHAPES, check_fp8_variant
from .anchors import Ours

# (variant, V layout): the promoted colmajor 128x192 (lazy rescale) beside two without it
VARIANTS = (("fa3-fwd-sm_90a-e4m3-hd128-noncausal-colmajor-persistent-m128n192", "colmajor"),
            ("fa3-fwd-sm_90a-e4m3-hd128-noncausal-persistent-m128n224", "rowmajor"),
            ("fa3-fwd-sm_90a-e4m3-hd128-causal-colmajor-lpt", "colmajor"))


def main() -> int:
    ours = Ours()
    failed = 0
    for name, layout in VARIANTS:
        causal = "-causal-" in name
        for rising in (False, True):
            rel, lse, ok = check_fp8_variant(ours, name, 128, causal, layout, RISING_SHAPES, rising_scores=rising)
            failed += not ok
            print(json.dumps({"variant": name, "rising": rising, "rel_err": rel, "lse_err": lse, "ok": ok}),
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
