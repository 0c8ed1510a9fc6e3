#!/usr/bin/env bash
# Session 15, call J: the float64 GPU tests of the three cubins call I promoted (fp16 hd256
# varlen with O staged in Q's buffer and one ragged TMA store; bf16 hd256 causal varlen at
# 128 x 64 with it and the conditional rescale): every hd256 varlen test (ragged, GQA, fp16
# seqused, the persistent walk's cases, rising scores), in four processes.
# OUT=<dir> bash bench/results/2026-12-03-h200/check15/call_j.sh
# carry: .cubinforge
set -uo pipefail
O=$OUT/j1; mkdir -p $O
export CUBINFORGE_AB_HOME=$PWD/.cubinforge
for i in 0 1 2 3; do
  CUBINFORGE_TEST_SHARD=$i/4 OMP_NUM_THREADS=4 timeout 150 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    -k "256" tests/gpu/test_varlen_gpu.py tests/gpu/test_varlen_persist_gpu.py > $O/hd256-varlen-$i.log 2>&1 &
done
wait
for i in 0 1 2 3; do grep -E "^(FAILED|ERROR)" $O/hd256-varlen-$i.log | head -3; tail -1 $O/hd256-varlen-$i.log; done
