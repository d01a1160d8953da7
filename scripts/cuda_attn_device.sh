#!/bin/bash
# Runs on the GPU machine (device tool): the attention-side op-consistency harness (test_cuda_attention), then
# compute-sanitizer memcheck and racecheck over it, then (when FS_ATTN_BENCH=1) the per-op decode timings.
# The binary is built on the development machine (same x86-64; only libfmt travels with it) into .attn_dev/:
#   see the comment in tests/cuda/attention/CMakeLists.txt for the manual link line.
# Usage on the device: bash scripts/cuda_attn_device.sh   (logs under $OUT)
set -o pipefail
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.attn_dev:$LD_LIBRARY_PATH
BIN=./.attn_dev/test_cuda_attention
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== harness"
timeout 240 $BIN 2>&1 | tee "$OUT/harness.log" | grep -E "^\[  (FAILED|PASSED|  OK) |Failure|rel_l2|seed|Expected|Which is" | head -80
if [ "${FS_ATTN_SANITIZE:-1}" = 1 ]; then
  echo "== memcheck"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter="${FS_SAN_FILTER:-*}" > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|Invalid|FAILED" "$OUT/memcheck.log" | head -20
  echo "== racecheck"
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter="${FS_SAN_FILTER:-*}" > "$OUT/racecheck.log" 2>&1
  echo "racecheck exit $?"; grep -E "ERROR SUMMARY|hazard|FAILED" "$OUT/racecheck.log" | head -20
fi
if [ "${FS_ATTN_BENCH:-0}" = 1 ]; then
  echo "== bench"
  FS_ATTN_BENCH=1 timeout 120 $BIN --gtest_filter='*Bench*' 2>&1 | tee "$OUT/bench.log" | grep -vE "^\[" | head -60
fi
