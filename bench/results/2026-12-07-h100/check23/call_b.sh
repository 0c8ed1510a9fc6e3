#!/usr/bin/env bash
# Session 23, call B (right after call A on the same warm machine: the homes and FA4's parked
# first half are there). FA4 unpacked; then
#   1. bench.ab run on the k-stages set at 2k / 8k / 16k, each hd64 form's control (the shipped
#      cubin) and its three- and four-stage candidates beside cuDNN and FA4 in one process;
#   2. bench/fp8.py --ab-home on the late-k-release-fp8 home: the e4m3 gate's rising-score case
#      with hd256's inputs inside e4m3's range (bench.ab.rising's k_max; check23/b3 had hd256's
#      k0 overflow to NaN and fail every hd256 row, the shipped forms too);
#   3. on an H200 only: bench.inference --isolated, issue 11's decode cases beside FA4 (its
#      4.4 TB/s targets were set on an H200 by that method).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h100/check23/call_b.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
B=/tmp/b4; rm -rf $B; mkdir -p $B
save() { tar czf $OUT/b4.tgz -C /tmp b4; }  # after each step: a call past its limit keeps what ran
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $B/gpu.txt 2>&1; cat $B/gpu.txt
test -d .cubinforge-ab-kstages || echo "the homes are gone: the machine went back after call A"
bash bench/stage_fa4.sh unpack $B/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== k-stages A/B ($(date +%T))"
timeout ${AB_S:-200} python3 -m bench.ab run --home .cubinforge-ab-kstages --seqlens 2048,8192,16384 --out $B/ab-kstages \
  > $B/ab-kstages.log 2>&1
echo "rc=$?" >> $B/ab-kstages.log; grep -v "Warning\|exe_args" $B/ab-kstages.log | tail -40
save
echo "== e4m3 gate, hd256 rising inputs in range ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout ${FP8_S:-110} python3 -m bench.fp8 --ab-home .cubinforge-ab-latek-fp8 \
  --json $B/fp8_ab.json > $B/fp8_ab.log 2>&1
echo "rc=$?" >> $B/fp8_ab.log; grep -v "Warning\|exe_args" $B/fp8_ab.log | grep "gate\|^|" | tail -30
save
if grep -q H200 $B/gpu.txt; then
  echo "== inference decode, isolated, beside FA4 ($(date +%T))"
  CUBINFORGE_HOME=$PWD/.cubinforge timeout 120 python3 -m cubinforge.bench.inference --isolated --json $B/inference.json --cases \
    paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
    > $B/inference.log 2>&1
  echo "rc=$?" >> $B/inference.log; grep -v "Warning\|exe_args" $B/inference.log | tail -24
  save
fi
echo "done $(date +%T)"
} 2>&1 | tee $OUT/b4.txt
tar czf $OUT/b4.tgz -C /tmp b4
