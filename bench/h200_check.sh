#!/usr/bin/env bash
# A checking run on the H200 after new kernel forms land, in two calls on one warm machine
# (each under the device's 10-minute limit; FA4 is staged across them as
# ../shared/device-notes.md says, since one call cannot carry all its wheels):
#   PART=tests: copy FA4's first wheel part to /root/stage, then every GPU test;
#   PART=bench: install FA4, then the benches of the new forms beside FA4 in the same process:
#               inference (decode, varlen, chunked prefill), model variants and their A/B
#               candidates, FP8 speed per V layout and its A/B candidates, host cost per call,
#               the C++ loaders against Python, and the main bench's decode cells.
# Usage (repo root; .cubinforge built by `make kernels ARCH=sm90` plus SET=fp8 and SET=inference,
# .cubinforge-ab / .cubinforge-ab-fp8 by `python -m cubinforge.bench.ab build`):
#   PART=tests OUT=<dir> bash bench/h200_check.sh   # carry .cubinforge* and .stage_fa4x (or .stage_fa4a)
#   PART=bench OUT=<dir> bash bench/h200_check.sh   # carry .stage_fa4y (or .stage_fa4b)
#   PART=cpp OUT=<dir> bash bench/h200_check.sh     # the C++ loader vs Python alone (carry .cubinforge)
# SKIP="fp8-ab host-overhead" leaves those steps out; GPU_TESTS names the test files to run.
# AB_RUNS="name:home:seqlens ..." times bench.ab homes (PART=tests, beside cuDNN and FA4 when
# staged); AB_RUNS_BENCH the same in PART=bench, beside FA4 too; MV_AB_HOME names
# model_variants' A/B home; AB_INF="name:home ..." times inference A/B homes (PART=bench);
# a home carried in PART=tests is still there for PART=bench on the same warm machine.
# GRID="<bench args>" runs the main bench's grid last in PART=bench (e.g. "--dtype bf16 --decode").
# FP8_AB_HOME=<home> runs bench.fp8 --ab-home on it in PART=bench (e.g. .cubinforge-ab-fp8h2).
# DECODE_AB=<home>|- runs bench/decode_ab.py (hd128 decode split counts and candidates) in PART=bench.
# GPU_SHARDS=n runs GPU_TESTS in n parallel shards; GPU_TEST_FILES="path:seconds ..." runs
# GPU test files one step each; CORRECTNESS="<bench args>" runs the main bench's correctness sweep; NCU=<cell> runs --ncu on it; CPP_DEBUG=1 runs
# bench/cpp_debug.sh (the C++ check under ASan and gdb); SNIPPET="<python>" runs one check of its own.
set -uo pipefail
OUT=${OUT:-bench/results/$(date +%F)-h200/check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
export CUBINFORGE_COMMIT=${CUBINFORGE_COMMIT:-unknown}
FA=/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
step() {  # step NAME SECONDS CMD...: run under a time limit, log to $OUT/NAME.log, show its tail
    local name=$1 limit=$2; shift 2
    case " ${SKIP:-} " in *" $name "*) echo "== $name skipped (SKIP)"; return;; esac
    echo "== $name ($(date +%T))"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?" >> "$OUT/$name.log"
    tail -${TAIL:-25} "$OUT/$name.log"
}
ab_runs() {  # ab_runs "name:home:seqlens" ...: bench.ab homes, beside whatever anchors are importable
    for run in "$@"; do
        IFS=: read -r name home seqlens <<< "$run"
        step "ab-$name" ${AB_S:-200} python3 -m bench.ab run --home "$home" --seqlens "$seqlens" --out "$OUT/ab-$name"
    done
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"; echo "commit $CUBINFORGE_COMMIT"; } > "$OUT/env-$PART.txt" 2>&1
# The C++ loader against the Python runtime: every entry point (dense, kvcache, varlen,
# combine) in one process against one build (examples/cpp/compare_inference_with_python.py).
step_cpp() {
    cpp() {
        rm -rf /tmp/cfb /tmp/cfbuild
        python3 -c "from cubinforge.generator.cpp_bundle import main; raise SystemExit(main(['--home', '.cubinforge', '--out', '/tmp/cfb']))" \
          && cmake -S examples/cpp -B /tmp/cfbuild -DCUBINFORGE_BUNDLE_DIR=/tmp/cfb > /dev/null \
          && cmake --build /tmp/cfbuild -j 16 --target cubinforge_check > /dev/null \
          && python3 examples/cpp/compare_inference_with_python.py --lib /tmp/cfbuild/libcubinforge_check.so
    }
    export -f cpp; TAIL=32 step cpp ${CPP_S:-120} bash -c cpp
}
if [ "${PART:-tests}" = cpp ]; then
    step_cpp
elif [ "${PART:-tests}" = tests ]; then
    mkdir -p /root/stage && cp .stage_fa4a/part_aa /root/stage/ 2>/dev/null   # the older staging's part 1
    [ -d .stage_fa4x ] && bash bench/stage_fa4.sh park
    # What the GPU tests compare against float64 becomes verification records
    # (tests/gpu_verification_log.py), merged into $OUT/verified.json below.
    [ -z "${CUBINFORGE_VERIFIED_OUT:-}" ] && rm -rf "$OUT/verified"   # no stale records merged in
    export CUBINFORGE_VERIFIED_OUT=${CUBINFORGE_VERIFIED_OUT:-$OUT/verified/gpu-tests.json}
    if [ -n "${GPU_SHARDS:-}" ]; then
        # GPU_SHARDS=n: the files of GPU_TESTS in n parallel pytest processes on the one GPU
        # (tests/conftest.py's CUBINFORGE_TEST_SHARD), since their float64 references are
        # CPU-bound; one log per shard, all under one limit.
        echo "== gpu-shards x$GPU_SHARDS ($(date +%T))"
        for i in $(seq 0 $(( GPU_SHARDS - 1 ))); do
            CUBINFORGE_TEST_SHARD=$i/$GPU_SHARDS OMP_NUM_THREADS=${SHARD_THREADS:-2} timeout ${GPU_TESTS_S:-330} \
                python3 -m pytest -q -rfE -m gpu -p no:cacheprovider -o faulthandler_timeout=90 --continue-on-collection-errors ${GPU_TESTS:-tests} \
                > "$OUT/gpu-shard-$i.log" 2>&1 &
        done
        wait
        for i in $(seq 0 $(( GPU_SHARDS - 1 ))); do
            echo "-- shard $i: $(grep -E '^(FAILED|ERROR)' "$OUT/gpu-shard-$i.log" | head -5)"; tail -2 "$OUT/gpu-shard-$i.log"
        done
    elif [ -n "${GPU_TEST_FILES:-}" ]; then
        # One step per file ("path:seconds"), so a slow or stuck file costs only its own limit;
        # faulthandler prints every thread's stack when one test runs past 60 s.
        for f in $GPU_TEST_FILES; do
            IFS=: read -r path limit <<< "$f"
            TAIL=12 step "gpu-$(basename "$path" .py)" "${limit:-120}" python3 -m pytest -q -rfE -m gpu \
                -p no:cacheprovider -o faulthandler_timeout=60 --durations=5 "$path"
        done
    else
        TAIL=40 step gpu-tests ${GPU_TESTS_S:-330} python3 -m pytest -q -ra -m gpu -p no:cacheprovider \
            --continue-on-collection-errors ${GPU_TESTS:-tests}
    fi
    vdir=$(dirname "$CUBINFORGE_VERIFIED_OUT")
    vfiles=$(ls "$vdir"/*.json 2>/dev/null)
    if ls "$vdir"/*.running > /dev/null 2>&1; then   # a killed or crashed process lost its failures
        echo "verification records NOT merged: a test process did not finish ($(ls "$vdir"/*.running))"
    elif [ -n "$vfiles" ]; then
        python3 -m cubinforge.bench.verified --merge $vfiles --out "$OUT/verified.json"
    fi
    unset CUBINFORGE_VERIFIED_OUT
    [ -n "${CORRECTNESS:-}" ] && step correctness ${CORRECTNESS_S:-120} python3 -m bench --out "$OUT/correctness" \
        --skip grid,cold_start --no-plots $CORRECTNESS
    [ -n "${NCU:-}" ] && step ncu ${NCU_S:-150} python3 -m bench --out "$OUT/ncu" --skip correctness,grid,cold_start \
        --no-plots --ncu "$NCU"
    [ -n "${CPP_DEBUG:-}" ] && TAIL=60 step cpp-debug ${CPP_DEBUG_S:-150} bash bench/cpp_debug.sh
    [ -n "${SNIPPET:-}" ] && step snippet ${SNIPPET_S:-60} python3 -c "$SNIPPET"
    step fp8 90 python3 -m bench.fp8 --skip-errors --json "$OUT/fp8.json"
    [ -d .cubinforge-ab-fp8 ] && step fp8-ab 150 python3 -m bench.ab run --home .cubinforge-ab-fp8 \
        --seqlens ${FP8_AB_SEQLENS:-8192,16384} --out "$OUT/fp8-ab"
    [ -d /tmp/site/flash_attn ] && export PYTHONPATH=$PWD:$FA
    ab_runs ${AB_RUNS:-}
else
    # The compact staging (bench/stage_fa4.sh: .stage_fa4x parked by PART=tests, .stage_fa4y here).
    [ -d .stage_fa4y ] && bash bench/stage_fa4.sh unpack "$OUT/fa4-install.log"
    if [ ! -d /tmp/site/flash_attn ]; then
        whl=/tmp/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
        cat /root/stage/part_aa .stage_fa4b/part_ab > "$whl" \
          && python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl" .stage_fa4b/*.whl \
             > "$OUT/fa4-install.log" 2>&1 || echo "FA4 install failed (see fa4-install.log)"
    fi
    export PYTHONPATH=$PWD:$FA
    step inference ${INFERENCE_S:-150} python3 -m cubinforge.bench.inference --json "$OUT/inference.json" \
        ${INFERENCE_CASES:+--cases $INFERENCE_CASES}
    for run in ${AB_INF:-}; do
        IFS=: read -r name home <<< "$run"
        step "inf-ab-$name" ${AB_S:-200} env CUBINFORGE_HOME=.cubinforge \
            python3 -m cubinforge.bench.inference --ab-home "$home" --iters 20
    done
    # DECODE_AB=<home> (or "-" for none): hd128 decode at forced split counts and the home's
    # decode-form candidates beside cuDNN / FA2 / FA4 (bench/decode_ab.py).
    [ -n "${DECODE_AB:-}" ] && step decode-ab ${DECODE_AB_S:-150} python3 -m cubinforge.bench.decode_ab \
        --json "$OUT/decode_ab.json" $([ "$DECODE_AB" != - ] && echo --ab-home "$DECODE_AB") ${DECODE_AB_ARGS:-}
    [ -n "${FP8_BENCH:-}" ] && step fp8 90 python3 -m bench.fp8 --skip-errors --json "$OUT/fp8.json"
    # FP8_AB_HOME=<home>: bench.ab's e4m3 candidates there, each gated, error rows, TFLOPS at 16k.
    [ -n "${FP8_AB_HOME:-}" ] && step fp8-ab-home ${FP8_AB_HOME_S:-150} python3 -m bench.fp8 \
        --ab-home "$FP8_AB_HOME" --json "$OUT/fp8_ab_home.json"
    step model-variants 90 python3 bench/model_variants.py --out "$OUT/model_variants.json"
    MV_AB_HOME=${MV_AB_HOME:-.cubinforge-ab}
    [ -d "$MV_AB_HOME" ] && step model-variants-ab ${MV_AB_S:-180} python3 bench/model_variants.py \
        --ab-home "$MV_AB_HOME" --out "$OUT/model_variants_ab.json"
    ab_runs ${AB_RUNS_BENCH:-}
    step host-overhead 70 python3 -m cubinforge.bench.host_overhead --iters 2000 --repeats 5 \
        --out "$OUT/host_overhead.json"
    step host-overhead-raw-off 40 python3 -m cubinforge.bench.host_overhead --kinds plan,prewrapped,torch \
        --iters 2000 --repeats 7 --raw off --out "$OUT/host_raw_off.json"
    step_cpp
    [ -n "${GRID:-}" ] && step grid ${GRID_S:-300} python3 -m bench --out "$OUT/grid" --skip correctness,cold_start \
        --no-plots --deadline $(( ${GRID_S:-300} - 40 )) --hard-timeout $(( ${GRID_S:-300} - 10 )) $GRID
fi
