#!/usr/bin/env bash
# Runs the linear-algebra GPU harness on the device machine (CUDA engineer 1): op-consistency tests, the
# micro-benchmark (GB/s vs measured copy bandwidth) and compute-sanitizer memcheck/racecheck, logs under $OUT.
# The binary is built here (scripts/cuda_linear_build.sh: sm_90a, nvcc 13.0 like the device) and carried in
# .devcarry/ with the shared libraries it needs that the device image lacks (libfmt).
# Usage on the device:  bash scripts/cuda_linear_device.sh [--quick]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.devcarry" || { echo "no .devcarry (build here first)"; exit 1; }
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== tests"
timeout 240 ./test_cuda_linear --gtest_output=json:"$OUT/gtest.json" 2>&1 | tee "$OUT/test.log" | grep -E "^\[  (FAILED|PASSED|  OK) |Failure|error|Expected|Which is|seed=|plan:" | head -80
echo "== bench"
timeout 200 ./test_cuda_linear --bench --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
if [ "${1:-}" != "--quick" ] && command -v compute-sanitizer >/dev/null; then
  echo "== memcheck"
  timeout 150 compute-sanitizer --tool memcheck --print-limit 20 ./test_cuda_linear \
      --gtest_filter='-Sample.DistributionMatchesHostRules' > "$OUT/memcheck.log" 2>&1
  tail -3 "$OUT/memcheck.log"
  echo "== racecheck"
  timeout 100 compute-sanitizer --tool racecheck --print-limit 20 ./test_cuda_linear \
      --gtest_filter='MoeLayer.*:Sample.Greedy*:LinearTest.SplitK*:LinearTest.Grouped*' > "$OUT/racecheck.log" 2>&1
  tail -3 "$OUT/racecheck.log"
fi
