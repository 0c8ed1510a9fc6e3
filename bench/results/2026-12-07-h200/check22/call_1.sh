#!/usr/bin/env bash
# Session 22, call 1 (a fresh machine): FA4's first staging half parked for call 2, the registry
# unpacked, then issue 11's bf16 decode cases (bench.inference, no FA4 here: its second half comes
# in call 2) timed both ways: back to back (bench.timing.time_cuda) and call by call after a GPU
# sleep (--isolated, the 2026-12-01 anchor method that set the 4.0 / 4.4 TB/s targets), each
# beside the HBM copy rate measured the same way in the same process.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check22/call_1.sh
# carry: .stage_fa4x .stage_homes (HOMES=".cubinforge" bash bench/results/2026-12-07-h200/check20/pack_homes.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
D=/tmp/d1; rm -rf $D; mkdir -p $D
{
bash bench/stage_fa4.sh park || echo "FA4 park failed"
rm -rf .cubinforge && { xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1; cat $D/gpu.txt
echo "== inference decode, back to back and isolated ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m cubinforge.bench.inference --isolated --json $D/inference.json --cases \
  paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
  > $D/inference.log 2>&1
echo "rc=$?" >> $D/inference.log; grep -v "Warning\|exe_args" $D/inference.log | tail -30
echo "done $(date +%T)"
} 2>&1 | tee $OUT/d1.txt
tar czf $OUT/d1.tgz -C /tmp d1
