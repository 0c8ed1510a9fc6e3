#!/usr/bin/env bash
# Session 15, call G (right after call F, on the same warm machine): FA4 unpacked; the inference
# grid (issue 11's cells, and the varlen cells at (192, 128) and hd256) beside FA4 in one
# process, on the same registry as call A.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_g.sh
# carry: .stage_fa4y .cubinforge (the final registry, as call F)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} CUBINFORGE_HOME=$PWD/.cubinforge
O=$OUT/g1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 330 python3 -m cubinforge.bench.inference --json $O/inference.json > $O/inference.log 2>&1
echo "rc=$?" >> $O/inference.log
grep -v "Warning\|exe_args" $O/inference.log | tail -40
