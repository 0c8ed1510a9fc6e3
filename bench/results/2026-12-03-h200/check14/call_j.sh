#!/usr/bin/env bash
# Session 14, call J (right after call I): FA4 unpacked; the prefill grid's hd192 cells, bf16
# and fp16, beside cuDNN and FA4, on the final registry.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_j.sh
# carry: .cubinforge .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/j1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 300 python3 -m bench --out $O/grid --skip correctness,cold_start --no-plots --dtype bf16,fp16 \
  --head-dims 192 --backends ours,cudnn,fa4 --deadline 240 --hard-timeout 280 > $O/grid.log 2>&1
echo "rc=$?" >> $O/grid.log; grep "hd192" $O/grid.log | tail -24
