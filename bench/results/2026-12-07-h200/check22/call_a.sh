#!/usr/bin/env bash
# Session 22's plan, call A (a fresh machine; written with no device lent, so not run yet): the
# registry homes unpacked, FA4's first half parked for call B, then
#   1. the float64 GPU tests of bench.ab's late-k-release candidates (K released after the
#      softmax, FwdConfig.late_k_release; bench/results/2026-12-07-cpu/late-k-release.md):
#      tests/gpu/test_late_k_release_gpu.py on the 13 dense pairs (.cubinforge-ab-latek) and the 4
#      short causal ones (.cubinforge-ab-latek-short), and
#      tests/gpu/test_varlen_persist_gpu.py on the 9 varlen pairs (.cubinforge-ab-latek-vl),
#      4 shards each, and tests/gpu/test_decode_candidates_gpu.py on the 8 decode pairs
#      (.cubinforge-ab-latek-dec64 / -dec128, 2 shards each), with verification records;
#   2. issue 11's bf16 decode cases, back to back and isolated (bench.inference --isolated, no FA4).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check22/call_a.sh
# carry: .stage_fa4x .stage_homes
#   (HOMES=".cubinforge .cubinforge-ab-latek .cubinforge-ab-latek-vl .cubinforge-ab-latek-short
#    .cubinforge-ab-latek-dec64 .cubinforge-ab-latek-dec128 .cubinforge-ab-latek-fp8" bash bench/results/2026-12-07-h200/check20/pack_homes.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
A=/tmp/a1; rm -rf $A; mkdir -p $A
{
rm -rf .cubinforge .cubinforge-ab-latek .cubinforge-ab-latek-vl .cubinforge-ab-latek-short .cubinforge-ab-latek-dec64 \
  .cubinforge-ab-latek-dec128 .cubinforge-ab-latek-fp8
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
bash bench/stage_fa4.sh park || echo "FA4 park failed"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $A/gpu.txt 2>&1
cat $A/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
echo "== late-k-release float64 tests ($(date +%T))"
for i in 0 1 2 3; do
  CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-latek CUBINFORGE_TEST_SHARD=$i/4 \
    CUBINFORGE_VERIFIED_OUT=$A/verified-lk/tests.json OMP_NUM_THREADS=4 timeout 150 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_late_k_release_gpu.py > $A/lk-tests-$i.log 2>&1 &
  CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-latek-short CUBINFORGE_TEST_SHARD=$i/4 \
    CUBINFORGE_VERIFIED_OUT=$A/verified-lks/tests.json OMP_NUM_THREADS=4 timeout 150 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_late_k_release_gpu.py > $A/lks-tests-$i.log 2>&1 &
  CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-latek-vl CUBINFORGE_TEST_SHARD=$i/4 \
    CUBINFORGE_VERIFIED_OUT=$A/verified-lkvl/tests.json OMP_NUM_THREADS=4 timeout 200 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_varlen_persist_gpu.py > $A/lkvl-tests-$i.log 2>&1 &
done
wait
for h in 64 128; do
  for i in 0 1; do
    CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-latek-dec$h CUBINFORGE_TEST_SHARD=$i/2 \
      CUBINFORGE_VERIFIED_OUT=$A/verified-lkd$h/tests.json OMP_NUM_THREADS=4 timeout 150 \
      python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_decode_candidates_gpu.py > $A/lkd$h-tests-$i.log 2>&1 &
  done
done
wait
for f in $A/lk-tests-*.log $A/lks-tests-*.log $A/lkvl-tests-*.log $A/lkd*-tests-*.log; do echo "$(basename $f): $(tail -1 $f)"; grep -E "^(FAILED|ERROR)" $f | head -4; done
for r in lk lks lkvl lkd64 lkd128; do
  if ls $A/verified-$r/*.running > /dev/null 2>&1; then echo "$r records NOT merged: a process did not finish"
  else python3 -m cubinforge.bench.verified --merge $A/verified-$r/*.json --out $A/verified-$r.json; fi
done
echo "== inference decode, back to back and isolated ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 150 python3 -m cubinforge.bench.inference --isolated --json $A/inference.json --cases \
  paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
  > $A/inference.log 2>&1
echo "rc=$?" >> $A/inference.log; grep -v "Warning\|exe_args" $A/inference.log | tail -24
echo "done $(date +%T)"
} 2>&1 | tee $OUT/a1.txt
tar czf $OUT/a1.tgz -C /tmp a1
