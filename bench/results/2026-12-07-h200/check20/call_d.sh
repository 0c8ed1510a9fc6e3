#!/usr/bin/env bash
# Session 20, call D (a fresh machine, the session's last 340 s of device time): bench.ab
# decode-hd64 beside the shipped hd64 decode forms, cuDNN and FA2 (FA4 is not staged: one call
# cannot carry it), bench/decode_ab.py --head-dim 64 on the 12 bf16 hd64 --decode cells: c1 had
# the non-causal q16 / q64 cells at 0.957-0.978x cuDNN. Each entry is checked against the float32
# reference on poisoned O / LSE before it is timed; no float64 suite for the candidates here.
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-07-h200/check20/call_d.sh
# carry: .stage_homes (pack_homes.sh with .cubinforge-ab-dec64 added: HOMES="... .cubinforge-ab-dec64")
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown} PYTHONPATH=$PWD
O=$OUT/d1; mkdir -p $O
rm -rf .cubinforge .cubinforge-ab-dec64
xz -dc .stage_homes/homes.tar.xz | tar -xf - || { echo "homes unpack failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1; cat $O/gpu.txt
timeout ${DEC_S:-170} python3 -m cubinforge.bench.decode_ab --head-dim 64 --ab-home .cubinforge-ab-dec64 \
  --splits 0,1 --ab-splits 0,1 --iters 20 --json $O/decode_ab_hd64.json > $O/decode_ab_hd64.log 2>&1
echo "rc=$?" >> $O/decode_ab_hd64.log
grep -v "Warning\|exe_args" $O/decode_ab_hd64.log | tail -40
