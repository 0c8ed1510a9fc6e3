#!/usr/bin/env bash
# Session 13, call D: bench.ab short-sections-2 (causal_order "sections" / "pairs" against the
# shipped causal forms) on the FA3 grid's cells and off-grid shapes, beside cuDNN (FA4 is not
# staged in this call; b1 timed it on the grid cells the same day).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check13/call_c.sh
# carry: .cubinforge-ab-sections2
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
O=$OUT/d1; mkdir -p $O
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
  echo "commit ${CUBINFORGE_COMMIT:-unknown}"; } > $O/env.txt 2>&1
timeout ${AB_S:-500} python3 -m bench.ab run --home .cubinforge-ab-sections2 --seqlens 512,1024,2048,4096,8192 \
  --shapes 3:1536:16,1:4096:16,2:2048:8,8:777:16,4:3000:16 --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -v "^fa4 not timed" $O/ab.log | sed 's/fa3-fwd-sm_90a-bf16-//' | cut -c1-150
