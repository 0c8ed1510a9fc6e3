#!/usr/bin/env bash
# Session 22's plan, call 3 (after calls A, B and B2 on the same warm machine: the homes are
# there and FA4 is unpacked; on a fresh machine run call A's park and carry .stage_fa4y).
# FA4 unpacked; then, beside FA4 in one process each:
#   1. bench.inference on the default registry: issue 11's decode cells (4.0 / 4.4 TB/s targets,
#      with the HBM copy rate of the same run), timed back to back and, --isolated, call by call
#      after a GPU sleep as the 2026-12-01 anchors were; and every varlen case;
#   2. bench/model_variants.py: issue 12's window / softcap / (192, 128) / sink cells;
#   3. the main bench's bf16 --decode cells (hd64 / 128 / 256, q 1 / 16 / 64 x 8k / 32k keys, both
#      masks) beside cuDNN, FA2 and FA4 (issue 11's "every cell >= 1.0x the best anchor").
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check22/call_2.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
B=/tmp/b1; rm -rf $B; mkdir -p $B
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $B/gpu.txt 2>&1; cat $B/gpu.txt
test -d .cubinforge || echo "the homes are gone: the machine went back after call A"
bash bench/stage_fa4.sh unpack $B/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== inference ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m cubinforge.bench.inference --isolated --json $B/inference.json > $B/inference.log 2>&1
echo "rc=$?" >> $B/inference.log
grep -v "Warning\|exe_args\|^ \|Traceback\|File " $B/inference.log | tail -60
echo "== model variants ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 100 python3 bench/model_variants.py --out $B/model_variants.json > $B/model_variants.log 2>&1
echo "rc=$?" >> $B/model_variants.log
grep -v "Warning\|exe_args" $B/model_variants.log | tail -16
echo "== decode cells ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout ${DECODE_S:-200} python3 -m cubinforge.bench --decode --cells '*-q*-k*' \
  --skip correctness,cold_start --no-plots --deadline $(( ${DECODE_S:-200} - 40 )) --hard-timeout $(( ${DECODE_S:-200} - 10 )) \
  --out $B/decode > $B/decode.log 2>&1
echo "rc=$?" >> $B/decode.log
grep -v "Warning\|exe_args" $B/decode.log | tail -50
echo "done $(date +%T)"
} 2>&1 | tee $OUT/b1.txt
tar czf $OUT/b1.tgz -C /tmp b1
