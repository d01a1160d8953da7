#!/usr/bin/env bash
# Device run for the sm_90a wgmma FP8 GEMV (gemm/wgmma_gemv.cu): the linear correctness cases, the dense
# micro-benchmark (wgmma vs bulk vs f16 GEMV vs mma per shape and M), and the end-to-end decode A/B with the wgmma
# GEMV on/off. Usage (device): scripts/wgmma_gemv_device.sh; expects .gpubundle/gpucheck.tar.xz. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_bundle.sh
echo "== tests"; timeout 300 "$B/test_cuda_linear" --gtest_filter='LinearTest.*' > "$OUT/tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|actual|Which is|rel_l2|Expected" "$OUT/tests.log" | head -30
echo "== micro"; timeout 200 "$B/test_cuda_linear" --bench --dense-only > "$OUT/micro.log" 2>&1
grep -E " M=(1|8|16) " "$OUT/micro.log" | grep -vE "head|compressor" | head -60
echo "== e2e A/B"
BENCH_ARGS="${BENCH_ARGS:---layers 20 --context 256 --concurrency 1,16 --output-len 16}" ROUNDS=${ROUNDS:-1} OUT=$OUT/ab \
  timeout 400 scripts/bench_ab.sh "$B/flashseek" "wgmma=FLASHSEEK_WGMMA_GEMV=1" "bulk=FLASHSEEK_WGMMA_GEMV=0"
grep -E "^\s+(attn|moe|prepare|mhc|head)" "$OUT/ab/bench_wgmma_1.log" | head -24
