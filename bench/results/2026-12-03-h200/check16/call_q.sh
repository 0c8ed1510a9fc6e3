#!/usr/bin/env bash
# Session 16, call Q (a fresh machine): every GPU test on the final registry (default 108 +
# SET=fp8 31; the twelve persistent varlen forms with the tile counter), 8 shards, the
# persistent varlen tests on the shipped forms (CUBINFORGE_AB_HOME=.cubinforge) and the new CUDA
# graph replay of a varlen plan among them; then the C++ loader against Python in one process
# (its varlen plans allocate and zero the counter).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_q.sh
# carry: .cubinforge
set -uo pipefail
export CUBINFORGE_AB_HOME=$PWD/.cubinforge
PART=tests OUT=$OUT/q1 GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=${GPU_TESTS_S:-330} SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -24
PART=cpp OUT=$OUT/q1 bash bench/h200_check.sh 2>&1 | tail -4
