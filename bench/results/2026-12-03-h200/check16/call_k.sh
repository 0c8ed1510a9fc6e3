#!/usr/bin/env bash
# Session 16, call K (a fresh machine): FA4's part 1 parked for call L; the float64 GPU tests
# check15 left unrun: the shipped wide varlen forms ((192, 128) and hd256, bf16 and fp16: fp16
# hd256's O store, promoted in check15/i1, never ran them), and every bench.ab varlen-wide-4
# candidate pinned (the dense forms' pinned loop invariants in the varlen kernel; hd256 causal
# at 128 x 64 with the conditional rescale, i1's 1.037x); then the C++ loader against Python
# in one process (its packed varlen cases at (192, 128) and hd256 are new).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_k.sh
# carry: .stage_fa4x .cubinforge .cubinforge-ab-vw4
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/k1; mkdir -p $O
bash bench/stage_fa4.sh park
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
for i in 0 1 2 3; do
  CUBINFORGE_AB_HOME=$PWD/.cubinforge CUBINFORGE_TEST_SHARD=$i/4 OMP_NUM_THREADS=2 timeout 240 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -k "256 or 192" \
    tests/gpu/test_varlen_gpu.py tests/gpu/test_varlen_persist_gpu.py > $O/shipped-wide-$i.log 2>&1 &
  CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-vw4 CUBINFORGE_TEST_SHARD=$i/4 OMP_NUM_THREADS=2 timeout 240 \
    python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_varlen_persist_gpu.py > $O/vw4-$i.log 2>&1 &
done
wait
for f in $O/shipped-wide-*.log $O/vw4-*.log; do echo "$(basename $f): $(tail -1 $f)"; grep -E "^(FAILED|ERROR)" $f | head -3; done
PART=cpp OUT=$O bash bench/h200_check.sh 2>&1 | tail -6
