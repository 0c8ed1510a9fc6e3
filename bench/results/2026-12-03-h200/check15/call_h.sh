#!/usr/bin/env bash
# Session 15, call H: the varlen-wide-2 candidates with FA4's conditional rescale (built for
# varlen this session, not shipped) against the float64 reference: ragged batches and the
# rising-scores case (keys scaled 8x down to 1x along each sequence, so every block the
# kernel walks raises the rows' maximum), pinned one by one (tests/gpu/test_varlen_persist_gpu.py).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_h.sh
# carry: .cubinforge .cubinforge-ab-vw2
set -uo pipefail
O=$OUT/h1; mkdir -p $O
CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-vw2 timeout 240 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
  -k "lazy and (rising or ragged)" tests/gpu/test_varlen_persist_gpu.py > $O/lazy-varlen.log 2>&1
echo "rc=$?" >> $O/lazy-varlen.log
tail -8 $O/lazy-varlen.log
