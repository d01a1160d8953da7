#!/usr/bin/env bash
# Device run for the bulk-copy kernels (gemm/bulk_gemv.cu, moe/moe_bulk.cu): their correctness cases and the f16
# GEMV cases next to them, the linear + MoE micro-benchmark (bulk vs f16 GEMV vs mma per shape), and the end-to-end
# decode bench A/B: both bulk paths on, the dense bulk GEMV off, both off, PDL off (alternating variants).
# Usage (device): scripts/bulk_device.sh [--memcheck] [--no-micro]; expects .gpubundle/gpucheck.tar.xz
# (scripts/gpu_check.sh --bundle, then tar -cJf of .gpucheck). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_bundle.sh
MEMCHECK=0; MICRO=1
for a in "$@"; do case "$a" in --memcheck) MEMCHECK=1 ;; --no-micro) MICRO=0 ;; esac; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
F='LinearTest.BulkGemv*:LinearTest.SmallM*:LinearTest.GemvSplitK*:LinearTest.RawActivation*:MoeLayer.*:MoeRoute.*'
echo "== tests"; timeout 300 "$B/test_cuda_linear" --gtest_filter="$F" > "$OUT/tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|actual|bulk vs" "$OUT/tests.log" | head -30
if [ $MEMCHECK = 1 ]; then
  echo "== memcheck"; timeout 400 compute-sanitizer --tool memcheck "$B/test_cuda_linear" --gtest_filter='LinearTest.BulkGemv*:MoeLayer.Bulk*' > "$OUT/memcheck.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/memcheck.log"
fi
if [ $MICRO = 1 ]; then
  echo "== micro"; timeout 300 "$B/test_cuda_linear" --bench > "$OUT/micro.log" 2>&1; grep -E " M=(1|8|16) " "$OUT/micro.log" | grep -vE "head|compressor" | head -60
fi
if [ -x "$B/test_cuda_backend" ]; then
  echo "== backend"; timeout 400 "$B/test_cuda_backend" > "$OUT/backend.log" 2>&1; echo "rc=$?"
  grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/backend.log" | head -10
fi
echo "== e2e A/B"
BENCH_ARGS="${BENCH_ARGS:---layers 20 --context 256 --concurrency 1,16 --output-len 16}" ROUNDS=${ROUNDS:-1} OUT=$OUT/ab \
  timeout 500 scripts/bench_ab.sh "$B/flashseek" "bulk=FLASHSEEK_BULK_GEMV=1" "nodense=FLASHSEEK_BULK_GEMV=0" \
  "none=FLASHSEEK_BULK_GEMV=0 FLASHSEEK_MOE_BULK=0" "nopdl=FLASHSEEK_PDL=0"
grep -E "^\s+(attn|moe|prepare|mhc|head)" "$OUT/ab/bench_bulk_1.log" | head -48
