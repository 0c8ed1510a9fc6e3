#!/usr/bin/env bash
# Session 20, call C (right after call B, FA4 unpacked there): check19's call D, the main bench's
# decode cells (bf16, hd64 / 128 / 256, seqlen_q 1 / 16 / 64 against 8k / 32k keys, both masks)
# beside cuDNN, torch's flash (FA2) and FA4 in one process: issue 11's "dense decode cells
# >= 1.0 x best anchor on every cell", unmeasured since flash_attn_func routes decode shapes to
# the split-KV and two-CTA forms. Then bench.fp8 (issue 13's TFLOPS against the e4m3 ceiling)
# if time is left.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check20/call_c.sh
# carry: none (the homes and FA4 are on the warm machine)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
test -d /tmp/site/flash_attn || echo "FA4 is not unpacked here: the machine went back after call B"
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout ${DECODE_S:-420} python3 -m cubinforge.bench --decode --cells '*-q*-k*' --skip correctness,cold_start --no-plots \
  --deadline $(( ${DECODE_S:-420} - 70 )) --hard-timeout $(( ${DECODE_S:-420} - 20 )) --out $O > $O/bench.log 2>&1
echo "rc=$?" >> $O/bench.log
grep -v "Warning\|exe_args" $O/bench.log | tail -50
[ -n "${FP8_S:-}" ] && { timeout $FP8_S python3 -m bench.fp8 --skip-errors --json $O/fp8.json > $O/fp8.log 2>&1; tail -20 $O/fp8.log; }
true
