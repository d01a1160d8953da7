#!/bin/bash
# Builds test_cuda_attention for sm_90a on the development machine (the CMake target, in BUILD, default
# build-attn, configured here for 90a when it is not yet) and stages it with the shared libraries the device image
# lacks (libfmt, libgtest) in .attn_dev/ for scripts/cuda_attn_device.sh (carry .attn_dev with the device call).
# The attention-side kernels now depend on the GEMM activation preparation and the MoE combine (fused epilogues of
# rmsnorm / mhc), so the test links the whole flashseek_cuda library: the first build takes a while on 2 cores,
# later ones rebuild only what changed.
set -e
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-attn}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release
nice cmake --build "$BUILD" -j2 --target test_cuda_attention
mkdir -p .attn_dev
BIN="$BUILD/tests/cuda/attention/test_cuda_attention"
cp "$BIN" .attn_dev/
ldd "$BIN" | awk '/=> \// {print $3}' | grep -E 'libfmt|libgtest|libgmock' | while read -r lib; do cp -L "$lib" .attn_dev/; done
echo "built .attn_dev/test_cuda_attention"
