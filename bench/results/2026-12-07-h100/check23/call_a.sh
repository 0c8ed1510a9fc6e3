#!/usr/bin/env bash
# Session 23, call A (a fresh machine): the registry homes unpacked, FA4's first half parked for
# call B, then the float64 GPU tests of bench.ab's k-stages set (the shipped 192 x 128 hd64 forms
# with three and four K/V stages; the controls are sha256-equal to the default set's) with
# verification records.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h100/check23/call_a.sh
# carry: .stage_fa4x .stage_homes
#   (HOMES=".cubinforge .cubinforge-ab-kstages .cubinforge-ab-latek-fp8" bash bench/results/2026-12-07-h200/check20/pack_homes.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
A=/tmp/a2; rm -rf $A; mkdir -p $A
{
rm -rf .cubinforge .cubinforge-ab-kstages .cubinforge-ab-latek-fp8
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
bash bench/stage_fa4.sh park || echo "FA4 park failed"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $A/gpu.txt 2>&1
cat $A/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
echo "== k-stages float64 tests ($(date +%T))"
for ((i = 0; i < 4; i++)); do
  CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-kstages CUBINFORGE_TEST_SHARD=$i/4 \
    CUBINFORGE_VERIFIED_OUT=$A/verified-ks/tests.json OMP_NUM_THREADS=2 timeout 150 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_dense_candidates_gpu.py > $A/ks-tests-$i.log 2>&1 &
done
wait
for f in $A/*-tests-*.log; do echo "$(basename $f): $(tail -1 $f)"; grep -E "^(FAILED|ERROR)" $f | head -4; done
if ls $A/verified-ks/*.running > /dev/null 2>&1; then echo "records NOT merged: a process did not finish"
else python3 -m cubinforge.bench.verified --merge $A/verified-ks/*.json --out $A/verified-ks.json; fi
echo "done $(date +%T)"
} 2>&1 | tee $OUT/a2.txt
tar czf $OUT/a2.tgz -C /tmp a2
