#!/usr/bin/env bash
# Session 13, call A: stage FA4's first part; HBM traffic of the short causal forms (ncu);
# bench.ab short-pairs at 512 / 1k beside cuDNN (FA4 comes in call B).
# Run from the repo root on the H200: OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check13/call_a.sh
# carry: .cubinforge-ab-pairs .stage_fa4x
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
O=$OUT/a1; mkdir -p $O /root/stage && cp .stage_fa4x/site.tar.xz.* /root/stage/
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
  echo "commit ${CUBINFORGE_COMMIT:-unknown}"; } > $O/env.txt 2>&1
H=.cubinforge-ab-pairs
P=fa3-fwd-sm_90a-bf16
timeout 200 python3 -m bench.ncu_memory --home $H --head-dim 128 --heads 16 --batch 32 --seqlen 512 --json $O/ncu-hd128-s512.json \
  --variants $P-hd128-causal+persistent+separate-o-smem+warp-o-store,$P-hd128-causal+persistent+separate-o-smem+warp-o-store+pair-major,$P-hd128-causal+lpt+mask-bits \
  > $O/ncu-hd128-s512.log 2>&1; echo "rc=$?" >> $O/ncu-hd128-s512.log; cat $O/ncu-hd128-s512.log
timeout 150 python3 -m bench.ncu_memory --home $H --head-dim 256 --heads 8 --batch 32 --seqlen 512 --json $O/ncu-hd256-s512.json \
  --variants $P-hd256-causal+lpt+pin-loop-invariants,$P-hd256-causal+persistent+pair-major \
  > $O/ncu-hd256-s512.log 2>&1; echo "rc=$?" >> $O/ncu-hd256-s512.log; cat $O/ncu-hd256-s512.log
timeout 200 python3 -m bench.ab run --home $H --seqlens 512,1024 --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -v "^fa4 not timed" $O/ab.log | tail -36
