#!/usr/bin/env bash
# Session 15, call E: bench.ab varlen-wide-2 ((192, 128) and hd256 packed varlen: O staged in
# shared memory and stored by rows or by one ragged TMA store, FA4's conditional rescale, each
# beside the shipped walk in alternating rounds; no FA4 in this call, as call C).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_e.sh
# carry: .cubinforge .cubinforge-ab-vw2
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/e1; mkdir -p $O
timeout 400 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-vw2 --iters 20 > $O/varlen-wide-2-ab.log 2>&1
echo "rc=$?" >> $O/varlen-wide-2-ab.log
grep "^|" $O/varlen-wide-2-ab.log; tail -3 $O/varlen-wide-2-ab.log
