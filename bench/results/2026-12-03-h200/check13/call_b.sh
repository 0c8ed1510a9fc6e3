#!/usr/bin/env bash
# Session 13, call B (right after call A, on the same warm machine): FA4 unpacked from call A's
# staged part and .stage_fa4y; bench.ab short-pairs at $SEQLENS beside cuDNN and FA4.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> SEQLENS=2048,4096,8192 bash bench/results/2026-12-03-h200/check13/call_b.sh
# carry: .cubinforge-ab-pairs .stage_fa4y
set -uo pipefail
export PYTHONUNBUFFERED=1
O=$OUT/b1; mkdir -p $O
if [ ! -d /tmp/site/flash_attn ]; then
  mkdir -p /tmp/site && cat /root/stage/site.tar.xz.aa .stage_fa4y/site.tar.xz.ab \
    | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site')" \
    > $O/fa4-install.log 2>&1 || echo "FA4 unpack failed"
fi
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "commit ${CUBINFORGE_COMMIT:-unknown}"; } > $O/env.txt 2>&1
timeout ${AB_S:-480} python3 -m bench.ab run --home .cubinforge-ab-pairs --seqlens ${SEQLENS:-2048,4096,8192} --out $O/ab \
  > $O/ab.log 2>&1; echo "rc=$?" >> $O/ab.log
tail -50 $O/ab.log
