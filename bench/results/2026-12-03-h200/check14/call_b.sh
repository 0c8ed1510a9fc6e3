#!/usr/bin/env bash
# Session 14, call B (right after call A, on the same warm machine): FA4 unpacked; the
# inference grid (issue 11), the model variants (issue 12) and the host cost per call (issue
# 10) beside FA4 (and cuDNN) in the same processes, on the default registry.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_b.sh
# carry: .stage_fa4y .cubinforge
set -uo pipefail
O=$OUT/b1; mkdir -p $O
PART=bench OUT=$O INFERENCE_S=${INFERENCE_S:-200} MV_AB_HOME=/nonexistent \
  SKIP="cpp host-overhead-raw-off" bash bench/h200_check.sh 2>&1 | tail -60
