#!/usr/bin/env bash
# Device run for the sm_90a wgmma FP4 expert kernels (moe/moe_wgmma.cu): the operand-convention probe
# (scripts/probes/wgmma_probe.cu, built next to the bundle as wgmma_probe), the MoE correctness cases (all expert
# paths), the MoE micro-benchmark (wgmma vs bulk vs GEMV), and the end-to-end decode A/B with the wgmma path on/off.
# Usage (device): scripts/wgmma_device.sh [--memcheck] [--full]; expects .gpubundle/gpucheck.tar.xz. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_bundle.sh
MEMCHECK=0; FULL=0
for a in "$@"; do case "$a" in --memcheck) MEMCHECK=1 ;; --full) FULL=1 ;; esac; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [ -x "$B/wgmma_probe" ]; then echo "== probe"; timeout 60 "$B/wgmma_probe" | tee "$OUT/probe.log" | tail -12; fi
echo "== tests (per stage, one-hot)"
timeout 200 "$B/test_cuda_linear" --gtest_filter='MoeLayer.Bulk*' > "$OUT/tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|actual|fast vs|slot .* got|Which is|Expected" "$OUT/tests.log" | head -40
if [ $FULL = 1 ]; then
  echo "== tests (whole layer, all paths)"
  timeout 300 "$B/test_cuda_linear" --gtest_filter='MoeLayer.Routed*:MoeRoute.*' > "$OUT/tests_layer.log" 2>&1; echo "rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure|actual" "$OUT/tests_layer.log" | head -20
fi
if [ $MEMCHECK = 1 ]; then
  echo "== memcheck"; timeout 300 compute-sanitizer --tool memcheck "$B/test_cuda_linear" --gtest_filter='MoeLayer.Bulk*' > "$OUT/memcheck.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/memcheck.log"
fi
echo "== micro"; timeout 200 "$B/test_cuda_linear" --bench --moe-only > "$OUT/micro.log" 2>&1; grep -E "moe" "$OUT/micro.log" | head -20
echo "== e2e A/B"
BENCH_ARGS="${BENCH_ARGS:---layers 20 --context 256 --concurrency 16 --output-len 16}" ROUNDS=${ROUNDS:-1} OUT=$OUT/ab \
  timeout 400 scripts/bench_ab.sh "$B/flashseek" "wgmma=FLASHSEEK_MOE_WGMMA=1" "bulk=FLASHSEEK_MOE_WGMMA=0"
grep -E "^\s+(attn|moe|prepare|mhc|head)" "$OUT/ab/bench_wgmma_1.log" | head -30
