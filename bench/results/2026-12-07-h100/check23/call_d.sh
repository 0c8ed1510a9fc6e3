#!/usr/bin/env bash
# Session 23's plan, call D (a fresh machine; not run in session 23, whose device time ran out):
# FA4's first half parked for call E, then bench.ab run with each round's calls interleaved (timing.time_interleaved: A B C A
# B C ..., one event pair per call; c2 / c3 timed in turns of ~0.1 s and one pair's ratio ranged
# 0.86-1.12 from turn to turn at 8k / 16k), on the k-stages set at 2k / 8k / 16k, 5 rounds,
# beside cuDNN.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h100/check23/call_d.sh
# carry: .stage_fa4x .stage_homes   (HOMES=".cubinforge .cubinforge-ab-kstages .cubinforge-ab-latek-fp8" bash bench/results/2026-12-07-h200/check20/pack_homes.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
C=/tmp/d1; rm -rf $C; mkdir -p $C
{
rm -rf .cubinforge .cubinforge-ab-kstages .cubinforge-ab-latek-fp8
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
bash bench/stage_fa4.sh park || echo "FA4 park failed"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $C/gpu.txt 2>&1
cat $C/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
echo "== the interleaved timer's and rising()'s GPU tests ($(date +%T))"
timeout 60 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_bench_gpu.py -k "interleaved or rising" \
  > $C/timer-tests.log 2>&1; tail -3 $C/timer-tests.log
echo "== k-stages A/B, calls interleaved ($(date +%T))"
timeout 240 python3 -m bench.ab run --home .cubinforge-ab-kstages --seqlens 2048,8192,16384 --rounds 5 \
  --out $C/ab-kstages > $C/ab-kstages.log 2>&1
echo "rc=$?" >> $C/ab-kstages.log; grep -v "Warning\|exe_args" $C/ab-kstages.log | tail -40
echo "done $(date +%T)"
} 2>&1 | tee $OUT/d1.txt
tar czf $OUT/d1.tgz -C /tmp d1
