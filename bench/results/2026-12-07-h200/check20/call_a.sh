#!/usr/bin/env bash
# Session 20, call A (a fresh machine): the registry homes unpacked (pack_homes.sh), FA4's first
# half parked for call B; then
#   1. the float64 GPU tests of every bench.ab varlen-walk-rest candidate (check19's call C, its
#      first half: tests/gpu/test_varlen_persist_gpu.py pinned to .cubinforge-ab-wr, 4 shards),
#      with verification records of their own;
#   2. every GPU test on the default + SET=fp8 registry, 8 shards, with the verification log
#      (check18's call T, whose archive was lost);
#   3. with CPP=1, the C++ loader against Python (left out in session 20 to save device time: the
#      runtime and the C++ loader are unchanged since check18's 56 agree).
# The device returns at most 8 files: the logs come back as one archive, a1.tgz, and the
# summary as a1.txt.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check20/call_a.sh
# carry: .stage_fa4x .stage_homes
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
A=/tmp/a1; rm -rf $A; mkdir -p $A
{
rm -rf .cubinforge .cubinforge-inf .cubinforge-ab-wr
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
bash bench/stage_fa4.sh park || echo "FA4 park failed"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $A/gpu.txt 2>&1
cat $A/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
echo "== varlen-walk-rest float64 tests ($(date +%T))"
for i in 0 1 2 3; do
  CUBINFORGE_HOME=$PWD/.cubinforge-inf CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-wr CUBINFORGE_TEST_SHARD=$i/4 \
    CUBINFORGE_VERIFIED_OUT=$A/verified-wr/tests.json OMP_NUM_THREADS=4 timeout 200 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_varlen_persist_gpu.py > $A/wr-tests-$i.log 2>&1 &
done
wait
for i in 0 1 2 3; do echo "wr-tests-$i: $(tail -1 $A/wr-tests-$i.log)"; grep -E "^(FAILED|ERROR)" $A/wr-tests-$i.log | head -4; done
if ls $A/verified-wr/*.running > /dev/null 2>&1; then echo "wr records NOT merged: a process did not finish"
else PYTHONPATH=$PWD python3 -m cubinforge.bench.verified --merge $A/verified-wr/*.json --out $A/verified-wr.json; fi
echo "== the whole GPU suite ($(date +%T))"
export CUBINFORGE_AB_HOME=$PWD/.cubinforge
PART=tests OUT=$A GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=300 SKIP="fp8 fp8-ab" \
  bash bench/h200_check.sh 2>&1 | tail -24
[ -n "${CPP:-}" ] && PART=cpp OUT=$A bash bench/h200_check.sh 2>&1 | tail -4
for f in $A/verified.json $A/verified-wr.json; do
  python3 -c "import json, sys; r = json.load(open(sys.argv[1]))['records']; \
print(sys.argv[1], len(r), 'records,', sum(x['result'] == 'failed' for x in r), 'failed')" $f
done
echo "done $(date +%T)"
} 2>&1 | tee $OUT/a1.txt
tar czf $OUT/a1.tgz -C /tmp a1
