#!/usr/bin/env bash
# Session 21, call A (a fresh machine): the registry homes unpacked (check20/pack_homes.sh with
# HOMES=".cubinforge .cubinforge-ab-dec64"), FA4's first half parked for call B; then
#   1. the float64 GPU tests of every bench.ab decode-hd64 candidate, each pinned
#      (tests/gpu/test_decode_candidates_gpu.py, 2 shards), with verification records;
#   2. bench/decode_ab.py --head-dim 64: each candidate beside the shipped hd64 decode forms,
#      cuDNN and FA2 on the 12 bf16 hd64 --decode cells (check20/c1 had the non-causal q16 / q64
#      cells at 0.957-0.978x cuDNN on an H100); FA4 is parked, not importable, in this call.
# The logs come back as one archive (a1.tgz) and the summary as a1.txt.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check21/call_a.sh
# carry: .stage_fa4x .stage_homes
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
A=/tmp/a1; rm -rf $A; mkdir -p $A
{
rm -rf .cubinforge .cubinforge-ab-dec64
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
bash bench/stage_fa4.sh park || echo "FA4 park failed"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $A/gpu.txt 2>&1
cat $A/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
echo "== decode-hd64 float64 tests ($(date +%T))"
for i in 0 1; do
  CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-dec64 CUBINFORGE_TEST_SHARD=$i/2 \
    CUBINFORGE_VERIFIED_OUT=$A/verified-dec64/tests.json OMP_NUM_THREADS=8 timeout 150 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_decode_candidates_gpu.py > $A/dec64-tests-$i.log 2>&1 &
done
wait
for i in 0 1; do echo "dec64-tests-$i: $(tail -1 $A/dec64-tests-$i.log)"; grep -E "^(FAILED|ERROR)" $A/dec64-tests-$i.log | head -6; done
if ls $A/verified-dec64/*.running > /dev/null 2>&1; then echo "dec64 records NOT merged: a process did not finish"
else python3 -m cubinforge.bench.verified --merge $A/verified-dec64/*.json --out $A/verified-dec64.json; fi
echo "== decode_ab --head-dim 64 ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout ${DEC_S:-200} python3 -m cubinforge.bench.decode_ab --head-dim 64 \
  --ab-home .cubinforge-ab-dec64 --splits 0,1 --ab-splits 0,1 --iters 20 --json $A/decode_ab_hd64.json \
  > $A/decode_ab_hd64.log 2>&1
echo "rc=$?" >> $A/decode_ab_hd64.log
grep -v "Warning\|exe_args" $A/decode_ab_hd64.log | tail -60
echo "done $(date +%T)"
} 2>&1 | tee $OUT/a1.txt
tar czf $OUT/a1.tgz -C /tmp a1
