#!/usr/bin/env bash
# Session 21, call D (a fresh machine, the session's last device time; FA4 not staged: its two
# halves need two calls). What runs depends on the card the call gets:
#   H200: issue 11's absolute targets, which no H100 can judge: bench.inference's bf16 decode
#         cases (TB/s of K+V against the HBM copy rate of the same run; FA4 not importable
#         here, so no FA4 column), then the --decode cells beside cuDNN and FA2;
#   else: bench/decode_ab.py --head-dim 64 with more split counts (the non-causal q16 / q64
#         cells at 8k keys, 0.96-0.98x cuDNN, where no decode-hd64 candidate won in a1).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check21/call_d.sh
# carry: .stage_homes
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
D=/tmp/d1; rm -rf $D; mkdir -p $D
{
rm -rf .cubinforge .cubinforge-ab-dec64
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1; cat $D/gpu.txt
export CUBINFORGE_HOME=$PWD/.cubinforge
if grep -q H200 $D/gpu.txt; then
  echo "== inference decode ($(date +%T))"
  timeout 150 python3 -m cubinforge.bench.inference --json $D/inference.json --cases \
    paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
    > $D/inference.log 2>&1
  echo "rc=$?" >> $D/inference.log; grep -v "Warning\|exe_args" $D/inference.log | tail -14
  echo "== decode cells ($(date +%T))"
  timeout 170 python3 -m cubinforge.bench --decode --cells '*-q*-k*' --skip correctness,cold_start --no-plots \
    --backends ours,cudnn,flash2 --deadline 130 --hard-timeout 160 --out $D/decode > $D/decode.log 2>&1
  echo "rc=$?" >> $D/decode.log; grep -v "Warning\|exe_args" $D/decode.log | tail -42
else
  echo "== decode_ab --head-dim 64, splits 1-4 ($(date +%T))"
  timeout 200 python3 -m cubinforge.bench.decode_ab --head-dim 64 --cells '*-full' --ab-home .cubinforge-ab-dec64 \
    --splits 0,1,2,3,4 --ab-splits 1,2 --iters 20 --json $D/decode_ab_hd64.json > $D/decode_ab_hd64.log 2>&1
  echo "rc=$?" >> $D/decode_ab_hd64.log; grep -v "Warning\|exe_args" $D/decode_ab_hd64.log | tail -30
fi
echo "done $(date +%T)"
} 2>&1 | tee $OUT/d1.txt
tar czf $OUT/d1.tgz -C /tmp d1
