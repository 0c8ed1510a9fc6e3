#!/usr/bin/env bash
# Session 16, call O (a fresh machine): FA4's part 1 parked for call P; the float64 GPU tests of
# every bench.ab varlen-dynamic candidate pinned (the shipped varlen forms, bf16 and fp16, with
# the tile counter), the new replay test among them (one plan run four times, poisoned before
# each run).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_o.sh
# carry: .stage_fa4x .cubinforge .cubinforge-ab-dyn
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-dyn
O=$OUT/o1; mkdir -p $O
bash bench/stage_fa4.sh park
for i in 0 1 2 3; do
  CUBINFORGE_TEST_SHARD=$i/4 OMP_NUM_THREADS=3 timeout 200 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/gpu/test_varlen_persist_gpu.py > $O/dyn-$i.log 2>&1 &
done
wait
for i in 0 1 2 3; do echo "dyn-$i: $(tail -1 $O/dyn-$i.log)"; grep -E "^(FAILED|ERROR)" $O/dyn-$i.log | head -4; done
