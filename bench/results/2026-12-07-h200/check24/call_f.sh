#!/usr/bin/env bash
# Session 24, call F, on an H200 only (right after check23's calls D and E on the same warm
# machine: the homes are there and FA4 is unpacked). Beside FA4 in one process each:
#   1. bench.inference on the default registry: every varlen, chunked-prefill and decode case of
#      issue 11 (call E timed the decode cases isolated; here they are back to back);
#   2. bench/model_variants.py: issue 12's window / softcap / (192, 128) / sink cells;
#   3. the main bench's bf16 --decode cells beside cuDNN, FA2 and FA4.
# The issues' absolute targets (TB/s, TFLOPS) were set on an H200; the last H200 runs of these
# were sessions 14-17 (2026-12-03/04), before the promoted registry.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check24/call_f.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
F=/tmp/f1; rm -rf $F; mkdir -p $F
save() { tar czf $OUT/f1.tgz -C /tmp f1; }
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $F/gpu.txt 2>&1; cat $F/gpu.txt
test -d .cubinforge || echo "the homes are gone: the machine went back after call E"
bash bench/stage_fa4.sh unpack $F/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== inference ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m cubinforge.bench.inference --json $F/inference.json > $F/inference.log 2>&1
echo "rc=$?" >> $F/inference.log
grep -v "Warning\|exe_args\|^ \|Traceback\|File " $F/inference.log | tail -60
save
echo "== model variants ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 100 python3 bench/model_variants.py --out $F/model_variants.json > $F/model_variants.log 2>&1
echo "rc=$?" >> $F/model_variants.log
grep -v "Warning\|exe_args" $F/model_variants.log | tail -16
save
echo "== decode cells ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 160 python3 -m cubinforge.bench --decode --cells '*-q*-k*' \
  --skip correctness,cold_start --no-plots --deadline 120 --hard-timeout 150 \
  --out $F/decode > $F/decode.log 2>&1
echo "rc=$?" >> $F/decode.log
grep -v "Warning\|exe_args" $F/decode.log | tail -50
echo "done $(date +%T)"
} 2>&1 | tee $OUT/f1.txt
save
