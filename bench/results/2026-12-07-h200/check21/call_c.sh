#!/usr/bin/env bash
# Session 21, call C (right after call B, FA4 unpacked there): issue 10's prefill grid, bf16 and
# fp16 at head dims 64 / 128 / 256 (the FA3 grid's 36 cells per dtype: batch x seqlen = 16k,
# hidden 2048, 512-16k, both masks) beside cuDNN and FA4 in one process (last run in full at
# check14/f1, commit ca75ae7), then the host cost per call (ours, cuDNN, FA4, the driver floor).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check21/call_c.sh
# carry: none (the homes and FA4 are on the warm machine)
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
C=/tmp/c1; rm -rf $C; mkdir -p $C
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $C/gpu.txt 2>&1; cat $C/gpu.txt
test -d /tmp/site/flash_attn || echo "FA4 is not unpacked here: the machine went back after call B"
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
echo "== prefill grid ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout ${GRID_S:-470} python3 -m bench --out $C/grid --skip correctness,cold_start --no-plots \
  --dtype bf16,fp16 --head-dims ${HEAD_DIMS:-64,128,256} --backends ours,cudnn,fa4 \
  --deadline $(( ${GRID_S:-470} - 50 )) --hard-timeout $(( ${GRID_S:-470} - 15 )) > $C/grid.log 2>&1
echo "rc=$?" >> $C/grid.log; grep -v "Warning\|exe_args" $C/grid.log | tail -20
echo "== host cost ($(date +%T))"
CUBINFORGE_HOME=$PWD/.cubinforge timeout ${HOST_S:-90} python3 -m cubinforge.bench.host_overhead --iters 2000 --repeats 5 \
  --out $C/host_overhead.json > $C/host_overhead.log 2>&1
echo "rc=$?" >> $C/host_overhead.log; grep -v "Warning\|exe_args" $C/host_overhead.log | tail -22
echo "done $(date +%T)"
} 2>&1 | tee $OUT/c1.txt
tar czf $OUT/c1.tgz -C /tmp c1
