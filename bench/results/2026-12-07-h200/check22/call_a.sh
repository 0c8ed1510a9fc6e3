#!/usr/bin/env bash
# Session 22's plan, call A (a fresh machine; written with no device lent, so not run yet): the
# registry homes unpacked, FA4's first half parked for call B, then
#   1. the float64 GPU tests of bench.ab's late-k-release candidates (K released after the
#      softmax, FwdConfig.late_k_release; bench/results/2026-12-07-cpu/late-k-release.md):
#      tests/gpu/test_late_k_release_gpu.py on the 13 dense pairs (.cubinforge-ab-latek) and the 4
#      short causal ones (.cubinforge-ab-latek-short),
#      tests/gpu/test_decode_candidates_gpu.py on the 8 decode pairs (.cubinforge-ab-latek-dec64 /
#      -dec128), then tests/gpu/test_varlen_persist_gpu.py on the 9 varlen candidates
#      (.cubinforge-ab-latek-vl; CUBINFORGE_AB_LABEL leaves out its controls, the shipped cubins),
#      in shards, with verification records;
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
save() { tar czf $OUT/a1.tgz -C /tmp a1; }  # after each step: a call past its limit keeps what ran
gpu_tests() {  # gpu_tests TAG HOME SHARDS SECONDS FILE [LABEL]: a test file pinned to an A/B home, in shards
  local tag=$1 home=$2 n=$3 secs=$4 file=$5 label=${6:-}
  for ((i = 0; i < n; i++)); do
    CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/$home CUBINFORGE_AB_LABEL=$label CUBINFORGE_TEST_SHARD=$i/$n \
      CUBINFORGE_VERIFIED_OUT=$A/verified-$tag/tests.json OMP_NUM_THREADS=2 timeout $secs \
      python3 -m pytest -q -rfE -m gpu -p no:cacheprovider $file > $A/$tag-tests-$i.log 2>&1 &
  done
}
echo "== late-k-release float64 tests: dense, short, decode ($(date +%T))"
gpu_tests lk .cubinforge-ab-latek 4 120 tests/gpu/test_late_k_release_gpu.py
gpu_tests lks .cubinforge-ab-latek-short 2 120 tests/gpu/test_late_k_release_gpu.py
gpu_tests lkd64 .cubinforge-ab-latek-dec64 2 120 tests/gpu/test_decode_candidates_gpu.py
gpu_tests lkd128 .cubinforge-ab-latek-dec128 2 120 tests/gpu/test_decode_candidates_gpu.py
wait
echo "== late-k-release float64 tests: varlen, the candidates only ($(date +%T))"
gpu_tests lkvl .cubinforge-ab-latek-vl 6 150 tests/gpu/test_varlen_persist_gpu.py late-k-release
wait
for f in $A/*-tests-*.log; do echo "$(basename $f): $(tail -1 $f)"; grep -E "^(FAILED|ERROR)" $f | head -4; done
for r in lk lks lkd64 lkd128 lkvl; do
  if ls $A/verified-$r/*.running > /dev/null 2>&1; then echo "$r records NOT merged: a process did not finish"
  else python3 -m cubinforge.bench.verified --merge $A/verified-$r/*.json --out $A/verified-$r.json; fi
done
save
echo "== inference decode, back to back and isolated ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 120 python3 -m cubinforge.bench.inference --isolated --json $A/inference.json --cases \
  paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
  > $A/inference.log 2>&1
echo "rc=$?" >> $A/inference.log; grep -v "Warning\|exe_args" $A/inference.log | tail -24
echo "done $(date +%T)"
} 2>&1 | tee $OUT/a1.txt
tar czf $OUT/a1.tgz -C /tmp a1
