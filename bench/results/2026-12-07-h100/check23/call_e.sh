#!/usr/bin/env bash
# Session 23's plan, call E (right after call D on the same warm machine: the homes and FA4's
# parked first half are there). FA4 unpacked; then the grid's cells under the best anchor in
# check23/c1 (hd64 at 2k-16k, both dtypes and masks; hd128 / hd256 causal at 512) beside cuDNN and
# FA4, timed twice in one call: in turns (as every grid so far) and with --interleaved. Where the
# two disagree, or the interleaved rounds agree more closely, the long cells' ratios were partly
# timing noise. On an H200 only, issue 11's decode cases isolated beside FA4 as well.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h100/check23/call_e.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
E=/tmp/e1; rm -rf $E; mkdir -p $E
save() { tar czf $OUT/e1.tgz -C /tmp e1; }
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $E/gpu.txt 2>&1; cat $E/gpu.txt
test -d .cubinforge || echo "the homes are gone: the machine went back after call D"
bash bench/stage_fa4.sh unpack $E/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
CELLS='*-hd64-s2048-*,*-hd64-s4096-*,*-hd64-s8192-*,*-hd64-s16384-*,*-hd128-s512-causal,*-hd256-s512-causal'
for mode in turns interleaved; do
  echo "== grid cells, $mode ($(date +%T))"
  flag=$([ $mode = interleaved ] && echo --interleaved)
  CUBINFORGE_HOME=$PWD/.cubinforge timeout 200 python3 -m bench --out $E/grid-$mode --skip correctness,cold_start --no-plots \
    --dtype bf16,fp16 --cells "$CELLS" --backends ours,cudnn,fa4 --seed 23 $flag \
    --deadline 160 --hard-timeout 190 > $E/grid-$mode.log 2>&1
  echo "rc=$?" >> $E/grid-$mode.log; grep -v "Warning\|exe_args" $E/grid-$mode.log | tail -24
  save
done
if grep -q H200 $E/gpu.txt; then  # issue 11's 4.4 TB/s targets were set on an H200, by this method
  echo "== inference decode, isolated, beside FA4 ($(date +%T))"
  CUBINFORGE_HOME=$PWD/.cubinforge timeout 120 python3 -m cubinforge.bench.inference --isolated --json $E/inference.json --cases \
    paged_decode_b64_k4096_p256,paged_decode_b64_k4096_p16,paged_decode_b8_k32768_p256,paged_decode_b128_k1024_p64,dense_decode_b8_k32768,gqa_decode_b32_k8192_h64_8,spec_decode_b32_q4_k8192_h32_8,paged_spec_decode_b32_q4_k8192_p256 \
    > $E/inference.log 2>&1
  echo "rc=$?" >> $E/inference.log; grep -v "Warning\|exe_args" $E/inference.log | tail -24
  save
fi
echo "done $(date +%T)"
} 2>&1 | tee $OUT/e1.txt
tar czf $OUT/e1.tgz -C /tmp e1
