#!/usr/bin/env bash
# Session 15, call I: bench.ab varlen-wide-3 (fp16 wide varlen with the O store bf16 took in
# e1, beside fp16's shipped register store; bf16 hd256 causal at 128 x 64 with it, and with the
# conditional rescale, beside the promoted bf16 form), alternating rounds, no FA4 in this call.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_i.sh
# carry: .cubinforge .cubinforge-ab-vw3
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/i1; mkdir -p $O
timeout 200 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-vw3 --iters 20 > $O/varlen-wide-3-ab.log 2>&1
echo "rc=$?" >> $O/varlen-wide-3-ab.log
grep "^|" $O/varlen-wide-3-ab.log; tail -3 $O/varlen-wide-3-ab.log
