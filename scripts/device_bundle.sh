# Sourced by the device scripts (scripts/*_device.sh): unpacks the carried bundle (.gpubundle/gpucheck.tar.xz, made by
# `scripts/gpu_check.sh --bundle` + tar) into x/ and sets OUT (logs), B (the folder with the binaries) and the library
# and source paths the binaries need.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" x
tar -xJf .gpubundle/gpucheck.tar.xz -C x
B=$(dirname "$(find x -name flashseek -type f | head -1)")
export LD_LIBRARY_PATH=$PWD/$B:${LD_LIBRARY_PATH:-} FLASHSEEK_SOURCE_DIR=$PWD
