#!/usr/bin/env bash
# Session 14, call H: bench.ab long-lazy (FA4's conditional rescale on the long forms still
# under FA4 in f1: hd192 causal lpt, hd64 both masks, bf16 and fp16) at 2k-16k beside cuDNN;
# then the C++ loader against Python in one process on the final registry (PART=cpp).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_h.sh
# carry: .cubinforge-ab-lazy .cubinforge
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/h1; mkdir -p $O
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "commit $CUBINFORGE_COMMIT"; } > $O/env.txt 2>&1
timeout ${AB_S:-240} python3 -m bench.ab run --home .cubinforge-ab-lazy --seqlens 2048,4096,8192,16384 \
  --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -v "^fa4 not timed" $O/ab.log | grep -v "rising scores" | sed 's/fa3-fwd-sm_90a-//' | awk '{print $1, $2, $4, $6, $7}'
PART=cpp OUT=$O CPP_S=${CPP_S:-200} bash bench/h200_check.sh 2>&1 | tail -12
