#!/usr/bin/env bash
# Session 22's plan, call B2 (right after call B on the same warm machine: the homes and FA4 are
# there). The late-k-release A/B of the inference forms, each candidate beside its control (the
# shipped form, sha256-equal) and the anchors in one process:
#   1. bench.inference --ab-home on the 9 varlen pairs (the 16-sequence case; paged: chunked
#      prefill) beside FA4;
#   2. bench/decode_ab.py --ab-home on the decode pairs: hd64's --decode cells and hd128's with
#      the GQA and speculative decode cases (issue 11's 4.4 TB/s ones), beside cuDNN, FA2, FA4;
#   3. with FP8=1 (then ~560 s in all: leave a step out or give it a call of its own),
#      bench/fp8.py --ab-home on the 6 dense e4m3 pairs (issue 13, blocked: its
#      gate is the error study against the float64 reference; TFLOPS at 16k).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check22/call_b2.sh
# carry: none
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
B=/tmp/b3; rm -rf $B; mkdir -p $B
save() { tar czf $OUT/b3.tgz -C /tmp b3; }  # after each step: a call past its limit keeps what ran
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $B/gpu.txt 2>&1; cat $B/gpu.txt
test -d /tmp/site/flash_attn || echo "FA4 is not unpacked here: the machine went back after call B"
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== varlen A/B ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-latek-vl --iters 20 \
  > $B/varlen-ab.log 2>&1
echo "rc=$?" >> $B/varlen-ab.log; grep -v "Warning\|exe_args" $B/varlen-ab.log | tail -30
save
for h in 64 128; do
  echo "== decode A/B hd$h ($(date +%T))"
  CUBINFORGE_HOME=$PWD/.cubinforge timeout 120 python3 -m cubinforge.bench.decode_ab --head-dim $h \
    --ab-home .cubinforge-ab-latek-dec$h --splits 0 --ab-splits 0 --iters 20 --json $B/decode_ab_hd$h.json \
    > $B/decode_ab_hd$h.log 2>&1
  echo "rc=$?" >> $B/decode_ab_hd$h.log; grep -v "Warning\|exe_args" $B/decode_ab_hd$h.log | grep -v "^  entry" | tail -60
save
done
if [ -n "${FP8:-}" ]; then
  echo "== e4m3 A/B ($(date +%T))"
  CUBINFORGE_HOME=$PWD/.cubinforge timeout ${FP8_S:-110} python3 -m bench.fp8 --ab-home .cubinforge-ab-latek-fp8 \
    --json $B/fp8_ab.json > $B/fp8_ab.log 2>&1
  echo "rc=$?" >> $B/fp8_ab.log; grep -v "Warning\|exe_args" $B/fp8_ab.log | tail -30
save
fi
echo "done $(date +%T)"
} 2>&1 | tee $OUT/b3.txt
tar czf $OUT/b3.tgz -C /tmp b3
