#!/usr/bin/env bash
# Session 14, call I: FA4's part 1 parked for call J; the GPU tests of the hd192 forms on the
# final registry (hd192 causal lpt now takes the conditional rescale): every hd192 variant
# against the float64 reference, the sectioned walk's two-section test.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_i.sh
# carry: .cubinforge .stage_fa4x
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/i1; mkdir -p $O
bash bench/stage_fa4.sh park || echo "park failed"
timeout 200 python3 -m pytest -q -rfE -m gpu tests/gpu/test_runtime_gpu.py tests/gpu/test_variants_gpu.py -k "hd192" \
  > $O/gpu-hd192.log 2>&1; echo "rc=$?" >> $O/gpu-hd192.log
tail -6 $O/gpu-hd192.log
