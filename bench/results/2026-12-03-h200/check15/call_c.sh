#!/usr/bin/env bash
# Session 15, call C: bench.ab varlen-wide ((192, 128) and hd256 packed varlen: the shipped
# persistent walk, P converted in pairs, the bit mask, the in-order row sum, one tile per CTA),
# each checked against the shipped variant's O and timed beside it in alternating rounds
# (no FA4 in this call: its staging takes two; b1 has FA4 on the same cells).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_c.sh
# carry: .cubinforge-new .cubinforge-ab-vw
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} CUBINFORGE_HOME=$PWD/.cubinforge-new  # renamed .cubinforge after call C
O=$OUT/c1; mkdir -p $O
timeout 400 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-vw --iters 20 > $O/varlen-wide-ab.log 2>&1
echo "rc=$?" >> $O/varlen-wide-ab.log
grep "^|" $O/varlen-wide-ab.log; tail -3 $O/varlen-wide-ab.log
