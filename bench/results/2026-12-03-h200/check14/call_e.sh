#!/usr/bin/env bash
# Session 14, call E: every GPU test on the registry built at this commit (default + SET=fp8,
# 131 variants, the new hd192 / hd256 causal 128 x 64 forms among them), 8 shards; FA4's
# part 1 parked (h200_check.sh PART=tests) for call F.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_e.sh
# carry: .cubinforge .stage_fa4x
set -uo pipefail
PART=tests OUT=$OUT/e1 GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=${GPU_TESTS_S:-330} SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -30
tar czf $OUT/check14-e.tar.gz -C $OUT e1
