#!/usr/bin/env bash
# Written in session 24 (no machine came for it), extended in session 25 (no machine lent).
# Call H (a fresh machine): the homes unpacked (the default set with hd64 causal's third K/V
# stage promoted; bench.ab's short-h100 set; try-wait with fp16-pin in one home); FA4's first
# half parked for call I when carried (NO_FA4=1 where the session's device time is short: call I
# will not follow); then
#   1. the bench timers' GPU tests (time_interleaved, the rounds helper's callers);
#   2. the float64 GPU tests of the short-h100, try-wait and fp16-pin candidates
#      (tests/gpu/test_dense_candidates_gpu.py), with verification records;
#   3. bench.ab run on short-h100 at 512 / 1k / 2k beside cuDNN (the best anchor on those cells),
#      calls interleaved, 5 rounds;
#   4. with NO_FA4=1 only (call I will not follow): call I's try-wait / fp16-pin A/B beside
#      cuDNN alone, and a smoke run of bench.inference's interleaved paths.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-08-h200/check25/call_h.sh
# carry: .stage_fa4x .stage_homes (NO_FA4=1: .stage_homes alone), packed by
#   HOMES=".cubinforge .cubinforge-ab-shorth100 .cubinforge-ab-trywait" \
#     bash bench/results/2026-12-07-h200/check20/pack_homes.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
H=/tmp/h1; rm -rf $H; mkdir -p $H
save() { tar czf $OUT/h1.tgz -C /tmp h1; }
{
rm -rf .cubinforge .cubinforge-ab-shorth100 .cubinforge-ab-trywait
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
[ -n "${NO_FA4:-}" ] || bash bench/stage_fa4.sh park || echo "FA4 park failed"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $H/gpu.txt 2>&1
cat $H/gpu.txt; echo "commit $CUBINFORGE_COMMIT"
if [ -z "${NO_FA4:-}" ]; then  # (check24/d1 ran the timer's own tests already)
  echo "== bench timer GPU tests ($(date +%T))"
  timeout 60 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_bench_gpu.py > $H/timer-tests.log 2>&1
  tail -1 $H/timer-tests.log; grep -E "^(FAILED|ERROR)" $H/timer-tests.log | head -4
fi
for set in shorth100 trywait; do
  echo "== $set float64 tests ($(date +%T))"
  for ((i = 0; i < 4; i++)); do
    CUBINFORGE_HOME=$PWD/.cubinforge CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-$set CUBINFORGE_TEST_SHARD=$i/4 \
      CUBINFORGE_VERIFIED_OUT=$H/verified-$set/tests.json OMP_NUM_THREADS=2 timeout 100 \
      python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_dense_candidates_gpu.py > $H/$set-tests-$i.log 2>&1 &
  done
  wait
  for f in $H/$set-tests-*.log; do echo "$(basename $f): $(tail -1 $f)"; grep -E "^(FAILED|ERROR)" $f | head -4; done
  if ls $H/verified-$set/*.running > /dev/null 2>&1; then echo "records NOT merged: a process did not finish"
  else python3 -m cubinforge.bench.verified --merge $H/verified-$set/*.json --out $H/verified-$set.json; fi
done
save
echo "== short-h100 A/B, calls interleaved ($(date +%T))"
timeout 170 python3 -m bench.ab run --home .cubinforge-ab-shorth100 --seqlens ${AB_SEQLENS:-512,1024,2048} --rounds ${AB_ROUNDS:-5} \
  --out $H/ab-shorth100 > $H/ab-shorth100.log 2>&1
echo "rc=$?" >> $H/ab-shorth100.log; grep -v "Warning\|exe_args" $H/ab-shorth100.log | tail -40
save
if [ -n "${NO_FA4:-}" ]; then  # call I will not follow: its A/B beside cuDNN alone, and a smoke run
  echo "== try-wait + fp16-pin A/B beside cuDNN ($(date +%T))"  # candidate / control is the verdict
  timeout 100 python3 -m bench.ab run --home .cubinforge-ab-trywait --seqlens 2048,8192,16384 --rounds 5 \
    --out $H/ab-trywait > $H/ab-trywait.log 2>&1
  echo "rc=$?" >> $H/ab-trywait.log; grep -v "Warning\|exe_args" $H/ab-trywait.log | tail -34
  save
  # the benches' interleaved paths on the GPU once, ours only (no FA4 here)
  echo "== inference, two cases, ours only ($(date +%T))"
  CUBINFORGE_HOME=$PWD/.cubinforge timeout 60 python3 -m cubinforge.bench.inference --json $H/inference.json \
    --cases paged_decode_b64_k4096_p256,varlen_prefill_16seq_17850tok_h16_causal,e4m3_paged_decode_b64_k4096_p256 \
    > $H/inference.log 2>&1
  echo "rc=$?" >> $H/inference.log; grep -v "Warning\|exe_args" $H/inference.log | tail -20
fi
echo "done $(date +%T)"
} 2>&1 | tee $OUT/h1.txt
save
