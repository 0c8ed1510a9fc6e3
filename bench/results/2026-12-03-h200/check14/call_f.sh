#!/usr/bin/env bash
# Session 14, call F (right after call E, same warm machine): FA4 unpacked; the main bench's
# prefill grid, bf16 and fp16, five head dims, beside cuDNN and FA4, on call E's registry.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_f.sh
# carry: .cubinforge .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/f1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 560 python3 -m bench --out $O/grid --skip correctness,cold_start --no-plots --dtype bf16,fp16 \
  --head-dims ${HEAD_DIMS:-64,96,128,192,256} --backends ours,cudnn,fa4 --deadline 500 --hard-timeout 550 > $O/grid.log 2>&1
echo "rc=$?" >> $O/grid.log; tail -15 $O/grid.log
tar czf $OUT/check14-f.tar.gz -C $OUT f1
