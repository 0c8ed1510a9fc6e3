#!/usr/bin/env bash
# Session 22, call 1 (a fresh machine): FA4's first staging half parked for call 2, the registry
# unpacked, then issue 11's bf16 decode cases (bench.inference, no FA4 here: its second half comes
# in call 2) timed both ways: back to back (bench.timing.time_cuda) and call by call after a GPU
# sleep (--isolated, the 2026-12-01 anchor method that set the 4.0 / 4.4 TB/s targets), each
# beside the HBM copy rate measured the same way in the same process; then bench.ab decode-hd64's
# candidates on the twelve bf16 hd64 --decode cells beside cuDNN and FA2 (on an H100 the 64 x 64
# two-CTA form won only the one-wave 32k cells, check21/a1: does it win on every cell here, as
# hd128's did, so that it ships without a wave-count rule?).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check22/call_1.sh
# carry: .stage_fa4x .stage_homes (HOMES=".cubinforge .cubinforge-ab-dec64" bash bench/results/2026-12-07-h200/check20/pack_homes.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
D=/tmp/d1; rm -rf $D; mkdir -p $D
{
bash bench/stage_fa4.sh park || echo "FA4 park failed"
rm -rf .cubinforge .cubinforge-ab-dec64 && { xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1; cat $D/gpu.txt
echo "== inference decode, back to back and isolated ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m cubinforge.bench.inference --isolated --json $D/inference.json --cases \
  paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
  > $D/inference.log 2>&1
echo "rc=$?" >> $D/inference.log; grep -v "Warning\|exe_args" $D/inference.log | tail -30
echo "== decode_ab --head-dim 64 ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 170 python3 -m cubinforge.bench.decode_ab --head-dim 64 --ab-home .cubinforge-ab-dec64 \
  --splits 0 --ab-splits 0 --iters 20 --json $D/decode_ab_hd64.json > $D/decode_ab_hd64.log 2>&1
echo "rc=$?" >> $D/decode_ab_hd64.log; grep -v "Warning\|exe_args" $D/decode_ab_hd64.log | grep -v "^  entry" | tail -90
echo "done $(date +%T)"
} 2>&1 | tee $OUT/d1.txt
tar czf $OUT/d1.tgz -C /tmp d1
