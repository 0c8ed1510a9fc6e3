#!/usr/bin/env bash
# Here (the CPU machine), before check19's calls: every registry home and staging folder the
# calls carry (PLAN.md's table), then the DSL's stray cubin copies removed. About 15 min on 2 cores.
#   bash bench/results/2026-12-04-h200/check19/prepare.sh
set -euo pipefail
make kernels ARCH=sm90                                          # .cubinforge: the default set
.venv/bin/cubinforge build --arch sm90 --set fp8 --jobs 2       # + SET=fp8, what call T tests
CUBINFORGE_HOME=.cubinforge-inf .venv/bin/cubinforge build --arch sm90 --set inference --jobs 2
.venv/bin/python -m cubinforge.bench.ab build --home .cubinforge-ab-wr --experiments varlen-walk-rest
[ -d .stage_fa4x ] && [ -d .stage_fa4y ] || bash bench/stage_fa4.sh
rm -f cutlass___call___*.cubin
du -sh .cubinforge .cubinforge-inf .cubinforge-ab-wr .stage_fa4x .stage_fa4y
