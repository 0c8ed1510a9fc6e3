#!/usr/bin/env bash
# Session 14, call G: bench.ab short-n64-nc (hd192 / hd256 non-causal at 128 x 64 against the
# shipped 128 x 96 / 128 x 80 forms at 512-2k keys and off-grid shapes) beside cuDNN; then the
# HBM traffic of the shipped hd256 causal 128 x 64 form at 512 keys beside cuDNN (ncu).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_g.sh
# carry: .cubinforge-ab-n64nc .cubinforge
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/g1; mkdir -p $O
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "commit $CUBINFORGE_COMMIT"; } > $O/env.txt 2>&1
timeout ${AB_S:-300} python3 -m bench.ab run --home .cubinforge-ab-n64nc --seqlens 512,1024,2048 \
  --shapes 8:777:8,16:640:8,4:1500:8,2:4000:8 --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -v "^fa4 not timed" $O/ab.log | grep -v "rising scores" | sed 's/fa3-fwd-sm_90a-bf16-//' | awk '{print $1, $2, $4, $6, $7}'
timeout 150 python3 -m bench.ncu_memory --home .cubinforge --variants fa3-fwd-sm_90a-bf16-hd256-causal-lpt-m128n64 \
  --head-dim 256 --causal 1 --heads 8 --batch 32 --seqlen 512 --json $O/ncu-hd256-s512.json > $O/ncu.log 2>&1
tail -8 $O/ncu.log
