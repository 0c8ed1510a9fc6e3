#!/usr/bin/env bash
# Session 24, call G (after call E on the same warm machine, FA4 unpacked): the whole 36-cell
# grid, bf16 and fp16, beside cuDNN and FA4, timed with --interleaved only (call E timed the
# under-anchor cells both ways). Issue 10's standing under the timer that keeps one cell's
# backends on the same clocks and inputs.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check24/call_g.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
G=/tmp/g1; rm -rf $G; mkdir -p $G
save() { tar czf $OUT/g1.tgz -C /tmp g1; }
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $G/gpu.txt 2>&1; cat $G/gpu.txt
test -d .cubinforge || echo "the homes are gone: the machine went back after call E"
bash bench/stage_fa4.sh unpack $G/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== grid bf16 + fp16, interleaved ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 320 python3 -m bench --out $G/grid --skip correctness,cold_start --no-plots \
  --dtype bf16,fp16 --head-dims 64,128,256 --backends ours,cudnn,fa4 --seed 24 --interleaved \
  --deadline 270 --hard-timeout 305 > $G/grid.log 2>&1
echo "rc=$?" >> $G/grid.log; grep -v "Warning\|exe_args" $G/grid.log | tail -80
save
echo "done $(date +%T)"
} 2>&1 | tee $OUT/g1.txt
save
