#!/usr/bin/env bash
# Prepared in session 17 (2026-12-04, not run yet): call S, right after call R on the same warm
# machine. FA4 unpacked; bench.inference --ab-home on varlen-dynamic-2: each candidate beside
# the shipped form (one tile per CTA) and FA4 in alternating rounds, the paged ones on the paged
# chunked prefill case (8 x 2048 new tokens against 8192 cached, page 256, 32/8 heads), hd64 on
# the 16-sequence packed case; the same for varlen-wide-5 and varlen-model (its window 1,024 to
# the left, softcap 30, random sinks: bench/inference.py VARLEN_AB_MODEL). Each set under its own
# limit, 500 s in all (the device's 600 s a call, FA4's unpack and JIT included).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check17/call_s.sh
# carry: .stage_fa4y .cubinforge .cubinforge-ab-dyn2 .cubinforge-ab-vw5 .cubinforge-ab-vm
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/s1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
for run in dyn2:200 vw5:150 vm:150; do
  ab=${run%:*}
  timeout ${run#*:} python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-$ab --iters 20 > $O/ab-$ab.log 2>&1
  echo "rc=$?" >> $O/ab-$ab.log
  grep "^|" $O/ab-$ab.log; tail -2 $O/ab-$ab.log
done
