#!/usr/bin/env bash
# Stage FA4 4.0.0b36 (the anchor) for the H200, which has no network: its wheels installed
# here with pip --target for CPython 3.12, tarred with xz and split in two parts of ~36 MB,
# .stage_fa4x/ (carried by h200_check.sh PART=tests) and .stage_fa4y/ (PART=bench, which
# unpacks both into /tmp/site). 72 MB in all against the wheels' 101 MB, so each call keeps
# ~18 MiB of its 64 MiB carry for registries and A/B homes.
#   bash bench/stage_fa4.sh            # repo root; needs network to PyPI, ~2 min of xz on 2 cores
# On the H200, from the repo root of a call's checkout (the one home of these steps):
#   bash bench/stage_fa4.sh park       # call 1 (carries .stage_fa4x): part 1 kept in /root/stage
#   bash bench/stage_fa4.sh unpack LOG # call 2 on the same warm machine (carries .stage_fa4y):
#                                      # both parts extracted into /tmp/site unless it has FA4;
#                                      # then PYTHONPATH=$PWD:/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
set -euo pipefail
case "${1:-}" in
park)
    mkdir -p /root/stage && cp .stage_fa4x/site.tar.xz.* /root/stage/
    exit 0;;
unpack)
    [ -d /tmp/site/flash_attn ] && exit 0
    log=${2:-/dev/null}
    mkdir -p /tmp/site
    cat /root/stage/site.tar.xz.aa .stage_fa4y/site.tar.xz.ab \
      | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site')" \
      > "$log" 2>&1 || { echo "FA4 unpack failed (see $log)"; exit 1; }
    exit 0;;
"") ;;
*) echo "usage: bash bench/stage_fa4.sh [park | unpack LOG]" >&2; exit 2;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plat=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --only-binary=:all:)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work/whl" nvidia-cutlass-dsl==4.8.1 \
    nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
    flash-attn-4==4.0.0b36 apache-tvm-ffi torch-c-dlpack-ext quack-kernels
python3 -m pip install -q --no-index --no-deps "${plat[@]}" --target "$work/site" "$work"/whl/*.whl
find "$work/site" -name __pycache__ -type d -prune -exec rm -rf {} +   # this Python's bytecode, not 3.12's
tar -C "$work/site" -cf - . | xz -6 -T2 > "$work/site.tar.xz"
half=$(( ($(stat -c %s "$work/site.tar.xz") + 1) / 2 ))
rm -rf .stage_fa4x .stage_fa4y && mkdir -p .stage_fa4x .stage_fa4y
split -b "$half" "$work/site.tar.xz" "$work/part_"
mv "$work/part_aa" .stage_fa4x/site.tar.xz.aa && mv "$work/part_ab" .stage_fa4y/site.tar.xz.ab
du -sh .stage_fa4x .stage_fa4y
