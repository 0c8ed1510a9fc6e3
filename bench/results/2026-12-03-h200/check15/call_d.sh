#!/usr/bin/env bash
# Session 15, call D: every GPU test on the registry of calls A-C plus SET=fp8 (139 variants,
# renamed .cubinforge), 8 shards; then the C++ loader against Python in one process.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_d.sh
# carry: .cubinforge
set -uo pipefail
PART=tests OUT=$OUT/d1 GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=${GPU_TESTS_S:-330} SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -24
PART=cpp OUT=$OUT/d1 bash bench/h200_check.sh 2>&1 | tail -8
