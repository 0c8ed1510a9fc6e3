#!/usr/bin/env bash
# Here (the CPU machine), after check19/prepare.sh: the three registry homes the calls use in one
# xz archive, .stage_homes/homes.tar.xz. As files they are 15 + 18 + 1 MB; packed about 3 MB (a
# cubin is mostly zeros and repeated tables), so FA4's first staging half (36 MB) travels beside
# them in call A and no call spends itself on parking FA4 alone.
#   bash bench/results/2026-12-07-h200/check20/pack_homes.sh
#   HOMES=".cubinforge .cubinforge-ab-dec64" bash .../pack_homes.sh   # call D's
set -euo pipefail
rm -rf .stage_homes && mkdir -p .stage_homes
tar -cf - ${HOMES:-.cubinforge .cubinforge-inf .cubinforge-ab-wr} | xz -3 -T2 > .stage_homes/homes.tar.xz
du -sh .stage_homes .stage_fa4x .stage_fa4y
