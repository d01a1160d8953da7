#!/usr/bin/env bash
# Device run for the bulk-copy FP4 expert kernels (moe_bulk.cu): MoE correctness cases, the MoE micro-benchmark
# (bulk vs per-tile GEMV vs mma), and the end-to-end decode bench with FLASHSEEK_MOE_BULK=1 / 0 (A/B, alternating).
# Usage (device): scripts/moe_bulk_device.sh [--memcheck] ; expects .gpubundle/gpucheck.tar.xz (scripts/gpu_check.sh
# --bundle, then tar -cJf of .gpucheck). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" x
tar -xJf .gpubundle/gpucheck.tar.xz -C x
B=$(dirname "$(find x -name flashseek -type f | head -1)")
export LD_LIBRARY_PATH=$PWD/$B:${LD_LIBRARY_PATH:-} FLASHSEEK_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "== MoE correctness"; timeout 240 "$B/test_cuda_linear" --gtest_filter='MoeLayer.Bulk*:MoeLayer.*:MoeRoute.*' > "$OUT/moe_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|rel_l2|bulk path|expected" "$OUT/moe_tests.log" | head -30
if [ "${1:-}" = "--memcheck" ]; then
  echo "== memcheck"; timeout 300 compute-sanitizer --tool memcheck "$B/test_cuda_linear" --gtest_filter='MoeLayer.*' > "$OUT/memcheck.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/memcheck.log"
fi
echo "== MoE micro"; timeout 200 "$B/test_cuda_linear" --bench --moe-only > "$OUT/moe_micro.log" 2>&1; grep -i "moe" "$OUT/moe_micro.log" | tail -12
echo "== e2e A/B"
BENCH_ARGS="${BENCH_ARGS:---layers 20 --context 256 --concurrency 1,16 --output-len 16}" ROUNDS=${ROUNDS:-1} OUT=$OUT/ab \
  timeout 400 scripts/bench_ab.sh "$B/flashseek" "bulk=FLASHSEEK_MOE_BULK=1" "gemv=FLASHSEEK_MOE_BULK=0"
for f in "$OUT"/ab/bench_bulk_1.log; do grep -E "^\s*(moe|attn|mhc|prepare|head|norm|total)|op " "$f" | head -60; done
