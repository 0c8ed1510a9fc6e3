#!/usr/bin/env bash
# Session 14, call L (right after call K): FA4 unpacked; bench/model_variants.py --ab-home on
# bench.ab dv128-lazy ((192, 128) causal b2 x 8k: the shipped form and FA4's conditional
# rescale on it), each checked against torch's float32 attention and timed beside the shipped
# variant and FA4 in one process.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_l.sh
# carry: .stage_fa4y .cubinforge .cubinforge-ab-dv128l
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/l1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 150 python3 bench/model_variants.py --ab-home .cubinforge-ab-dv128l --iters 30 --out $O/model_variants_ab.json \
  > $O/model-variants-ab.log 2>&1; echo "rc=$?" >> $O/model-variants-ab.log
grep -v "Warning\|exe_args" $O/model-variants-ab.log | tail -12
