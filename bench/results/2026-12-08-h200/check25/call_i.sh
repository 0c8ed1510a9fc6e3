#!/usr/bin/env bash
# Written in session 24 (no machine came for it), extended in session 25 (no machine lent).
# Call I (right after call H on the same warm machine: the homes and FA4's parked first half are
# there). FA4 unpacked; then, with the benches now timing ours and the anchors side by side with
# their calls interleaved (bench.timing.interleaved_rounds / rounds_of / time_isolated_each;
# first GPU run of those paths):
#   0. bench.ab run on the try-wait home (fp16 / bf16 hd64 with K and V waits tried once first;
#      fp16 hd128-256 non-causal pinned) at 2k / 8k / 16k beside cuDNN and FA4, 5 rounds; call H
#      ran their float64 tests;
#   1. bench.inference: issue 11's varlen, chunked-prefill, decode and e4m3 decode cases beside
#      FA4 (--isolated on an H200: the decode cases also timed by the anchors' method);
#   2. bench/model_variants.py: issue 12's cells beside FA4;
#   3. the grid's hd64 cells, bf16 + fp16, beside cuDNN and FA4 (the promoted third K/V stage of
#      hd64 causal at 192 x 128 in the full bench).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-08-h200/check25/call_i.sh
# carry: .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
I=/tmp/i1; rm -rf $I; mkdir -p $I
save() { tar czf $OUT/i1.tgz -C /tmp i1; }
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $I/gpu.txt 2>&1; cat $I/gpu.txt
test -d .cubinforge || echo "the homes are gone: the machine went back after call H"
bash bench/stage_fa4.sh unpack $I/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
iso=$(grep -q H200 $I/gpu.txt && echo --isolated)
echo "== try-wait + fp16-pin A/B beside cuDNN and FA4 ($(date +%T))"
timeout 120 python3 -m bench.ab run --home .cubinforge-ab-trywait --seqlens 2048,8192,16384 --rounds 5 \
  --out $I/ab-trywait > $I/ab-trywait.log 2>&1
echo "rc=$?" >> $I/ab-trywait.log; grep -v "Warning\|exe_args" $I/ab-trywait.log | tail -34
save
echo "== inference $iso ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 170 python3 -m cubinforge.bench.inference $iso --json $I/inference.json > $I/inference.log 2>&1
echo "rc=$?" >> $I/inference.log
grep -v "Warning\|exe_args\|^ \|Traceback\|File " $I/inference.log | tail -60
save
echo "== model variants ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 100 python3 bench/model_variants.py --out $I/model_variants.json > $I/model_variants.log 2>&1
echo "rc=$?" >> $I/model_variants.log
grep -v "Warning\|exe_args" $I/model_variants.log | tail -16
save
echo "== grid hd64 ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout 150 python3 -m bench --out $I/grid-hd64 --skip correctness,cold_start --no-plots \
  --dtype bf16,fp16 --head-dims 64 --backends ours,cudnn,fa4 --seed 24 --deadline 120 --hard-timeout 140 > $I/grid-hd64.log 2>&1
echo "rc=$?" >> $I/grid-hd64.log; grep -v "Warning\|exe_args" $I/grid-hd64.log | tail -28
echo "done $(date +%T)"
} 2>&1 | tee $OUT/i1.txt
save
