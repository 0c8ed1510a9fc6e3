#!/usr/bin/env bash
# Session 14, call A: FA4's part 1 parked for call B; bench.ab short-n64-wide (hd192 / hd256
# short causal at 128 x 64 against the shipped lpt forms) on the grid's cells and off-grid
# shapes beside cuDNN; the e4m3 bench (issue 13's speed and error rows) on the default + fp8 sets.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_a.sh
# carry: .stage_fa4x .cubinforge-ab-n64w .cubinforge
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/a1; mkdir -p $O
bash bench/stage_fa4.sh park || echo "park failed"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
  echo "commit $CUBINFORGE_COMMIT"; } > $O/env.txt 2>&1
timeout ${AB_S:-330} python3 -m bench.ab run --home .cubinforge-ab-n64w --seqlens 512,1024,2048,4096 \
  --shapes 8:777:8,4:3000:8,3:1536:16 --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -v "^fa4 not timed" $O/ab.log | sed 's/fa3-fwd-sm_90a-bf16-//' | cut -c1-150 | tail -80
timeout ${FP8_S:-120} python3 -m bench.fp8 --json $O/fp8.json > $O/fp8.log 2>&1; echo "rc=$?" >> $O/fp8.log
tail -25 $O/fp8.log
