#!/usr/bin/env bash
# Session 23, call C (a fresh machine; FA4 not staged: the question is control against
# candidate): bench.ab run, now timing a form's variants and the anchors in the same alternating
# rounds on the same inputs (b4 / b5 timed each variant apart and FA4 on one cell ranged 542-578
# TFLOPS between them), on the k-stages set at 2k / 8k / 16k with 7 rounds beside cuDNN.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h100/check23/call_c.sh
# carry: .stage_homes   (HOMES=".cubinforge .cubinforge-ab-kstages .cubinforge-ab-latek-fp8" bash bench/results/2026-12-07-h200/check20/pack_homes.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
C=/tmp/c2; rm -rf $C; mkdir -p $C
{
rm -rf .cubinforge .cubinforge-ab-kstages .cubinforge-ab-latek-fp8
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $C/gpu.txt 2>&1
cat $C/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
echo "== k-stages A/B, paired rounds ($(date +%T))"
timeout 240 python3 -m bench.ab run --home .cubinforge-ab-kstages --seqlens 2048,8192,16384 --rounds 7 \
  --out $C/ab-kstages > $C/ab-kstages.log 2>&1
echo "rc=$?" >> $C/ab-kstages.log; grep -v "Warning\|exe_args" $C/ab-kstages.log | tail -40
echo "done $(date +%T)"
} 2>&1 | tee $OUT/c2.txt
tar czf $OUT/c2.tgz -C /tmp c2
