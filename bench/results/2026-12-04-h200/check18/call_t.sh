#!/usr/bin/env bash
# Session 18, call T (a fresh machine): every GPU test on the promoted registry (make kernels
# ARCH=sm90, then SET=fp8), 8 shards, with the verification log on; then the C++ loader against
# Python. FA4's part 1 is parked for call U. The device returns at most 8 files, so the folder
# comes back as one archive, t1.tgz.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check18/call_t.sh
# carry: .stage_fa4x .cubinforge
set -uo pipefail
export CUBINFORGE_AB_HOME=$PWD/.cubinforge
T=/tmp/t1; rm -rf $T; mkdir -p $T
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $T/gpu.txt 2>&1
PART=tests OUT=$T GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=${GPU_TESTS_S:-330} SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -24
PART=cpp OUT=$T bash bench/h200_check.sh 2>&1 | tail -4
python3 -c "import json; r = json.load(open('$T/verified.json'))['records']; \
print(len(r), 'records,', sum(x['result'] == 'failed' for x in r), 'failed')"
tar czf $OUT/t1.tgz -C /tmp t1
