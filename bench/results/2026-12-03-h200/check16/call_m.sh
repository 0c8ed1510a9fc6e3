#!/usr/bin/env bash
# Session 16, call M (a fresh machine): FA4's part 1 parked for call N; on the registry with
# l1's promotion (bf16 hd256 causal varlen at 128 x 64, default 108 + SET=fp8 31): the varlen
# float64 GPU tests (every packed form, the persistent tests on the shipped walk's forms), then
# the C++ loader against Python.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_m.sh
# carry: .stage_fa4x .cubinforge
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} CUBINFORGE_AB_HOME=$PWD/.cubinforge
O=$OUT/m1; mkdir -p $O
bash bench/stage_fa4.sh park
for i in 0 1 2 3; do
  CUBINFORGE_TEST_SHARD=$i/4 OMP_NUM_THREADS=3 timeout 240 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/gpu/test_varlen_gpu.py tests/gpu/test_varlen_persist_gpu.py > $O/varlen-$i.log 2>&1 &
done
wait
for i in 0 1 2 3; do echo "varlen-$i: $(tail -1 $O/varlen-$i.log)"; grep -E "^(FAILED|ERROR)" $O/varlen-$i.log | head -3; done
PART=cpp OUT=$O bash bench/h200_check.sh 2>&1 | tail -3
