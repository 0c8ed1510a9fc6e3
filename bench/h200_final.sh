#!/usr/bin/env bash
# The closing H200 run of a session, in two calls that each fit the device's 10-minute limit
# (the machine stays warm between them, so FA4 staged by part a is there for part b):
#   PART=a: stage FA4, every GPU test, the inference and model-variant benches beside FA4;
#   PART=b: the C++ loader against Python and float64, host cost per call, the main bench
#           (correctness sweep, bf16 + fp16 grid with decode cells, cold start) beside
#           cuDNN and FA4.
# Usage (repo root, .cubinforge built by `make kernels ARCH=sm90`, FA4 staged as
# ../shared/device-notes.md says: /root/stage/part_aa from an earlier call, .stage_fa4b here):
#   PART=a OUT=<dir> bash bench/h200_final.sh; PART=b OUT=<dir> bash bench/h200_final.sh
set -uo pipefail
OUT=${OUT:-bench/results/$(date +%F)-h200/final}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
FA=/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
if [ "${PART:-a}" = a ]; then
    if [ -f /root/stage/part_aa ] && [ -d .stage_fa4b ] && [ ! -d /tmp/site/flash_attn ]; then
        whl=/tmp/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
        cat /root/stage/part_aa .stage_fa4b/part_ab > "$whl"
        python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl" .stage_fa4b/*.whl \
            > "$OUT/fa4-install.log" 2>&1 || echo "FA4 install failed (see fa4-install.log)"
    fi
    echo "== GPU tests"
    timeout 330 python3 -m pytest -q -ra -m gpu -p no:cacheprovider --continue-on-collection-errors tests \
        > "$OUT/gpu-tests.log" 2>&1; echo "rc=$?" >> "$OUT/gpu-tests.log"; tail -30 "$OUT/gpu-tests.log"
    echo "== inference bench (ours beside FA4)"
    PYTHONPATH=$PWD:$FA timeout 150 python3 -m cubinforge.bench.inference --json "$OUT/inference.json" \
        > "$OUT/inference.log" 2>&1; tail -30 "$OUT/inference.log"
    echo "== model-variant bench (ours beside FA4)"
    PYTHONPATH=$PWD:$FA timeout 120 python3 bench/model_variants.py --out "$OUT/model_variants.json" \
        > "$OUT/model_variants.log" 2>&1; tail -20 "$OUT/model_variants.log"
else
    [ -d /tmp/site/flash_attn ] && FAP=$FA || FAP=
    {
        echo "== C++ example vs Python runtime (bit for bit), and vs float64"
        rm -rf /tmp/cfb && python3 -c "from cubinforge.generator.cpp_bundle import main; raise SystemExit(main(['--home', '.cubinforge', '--out', '/tmp/cfb']))" \
          && cmake -S examples/cpp -B /tmp/cfbuild -DCUBINFORGE_BUNDLE_DIR=/tmp/cfb > /dev/null \
          && cmake --build /tmp/cfbuild -j 8 > /dev/null \
          && rm -rf /tmp/cfruns \
          && timeout 120 python3 examples/cpp/compare_with_python.py --exe /tmp/cfbuild/flash_attn_example --matrix --out /tmp/cfruns 2>&1 | tail -12
        echo "== C++ kvcache / varlen / combine vs the Python runtime (bit for bit)"
        [ -f /tmp/cfbuild/libcubinforge_check.so ] \
          && timeout 120 python3 examples/cpp/compare_inference_with_python.py --lib /tmp/cfbuild/libcubinforge_check.so 2>&1 | tail -32
        for run in /tmp/cfruns/run*; do
            [ -f "$run/meta.json" ] && timeout 60 python3 examples/cpp/check.py "$run" 2>&1 | tail -4
        done
        echo "== host cost per call (real driver; cuDNN and FA4 in the same process)"
        PYTHONPATH=$PWD:$FAP timeout 150 python3 -m cubinforge.bench.host_overhead --iters 2000 --repeats 7 \
            --out "$OUT/host_overhead.json" 2>&1 | tail -22
    } > "$OUT/device-tests.log" 2>&1
    cat "$OUT/device-tests.log"
    echo "== benchmark harness"
    PYTHONPATH=$PWD:$FAP python3 -m bench --out "$OUT" --dtype bf16,fp16 --decode --deadline 300 --hard-timeout 380 "$@"
fi
