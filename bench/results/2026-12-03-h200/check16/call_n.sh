#!/usr/bin/env bash
# Session 16, call N (right after call M, on the same warm machine): FA4 unpacked; ncu on the
# 16-sequence packed varlen case, ours beside FA4, at hd256 and (192, 128) causal (the widest
# gaps left: 0.92x / 0.95x FA4 in l1); then the inference grid beside FA4 on M's registry.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_n.sh
# carry: .stage_fa4y .cubinforge
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/n1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
for dims in "256 256" "192 128"; do
  set -- $dims
  timeout 150 python3 -m cubinforge.bench.ncu --varlen --head-dim $1 --head-dim-v $2 --causal 1 \
    --out $O/ncu-varlen-hd$1-dv$2 > $O/ncu-varlen-hd$1-dv$2.log 2>&1
  tail -2 $O/ncu-varlen-hd$1-dv$2.log
done
timeout 300 python3 -m cubinforge.bench.inference --json $O/inference.json > $O/inference.log 2>&1
echo "rc=$?" >> $O/inference.log
grep -v "Warning\|exe_args" $O/inference.log | tail -30
