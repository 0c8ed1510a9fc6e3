#!/usr/bin/env bash
# Session 13, call E: stage FA4's first part; bench.ab short-sections-2 (d1: the sectioned walk
# with the all-pairs decode where one section holds every pair, beside cuDNN, on the grid and
# off it); then every GPU test on the default registry built at this commit (8 shards).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check13/call_e.sh
# carry: .cubinforge .cubinforge-ab-sections2 .stage_fa4x
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
O=$OUT/d1; mkdir -p $O /root/stage && cp .stage_fa4x/site.tar.xz.* /root/stage/
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
  echo "commit ${CUBINFORGE_COMMIT:-unknown}"; } > $O/env.txt 2>&1
timeout 150 python3 -m bench.ab run --home .cubinforge-ab-sections2 --seqlens 512,1024,2048,4096,8192 \
  --shapes 3:1536:16,1:4096:16,2:2048:8,8:777:16,4:3000:16 --out $O/ab > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
grep -c " ok$" $O/ab.log; grep -v " ok$" $O/ab.log | tail -5
PART=tests OUT=$OUT/e1 GPU_SHARDS=8 GPU_TESTS=tests GPU_TESTS_S=300 SKIP="fp8 fp8-ab" bash bench/h200_check.sh 2>&1 | tail -30
tar czf $OUT/check13-de.tar.gz -C $OUT d1 e1
