#!/usr/bin/env bash
# Session 15, call F (calls D's plan, renamed: D never ran, no machine was lent): every GPU test
# on the final registry (default 108 + SET=fp8, the bf16 wide varlen forms with O staged in
# Q's buffer and stored by one ragged TMA store), 8 shards, the persistent varlen tests on the
# shipped walk's forms (CUBINFORGE_AB_HOME=.cubinforge: its rising-scores case among them);
# FA4's part 1 parked for call G; then the C++ loader against Python in one process.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_f.sh
# carry: .cubinforge .stage_fa4x
set -uo pipefail
export CUBINFORGE_AB_HOME=$PWD/.cubinforge
PART=tests OUT=$OUT/f1 GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=${GPU_TESTS_S:-330} SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -24
PART=cpp OUT=$OUT/f1 bash bench/h200_check.sh 2>&1 | tail -8
