#!/usr/bin/env bash
# Session 16, call L (right after call K, on the same warm machine): FA4 unpacked; bench.ab
# varlen-wide-4 on the 16-sequence case, each candidate beside the shipped form and FA4 in
# alternating rounds, then the model variants beside FA4 (issue 12's cells).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_l.sh
# carry: .stage_fa4y .cubinforge .cubinforge-ab-vw4
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/l1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 300 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-vw4 --iters 20 > $O/varlen-wide-4-ab.log 2>&1
echo "rc=$?" >> $O/varlen-wide-4-ab.log
grep "^|" $O/varlen-wide-4-ab.log; tail -2 $O/varlen-wide-4-ab.log
timeout 150 python3 -m cubinforge.bench.model_variants --out $O/model-variants.json > $O/model-variants.log 2>&1
echo "rc=$?" >> $O/model-variants.log
grep -v "Warning\|exe_args" $O/model-variants.log | tail -14
