#!/usr/bin/env bash
# Session 22's plan, call B (right after call A on the same warm machine: the homes and FA4's
# parked first half are there). FA4 unpacked; then the late-k-release A/B, each candidate beside
# its control (the shipped form, sha256-equal) and the anchors in one process:
#   1. bench.ab run on the 12 dense pairs at 2k / 8k / 16k beside cuDNN and FA4 (the (192, 128)
#      pair is a model variant: step 2);
#   2. bench/model_variants.py --ab-home: the (192, 128) causal pair on issue 12's case beside FA4;
#   3. bench.ab run on the 4 short causal pairs (the forms that serve up to 3,072 rows, and hd256
#      lpt) at 512 / 1k / 2k, where issue 10's 512-row cells sit at 0.86-0.93 of cuDNN.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check22/call_b.sh
# carry: .stage_fa4y
# The varlen and decode pairs are call B2's (check22/call_b2.sh), on the same warm machine.
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
B=/tmp/b2; rm -rf $B; mkdir -p $B
save() { tar czf $OUT/b2.tgz -C /tmp b2; }  # after each step: a call past its limit keeps what ran
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $B/gpu.txt 2>&1; cat $B/gpu.txt
test -d .cubinforge-ab-latek || echo "the homes are gone: the machine went back after call A"
bash bench/stage_fa4.sh unpack $B/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== dense A/B ($(date +%T))"
timeout ${AB_S:-260} python3 -m bench.ab run --home .cubinforge-ab-latek --seqlens 2048,8192,16384 --out $B/ab-latek \
  > $B/ab-latek.log 2>&1
echo "rc=$?" >> $B/ab-latek.log; grep -v "Warning\|exe_args" $B/ab-latek.log | tail -45
save
echo "== (192, 128) A/B ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 120 python3 bench/model_variants.py --ab-home .cubinforge-ab-latek --iters 30 \
  --out $B/model_variants_ab.json > $B/model_variants_ab.log 2>&1
echo "rc=$?" >> $B/model_variants_ab.log; grep -v "Warning\|exe_args" $B/model_variants_ab.log | tail -8
save
echo "== short causal A/B ($(date +%T))"
timeout ${SHORT_S:-130} python3 -m bench.ab run --home .cubinforge-ab-latek-short --seqlens 512,1024,2048 \
  --out $B/ab-latek-short > $B/ab-latek-short.log 2>&1
echo "rc=$?" >> $B/ab-latek-short.log; grep -v "Warning\|exe_args" $B/ab-latek-short.log | tail -26
save
echo "done $(date +%T)"
} 2>&1 | tee $OUT/b2.txt
tar czf $OUT/b2.tgz -C /tmp b2
