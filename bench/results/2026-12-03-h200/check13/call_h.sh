#!/usr/bin/env bash
# Session 13, call H: after d1's branch was taken out (the sectioned forms' cubins are c1's
# again), the sectioned walk's several-section GPU test on the rebuilt default registry (the
# rest of the GPU suite ran in e1 on the d1 registry, whose other cubins are these), then the prefill grid's causal cells at hd64 / hd96 / hd128, 512-2k keys, bf16,
# beside cuDNN (FA4 not staged in this call; f1 has it on every cell the same day).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check13/call_h.sh
# carry: .cubinforge
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
mkdir -p $OUT/h1
timeout 60 python3 -m pytest -q -rA -m gpu -p no:cacheprovider -k sectioned tests/gpu/test_runtime_gpu.py \
  > $OUT/h1/sectioned.log 2>&1; grep -E "PASSED|FAILED|SKIPPED|passed|failed" $OUT/h1/sectioned.log | tail -8
timeout 75 python3 -m bench --out $OUT/h1/grid --skip correctness,cold_start --no-plots --dtype bf16 \
  --head-dims 64,96,128 --causal 1 --seqlens 512,1k,2k --backends ours,cudnn --deadline 55 --hard-timeout 70 \
  > $OUT/h1/grid.log 2>&1
echo "rc=$?" >> $OUT/h1/grid.log; grep -E "causal|rc=" $OUT/h1/grid.log | tail -40
tar czf $OUT/check13-h.tar.gz -C $OUT h1
