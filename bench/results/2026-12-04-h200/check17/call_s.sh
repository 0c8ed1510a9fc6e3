#!/usr/bin/env bash
# Prepared in session 17 (2026-12-04, not run yet): call S, right after call R on the same warm
# machine. FA4 unpacked; bench.inference --ab-home on varlen-dynamic-2: each candidate beside
# the shipped form (one tile per CTA) and FA4 in alternating rounds, the paged ones on the paged
# chunked prefill case (8 x 2048 new tokens against 8192 cached, page 256, 32/8 heads), hd64 on
# the 16-sequence packed case; the same for varlen-wide-5; then the inference grid's varlen
# cells, the anchors rerun.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check17/call_s.sh
# carry: .stage_fa4y .cubinforge .cubinforge-ab-dyn2 .cubinforge-ab-vw5
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/s1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
for set in dyn2 vw5; do
  timeout 240 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-$set --iters 20 > $O/ab-$set.log 2>&1
  echo "rc=$?" >> $O/ab-$set.log
  grep "^|" $O/ab-$set.log; tail -2 $O/ab-$set.log
done
timeout 200 python3 -m cubinforge.bench.inference --json $O/inference.json \
  --cases paged_chunked_prefill_r8_new2048_ctx8192_p256,varlen_prefill_16seq_17850tok_h16,varlen_prefill_16seq_17850tok_h16_causal \
  > $O/inference.log 2>&1
echo "rc=$?" >> $O/inference.log
tail -8 $O/inference.log
