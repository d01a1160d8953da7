#!/usr/bin/env bash
# End-of-session GPU check (device): every GPU test executable (op harness + backend), compute-sanitizer memcheck on
# the bulk-copy and wgmma kernels' cases, racecheck on the small ones, and the decode bench on full-size V4-Flash
# layers. Logs under $OUT.
# Usage (device): scripts/final_device.sh ; expects .gpubundle/gpucheck.tar.xz (scripts/gpu_check.sh --bundle).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_bundle.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for t in test_cuda_linear test_cuda_attention test_cuda_backend; do
  timeout 400 "$B/$t" --gtest_filter='-*Bench*' > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests? ran" "$OUT/$t.log" | head -8
done
# (MoeLayer.BulkPathMatchesGemvPathPerStage now holds a 64-expert case with ~1600 items: too slow under memcheck.)
timeout 400 compute-sanitizer --tool memcheck "$B/test_cuda_linear" \
  --gtest_filter='LinearTest.BulkGemv*:LinearTest.WgmmaGemv*:MoeRoute.*:MoeLayer.BulkDownOneHot*:MoeSwiglu.*' \
  > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"; tail -2 "$OUT/memcheck.log"
timeout 120 compute-sanitizer --tool memcheck "$B/test_cuda_attention" \
  --gtest_filter='CudaMhc.Prepared*:CudaMhc.Fused*:CudaNorm.RmsnormPrepared*' > "$OUT/memcheck_attn.log" 2>&1
echo "memcheck (fused prepared outputs, fused mhc_post / combine) rc=$?"; tail -1 "$OUT/memcheck_attn.log"
timeout 240 compute-sanitizer --tool racecheck "$B/test_cuda_linear" \
  --gtest_filter='MoeRoute.Fused*:MoeLayer.BulkDownOneHot*:MoeSwiglu.*' > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"
grep -E "RACECHECK SUMMARY|hazard|PASSED|FAILED" "$OUT/racecheck.log" | tail -4
timeout 120 compute-sanitizer --tool racecheck "$B/test_cuda_attention" --gtest_filter='CudaMhc.Fused*' \
  > "$OUT/racecheck_attn.log" 2>&1; echo "racecheck (fused mhc_post / combine) rc=$?"
grep -E "RACECHECK SUMMARY" "$OUT/racecheck_attn.log" | tail -1
timeout 300 "$B/flashseek" bench --model tests/data/configs/v4-flash.json --dummy-weights --layers 20 --context 256 \
  --concurrency 1,16 --output-len 32 --seed 1 --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
grep -vE "^\s+(attn|moe|mhc|head|prepare|embed|final|sample|hc)" "$OUT/bench.log" | tail -25
