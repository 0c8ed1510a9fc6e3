#!/usr/bin/env bash
# Prepared in session 19 (2026-12-04, no machine lent): call C, on the machine check18's calls T
# and U left warm (FA4 unpacked under /tmp/site by call U). The float64 GPU tests of every
# bench.ab varlen-walk-rest candidate pinned (tests/gpu/test_varlen_persist_gpu.py, 4 shards:
# paged fp16 hd128 and hd64 bf16/fp16 through shuffled page tables of 16/64/256, a paged plan run
# four times; the fp16 and hd64 windows, the hd64 sink and the paged window / softcap forms
# through test_model_variants_on_the_walk), then bench.inference --ab-home on the set: each candidate
# beside its one-tile form (SET=inference's home as the shipped registry) and FA4 in
# alternating rounds. On a fresh machine, run `bash bench/stage_fa4.sh park` (carry .stage_fa4x)
# and `unpack` (carry .stage_fa4y) first.
# Here, first: make kernels ARCH=sm90 SET=inference with CUBINFORGE_HOME=.cubinforge-inf;
#   .venv/bin/python -m cubinforge.bench.ab build --home .cubinforge-ab-wr --experiments varlen-walk-rest
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check19/call_c.sh
# carry: .cubinforge-inf .cubinforge-ab-wr
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
test -d /tmp/site/flash_attn || echo "FA4 is not unpacked here: the A/B times no FA4 (stage_fa4.sh park + unpack)"
for i in 0 1 2 3; do
  CUBINFORGE_HOME=$PWD/.cubinforge-inf CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-wr CUBINFORGE_TEST_SHARD=$i/4 \
    OMP_NUM_THREADS=3 timeout 200 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider \
    tests/gpu/test_varlen_persist_gpu.py > $O/tests-$i.log 2>&1 &
done
wait
for i in 0 1 2 3; do echo "tests-$i: $(tail -1 $O/tests-$i.log)"; grep -E "^(FAILED|ERROR)" $O/tests-$i.log | head -4; done
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
CUBINFORGE_HOME=$PWD/.cubinforge-inf timeout 300 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-wr \
  --iters 20 > $O/ab-wr.log 2>&1
echo "rc=$?" >> $O/ab-wr.log
grep "^|" $O/ab-wr.log; tail -2 $O/ab-wr.log
