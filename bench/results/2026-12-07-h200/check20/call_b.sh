#!/usr/bin/env bash
# Session 20, call B (right after call A on the same warm machine: the homes and FA4's parked
# first half are there). FA4 unpacked; then, beside FA4 in one process each:
#   1. bench.inference --ab-home on varlen-walk-rest (check19's call C, its second half): each
#      candidate beside SET=inference's one-tile form and FA4, in alternating rounds;
#   2. bench.inference on the default registry (check18's call U): the decode cells (issue 11's
#      4.0 / 4.4 TB/s targets) and every varlen case;
#   3. bench/model_variants.py (issue 12's window / softcap / (192, 128) / sink cells).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check20/call_b.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/b1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
test -d .cubinforge-inf || echo "the homes are gone: the machine went back after call A"
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
CUBINFORGE_HOME=$PWD/.cubinforge-inf timeout 210 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-wr \
  --iters 20 > $O/ab-wr.log 2>&1
echo "rc=$?" >> $O/ab-wr.log
grep "^|" $O/ab-wr.log; tail -1 $O/ab-wr.log
CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m cubinforge.bench.inference --json $O/inference.json > $O/inference.log 2>&1
echo "rc=$?" >> $O/inference.log
grep -v "Warning\|exe_args" $O/inference.log | grep "^|\|HBM\|rc=" | tail -40
CUBINFORGE_HOME=$PWD/.cubinforge timeout 100 python3 bench/model_variants.py --out $O/model_variants.json > $O/model_variants.log 2>&1
echo "rc=$?" >> $O/model_variants.log
grep -v "Warning\|exe_args" $O/model_variants.log | tail -16
