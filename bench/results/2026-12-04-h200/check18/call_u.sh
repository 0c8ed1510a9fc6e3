#!/usr/bin/env bash
# Session 18, call U (right after call T on the same warm machine, FA4's part 1 parked there):
# FA4 unpacked, then bench.inference on the promoted registry beside FA4 in one process: the
# decode cells and every varlen case, packed hd64 / hd128 / (192, 128) / hd256, both masks,
# paged chunked prefill causal and non-causal, and the 1,024-key window.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check18/call_u.sh
# carry: .stage_fa4y .cubinforge
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/u1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 420 python3 -m cubinforge.bench.inference --json $O/inference.json > $O/inference.log 2>&1
echo "rc=$?" >> $O/inference.log
grep -v "Warning\|exe_args" $O/inference.log | tail -45
