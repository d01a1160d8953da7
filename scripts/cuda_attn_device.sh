#!/bin/bash
# Runs on the GPU machine (device tool): the attention-side op-consistency harness (test_cuda_attention), then
# compute-sanitizer memcheck (every case; the prefill suites on their small cases) and racecheck (per suite, small
# attention shapes), then (when FS_ATTN_BENCH=1) the per-op decode and prefill timings. The binary is built on
# the development machine (same x86-64; only libfmt travels with it) into .attn_dev/ by scripts/cuda_attn_build.sh.
# Usage on the device: bash scripts/cuda_attn_device.sh   (logs under $OUT)
set -o pipefail
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.attn_dev:$LD_LIBRARY_PATH
BIN=./.attn_dev/test_cuda_attention
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== harness"
timeout 400 $BIN 2>&1 | tee "$OUT/harness.log" | grep -E "^\[  (FAILED|PASSED|  OK) |Failure|seed|Expected|Which is" | head -60
if [ "${FS_ATTN_SANITIZE:-1}" = 1 ]; then
  echo "== memcheck"
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter="${FS_SAN_FILTER:--CudaPrefill*}" > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|Invalid|FAILED" "$OUT/memcheck.log" | head -20
  # the prefill kernels on their small cases (FS_ATTN_SMALL skips the V4-shape ones)
  FS_ATTN_SMALL=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter='CudaPrefill*' > "$OUT/memcheck_prefill.log" 2>&1
  echo "memcheck prefill exit $?"; grep -E "ERROR SUMMARY|Invalid|FAILED" "$OUT/memcheck_prefill.log" | head -20
  echo "== racecheck"
  for suite in ${FS_RACE_SUITES:-CudaMhc CudaCompressor CudaIndexer CudaSparseAttention CudaPrefillAttention CudaPrefillIndexer}; do
    FS_ATTN_SMALL=1 timeout ${FS_RACE_TIMEOUT:-35} compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter="$suite.*" > "$OUT/racecheck_$suite.log" 2>&1
    echo "racecheck $suite exit $? $(grep -E 'RACECHECK SUMMARY' "$OUT/racecheck_$suite.log")"
  done
fi
if [ "${FS_ATTN_BENCH:-0}" = 1 ]; then
  echo "== bench"
  FS_ATTN_BENCH=1 timeout 500 $BIN --gtest_filter="*Bench*" 2>&1 | tee "$OUT/bench.log" | grep -vE "^\[" | head -120
fi
