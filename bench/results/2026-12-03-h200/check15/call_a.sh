#!/usr/bin/env bash
# Session 15, call A (a fresh machine): FA4's part 1 parked for call B; the varlen GPU tests on
# the default registry with packed (192, 128) and hd256 (spec.VARLEN_WIDE: 108 variants), and
# the host cost per call, plan and floor in turn three times (b1 of check14 had plan 6.33 us
# against a floor of 3.75; the mocked driver says our Python is ~0.4 us of it).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check15/call_a.sh
# carry: .stage_fa4x .cubinforge-new
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} CUBINFORGE_HOME=$PWD/.cubinforge-new  # renamed .cubinforge after call C
O=$OUT/a1; mkdir -p $O
bash bench/stage_fa4.sh park
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
timeout 300 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -o faulthandler_timeout=90 --durations=8 \
  tests/gpu/test_varlen_gpu.py tests/gpu/test_varlen_persist_gpu.py > $O/gpu-varlen.log 2>&1
echo "rc=$?" >> $O/gpu-varlen.log
tail -15 $O/gpu-varlen.log
for i in 1 2 3; do
  timeout 60 python3 -m cubinforge.bench.host_overhead --kinds plan,floor,pyref --iters 2000 --repeats 5 \
    --out $O/host_overhead_$i.json > $O/host-overhead-$i.log 2>&1
  grep -E "plan|floor|pyref" $O/host-overhead-$i.log
done
