#!/usr/bin/env bash
# Session 16, call P (right after call O, on the same warm machine): FA4 unpacked; bench.ab
# varlen-dynamic on the 16-sequence case, each candidate beside the shipped form and FA4 in
# alternating rounds; then ncu of the hd256 causal candidate beside FA4 (its DRAM bytes and
# L2 hit rate against n1's 3.4x).
# OUT=<dir> CUBINFORGE_COMMIT=<sha> bash bench/results/2026-12-03-h200/check16/call_p.sh
# carry: .stage_fa4y .cubinforge .cubinforge-ab-dyn
set -uo pipefail
export PYTHONUNBUFFERED=1 CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
O=$OUT/p1; mkdir -p $O
bash bench/stage_fa4.sh unpack $O/fa4-install.log
export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
timeout 300 python3 -m cubinforge.bench.inference --ab-home .cubinforge-ab-dyn --iters 20 > $O/varlen-dynamic-ab.log 2>&1
echo "rc=$?" >> $O/varlen-dynamic-ab.log
grep "^|" $O/varlen-dynamic-ab.log; tail -2 $O/varlen-dynamic-ab.log
CUBINFORGE_HOME=$PWD/.cubinforge-ab-dyn timeout 120 python3 -m cubinforge.bench.ncu --varlen --head-dim 256 --causal 1 \
  --out $O/ncu-varlen-hd256-dynamic > $O/ncu-varlen-hd256-dynamic.log 2>&1
tail -2 $O/ncu-varlen-hd256-dynamic.log
python3 - <<'PY'
import json, os
r = json.load(open(os.environ["OUT"] + "/p1/ncu-varlen-hd256-dynamic/ncu.json"))
for b, v in r.get("backends", {}).items():
    m = v.get("metrics", {})
    print(b, {k: m.get(k) for k in ("gpu__time_duration.sum (ns)", "dram__bytes_read.sum (byte)",
                                    "lts__t_sector_hit_rate.pct (%)", "gpc__cycles_elapsed.avg.per_second (hz)")})
PY
