#!/usr/bin/env bash
# Session 14, call C: FA4's part 1 parked for call D; bench.ab short-n64-wide-2 and
# short-n64-wide-nc (round 2 of hd192 / hd256 at 128 x 64, check14/a1's winners) at 512-16k
# and off-grid shapes beside cuDNN.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check14/call_c.sh
# carry: .stage_fa4x .cubinforge-ab-n64w2
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/c1; mkdir -p $O
bash bench/stage_fa4.sh park || echo "park failed"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
  echo "commit $CUBINFORGE_COMMIT"; } > $O/env.txt 2>&1
timeout ${AB_S:-400} python3 -m bench.ab run --home .cubinforge-ab-n64w2 --seqlens 512,1024,2048,4096,8192,16384 \
  --shapes 8:777:8,4:3000:8,3:1536:16 --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -v "^fa4 not timed" $O/ab.log | grep -v "rising scores" | sed 's/fa3-fwd-sm_90a-bf16-//' | awk '{print $1, $2, $4, $6, $7}' | tail -120
