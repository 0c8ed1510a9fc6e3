#!/usr/bin/env bash
# Prepared in session 19 (2026-12-04, no machine lent): call D, on the machine calls T / U / C
# left warm (FA4 unpacked under /tmp/site). The main bench's decode-like cells (issue 11: "dense
# decode `bench --decode` cells >= 1.0 x best anchor on every cell"; not measured since
# flash_attn_func routes decode shapes to the split-KV and two-CTA forms): bf16, every head dim,
# seqlen_q 1 / 16 / 64 against 8k / 32k keys, both masks, beside cuDNN, torch's flash (FA2) and
# FA4 in one process. No correctness step (call T ran the suite) and no cold start.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check19/call_d.sh
# carry: .cubinforge
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/d1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 560 python3 -m cubinforge.bench --decode --cells '*-q*-k*' --skip correctness,cold_start --no-plots \
  --deadline 420 --hard-timeout 520 --out $O > $O/bench.log 2>&1
echo "rc=$?" >> $O/bench.log
grep -v "Warning\|exe_args" $O/bench.log | tail -70
