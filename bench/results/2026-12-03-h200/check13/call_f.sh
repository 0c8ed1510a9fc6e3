#!/usr/bin/env bash
# Session 13, call F (right after call E, same warm machine): FA4 unpacked; the main bench's
# prefill grid, bf16 and fp16, five head dims, beside cuDNN and FA4, on the default registry.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check13/call_f.sh
# carry: .cubinforge .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/f1; mkdir -p $O
if [ ! -d /tmp/site/flash_attn ]; then
  mkdir -p /tmp/site && cat /root/stage/site.tar.xz.aa .stage_fa4y/site.tar.xz.ab \
    | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site')" \
    > $O/fa4-install.log 2>&1 || echo "FA4 unpack failed"
fi
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 560 python3 -m bench --out $O/grid --skip correctness,cold_start --no-plots --dtype bf16,fp16 \
  --head-dims 64,96,128,192,256 --backends ours,cudnn,fa4 --deadline 500 --hard-timeout 550 > $O/grid.log 2>&1
echo "rc=$?" >> $O/grid.log; tail -15 $O/grid.log
tar czf $OUT/check13-f.tar.gz -C $OUT f1
