#!/usr/bin/env bash
# Device check and A/B of the per-lane cp.async weight copies (session 6, written after its device time was used up):
# the wgmma FP4 expert kernels (FLASHSEEK_MOE_WGMMA_CPASYNC=1) and the wgmma FP8 GEMV (FLASHSEEK_WGMMA_GEMV_CPASYNC=1)
# replace the per-thread cp.async.bulk row copies, which ptxas issues one lane at a time (~8 instructions per row,
# ~256 per warp and stage in the expert kernel), by 16-byte cp.async per lane completing on the same mbarrier.
# Runs the linear harness with both switches on (correctness), memcheck / racecheck on the small cases, then the
# decode bench A/B. Logs under $OUT. Usage (device): scripts/cpasync_device.sh (after scripts/gpu_check.sh --bundle).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_bundle.sh
# The f16-operand conventions for the planned wo_a wgmma GEMV (scripts/probes/wgmma_f16_probe.cu; copy the binary
# built with the nvcc line in its header into .gpucheck before bundling).
if [ -x "$B/wgmma_f16_probe" ]; then timeout 60 "$B/wgmma_f16_probe" | tee "$OUT/f16_probe.log" | tail -6; fi
export FLASHSEEK_MOE_WGMMA_CPASYNC=1 FLASHSEEK_WGMMA_GEMV_CPASYNC=1
timeout 400 "$B/test_cuda_linear" --gtest_filter='-*Bench*' > "$OUT/linear_cpa.log" 2>&1; echo "test_cuda_linear (cp.async) rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/linear_cpa.log" | head -8
timeout 200 compute-sanitizer --tool memcheck "$B/test_cuda_linear" \
  --gtest_filter='LinearTest.WgmmaGemv*:MoeLayer.BulkDownOneHot*:MoeSwiglu.*' > "$OUT/memcheck_cpa.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$OUT/memcheck_cpa.log"
timeout 200 compute-sanitizer --tool racecheck "$B/test_cuda_linear" --gtest_filter='MoeLayer.BulkDownOneHot*' \
  > "$OUT/racecheck_cpa.log" 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY" "$OUT/racecheck_cpa.log" | tail -1
timeout 300 "$B/test_cuda_backend" --gtest_filter='-*Bench*' > "$OUT/backend_cpa.log" 2>&1; echo "test_cuda_backend (cp.async) rc=$?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/backend_cpa.log" | head -8
unset FLASHSEEK_MOE_WGMMA_CPASYNC FLASHSEEK_WGMMA_GEMV_CPASYNC
BENCH_ARGS=${BENCH_ARGS:---layers 20 --context 256 --concurrency 16 --output-len 32} ROUNDS=${ROUNDS:-2} OUT=$OUT \
  bash scripts/bench_ab.sh "$B/flashseek" "base=FLASHSEEK_MOE_WGMMA_CPASYNC=0" "moe=FLASHSEEK_MOE_WGMMA_CPASYNC=1" \
  "gemv=FLASHSEEK_WGMMA_GEMV_CPASYNC=1" "both=FLASHSEEK_MOE_WGMMA_CPASYNC=1 FLASHSEEK_WGMMA_GEMV_CPASYNC=1" 2>&1 | tail -6
