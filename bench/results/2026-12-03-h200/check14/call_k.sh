#!/usr/bin/env bash
# Session 14, call K: FA4's part 1 parked for call L (nothing else: device time is short).
# OUT=<dir> bash bench/results/2026-12-03-h200/check14/call_k.sh     # carry: .stage_fa4x
set -uo pipefail
bash bench/stage_fa4.sh park && echo parked
