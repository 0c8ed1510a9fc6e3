#!/usr/bin/env bash
# Prepared in session 17 (2026-12-04, not run yet): call T on a fresh machine. Every GPU test on
# the shipped registry (make kernels ARCH=sm90, then SET=fp8), 8 shards, with the verification
# log on: $OUT/t1/verified.json names each cubin a float64 comparison checked (84 of the default
# set's 108 carry no record today: they were built after the last sweep). Then the C++ loader
# against Python. Afterwards, here: copy t1/verified.json to registry/verified/<date>-h200-gpu-tests.json
# (after checking its sha256s against this build's manifests) and `cubinforge verify import` it.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check17/call_t.sh
# carry: .cubinforge
set -uo pipefail
export CUBINFORGE_AB_HOME=$PWD/.cubinforge
PART=tests OUT=$OUT/t1 GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=${GPU_TESTS_S:-330} SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -24
PART=cpp OUT=$OUT/t1 bash bench/h200_check.sh 2>&1 | tail -4
python3 -c "import json; r = json.load(open('$OUT/t1/verified.json'))['records']; \
print(len(r), 'records,', sum(x['result'] == 'failed' for x in r), 'failed')"
