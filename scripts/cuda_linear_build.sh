#!/usr/bin/env bash
# Builds test_cuda_linear here for the H200 (sm_90a) and stages it in .devcarry/ for scripts/cuda_linear_device.sh,
# together with the non-system shared libraries it links (the device image has no libfmt).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda1}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j"${JOBS:-2}" --target test_cuda_linear
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf .devcarry && mkdir -p .devcarry
cp "$BUILD/tests/cuda/linear/test_cuda_linear" .devcarry/
ldd .devcarry/test_cuda_linear | awk '/=> \// {print $3}' | grep -E 'libfmt|libgtest|libpcre2|libnlohmann|libcudart' | while read -r lib; do
  cp -L "$lib" .devcarry/
done
ls -la .devcarry
