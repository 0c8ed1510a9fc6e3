#!/usr/bin/env bash
# One device session on the lent H200, from a plain checkout (no install), all in one call:
# the GPU tests, the C++ example against the Python runtime and against a float64 reference,
# the host cost, the A/B experiments when their registry is there, then the benchmark harness.
# Usage (repo root, with .cubinforge built by `make kernels ARCH=sm90`):
#   OUT=<dir> bash bench/h200_session.sh [bench args, e.g. --decode --ncu]
# A/B: set AB_HOME to a registry built by `python -m cubinforge.bench.ab build` (AB_SEQLENS
# picks the cells); its tables go to $OUT/ab-<name of AB_HOME>.{md,json}.
# FA4 as an anchor: stage its wheels as ../shared/device-notes.md says; this script installs
# them from .stage_fa4b/ (+ /root/stage/part_aa) into /tmp/site when they are there.
set -uo pipefail
OUT=${OUT:-bench/results/$(date +%F)-h200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}

if [ -f /root/stage/part_aa ] && [ -d .stage_fa4b ] && [ ! -d /tmp/site/flash_attn ]; then
    whl=/tmp/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
    cat /root/stage/part_aa .stage_fa4b/part_ab > "$whl"
    python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl" .stage_fa4b/*.whl \
        > "$OUT/fa4-install.log" 2>&1 || echo "FA4 install failed (see fa4-install.log)"
fi
[ -d /tmp/site/flash_attn ] && export PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site

{
    echo "== GPU tests (make device-test)"
    # A module that fails to import (e.g. one that needs the CuTe DSL) must not hide the rest.
    timeout 240 python3 -m pytest -q -ra -m gpu -p no:cacheprovider --continue-on-collection-errors tests 2>&1 | tail -25
    echo "== C++ example vs Python runtime (bit for bit)"
    rm -rf /tmp/cfb && python3 -c "from cubinforge.generator.cpp_bundle import main; raise SystemExit(main(['--home', '.cubinforge', '--out', '/tmp/cfb']))" \
      && cmake -S examples/cpp -B /tmp/cfbuild -DCUBINFORGE_BUNDLE_DIR=/tmp/cfb > /dev/null \
      && cmake --build /tmp/cfbuild -j 8 > /dev/null \
      && rm -rf /tmp/cfruns \
      && timeout 120 python3 examples/cpp/compare_with_python.py --exe /tmp/cfbuild/flash_attn_example --matrix --out /tmp/cfruns 2>&1 | tail -15
    echo "== C++ example outputs vs a float64 reference (examples/cpp/check.py)"
    for run in /tmp/cfruns/run*; do
        [ -f "$run/meta.json" ] && timeout 120 python3 examples/cpp/check.py "$run" 2>&1 | tail -8
    done
    echo "== host cost per flash_attn_func call (real driver)"
    timeout 120 python3 -m cubinforge.bench.host_overhead 2>&1 | tail -15
} > "$OUT/device-tests.log" 2>&1
cat "$OUT/device-tests.log"

if [ -n "${AB_HOME:-}" ] && [ -d "$AB_HOME/manifests" ]; then
    echo "== A/B experiments from $AB_HOME"
    ab_out=$(mktemp -d)
    timeout 300 python3 -m cubinforge.bench.ab run --home "$AB_HOME" --out "$ab_out" \
        --seqlens "${AB_SEQLENS:-512,1024,2048,8192}" 2>&1 | tail -80
    tag=$(basename "$AB_HOME"); tag=${tag#.cubinforge-}
    for f in "$ab_out"/ab.*; do cp "$f" "$OUT/ab-$tag.${f##*.}"; done
fi

echo "== benchmark harness"
python3 -m bench --out "$OUT" "$@"
