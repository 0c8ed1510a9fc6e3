#!/usr/bin/env bash
# Where does the C++ one-process check crash? (bench/results/2026-12-01-h200/check5: a
# segmentation fault inside libcubinforge_check.so, seen by Python's faulthandler only.)
# Builds the check library twice from the bundle in $BUNDLE: with AddressSanitizer (run
# with libasan preloaded into python, since python itself is not instrumented; the CUDA
# driver needs protect_shadow_gap=0), and -O0 -g under gdb when gdb exists. Each prints the
# native stack of the first bad access.   Usage: BUNDLE=/tmp/cfb bash bench/cpp_debug.sh
set -uo pipefail
BUNDLE=${BUNDLE:-/tmp/cfb}
LIMIT=${CPP_RUN_S:-50}
[ -f "$BUNDLE/cubinforge_bundle.h" ] || python3 -c "from cubinforge.generator.cpp_bundle import main; raise SystemExit(main(['--home', '.cubinforge', '--out', '$BUNDLE']))"
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=address"
cmake -S examples/cpp -B /tmp/cfbuild-asan -DCUBINFORGE_BUNDLE_DIR="$BUNDLE" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address" > /dev/null \
  && cmake --build /tmp/cfbuild-asan -j 16 --target cubinforge_check > /dev/null || echo "asan build failed"
asan=$(g++ -print-file-name=libasan.so)
echo "== asan ($asan)"
LD_PRELOAD="$asan" ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:handle_segv=1:symbolize=1 \
    timeout "$LIMIT" python3 -X faulthandler examples/cpp/compare_inference_with_python.py \
    --lib /tmp/cfbuild-asan/libcubinforge_check.so 2>&1 | grep -v "^    #[0-9]* 0x[0-9a-f]* in _PyEval\|^    #[0-9]* 0x[0-9a-f]* in PyObject" | tail -60
if command -v gdb > /dev/null; then
    cmake -S examples/cpp -B /tmp/cfbuild-g -DCUBINFORGE_BUNDLE_DIR="$BUNDLE" -DCMAKE_BUILD_TYPE=Debug > /dev/null \
      && cmake --build /tmp/cfbuild-g -j 16 --target cubinforge_check > /dev/null
    echo "== gdb"
    timeout "$LIMIT" gdb -q -batch -ex run -ex bt -ex "info locals" --args python3 \
        examples/cpp/compare_inference_with_python.py --lib /tmp/cfbuild-g/libcubinforge_check.so 2>&1 | tail -50
else
    echo "== gdb: not installed"
fi
