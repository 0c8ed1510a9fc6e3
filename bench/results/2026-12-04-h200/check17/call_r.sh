#!/usr/bin/env bash
# Prepared in session 17 (2026-12-04, no device time left to run it): call R on a fresh machine.
# FA4's part 1 parked for call S; the float64 GPU tests of every bench.ab varlen-dynamic-2
# candidate pinned: bf16 hd128 paged varlen on the persistent walk, static and with the tile
# counter (alone, with O by one ragged TMA store, with causal's bit mask and in-order sum), and
# packed hd64 bf16/fp16 static and with the counter; a paged plan run four times among them.
# Then the same tests of bench.ab varlen-wide-5 (the shipped wide varlen forms with S converted
# to P in register order, chunked_p_convert, which the inference kernel takes since session 17)
# and of varlen-model (window / softcap / sink on the persistent walk, new in session 17; its
# candidates through test_model_variants_on_the_walk).
# Here, first: make kernels ARCH=sm90; bash bench/stage_fa4.sh;
#   .venv/bin/python -m cubinforge.bench.ab build --home .cubinforge-ab-dyn2 --experiments varlen-dynamic-2
#   .venv/bin/python -m cubinforge.bench.ab build --home .cubinforge-ab-vw5 --experiments varlen-wide-5
#   .venv/bin/python -m cubinforge.bench.ab build --home .cubinforge-ab-vm --experiments varlen-model
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-04-h200/check17/call_r.sh
# carry: .stage_fa4x .cubinforge .cubinforge-ab-dyn2 .cubinforge-ab-vw5 .cubinforge-ab-vm
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/r1; mkdir -p $O
bash bench/stage_fa4.sh park
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
for ab in dyn2 vw5 vm; do
  for i in 0 1 2 3; do
    CUBINFORGE_AB_HOME=$PWD/.cubinforge-ab-$ab CUBINFORGE_TEST_SHARD=$i/4 OMP_NUM_THREADS=3 timeout 170 \
      python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_varlen_persist_gpu.py > $O/$ab-$i.log 2>&1 &
  done
  wait
  for i in 0 1 2 3; do echo "$ab-$i: $(tail -1 $O/$ab-$i.log)"; grep -E "^(FAILED|ERROR)" $O/$ab-$i.log | head -4; done
done
