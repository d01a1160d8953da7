#!/usr/bin/env bash
# Device half of the persistent streaming MoE kernels (src/cuda/moe/moe_stream.cu): op harness, MoE micro-bench
# (streaming variants vs per-tile GEMV vs mma), end-to-end decode bench A/B (FLASHSEEK_MOE_STREAM=1 default vs 0),
# memcheck on the MoE cases; logs in $OUT. Stays under ~4 minutes.
# Build here first: cmake --build build-stream --target test_cuda_linear flashseek, then stage the stripped binaries
# and their non-system libs (libfmt, libpcre2-8, libcpp-httplib) in .devcarry/ (scripts/moe_stream_stage.sh).
# Usage on the device: bash scripts/moe_stream_device.sh [--no-e2e]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/.devcarry" || { echo "no .devcarry"; exit 1; }
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for b in flashseek test_cuda_linear; do
  [ -f "$b.gz" ] && [ ! -f "$b" ] && gunzip -k "$b.gz" && chmod +x "$b"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
T='./test_cuda_linear'
echo "== tests (default)"
timeout 100 $T > "$OUT/test.log" 2>&1; echo "rc=$?"
grep -E "^\[  (FAILED|PASSED) |^\[       OK|Failure|Expected|Which is|path=|error" "$OUT/test.log" | head -30
echo "== micro-bench (MoE)"
timeout 60 $T --bench --moe-only --json "$OUT/bench-moe.json" > "$OUT/bench-moe.log" 2>&1; echo "rc=$?"
grep -E "copy|experts" "$OUT/bench-moe.log" | cut -c1-120
fsbench() {  # $1 = tag, rest = env
  local tag=$1; shift
  echo "== flashseek bench $tag"
  env "$@" timeout 75 ./flashseek bench --model "$ROOT/tests/data/configs/v4-flash.json" --dummy-weights --layers 20 \
    --context 256 --concurrency 1,16 --output-len 16 --json "$OUT/fsbench-$tag.json" > "$OUT/fsbench-$tag.log" 2>&1
  echo "rc=$?"
  grep -E "TPOT|roofline|copy" "$OUT/fsbench-$tag.log" | cut -c1-120
  grep -E "moe|expert" "$OUT/fsbench-$tag.log" | cut -c1-100 | head -12
}
if [ "${1:-}" != "--no-e2e" ]; then
  fsbench stream FLASHSEEK_MOE_STREAM=1
  fsbench old FLASHSEEK_MOE_STREAM=0
fi
if command -v compute-sanitizer >/dev/null; then
  echo "== memcheck (MoE cases)"
  timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='MoeLayer.*' > "$OUT/memcheck.log" 2>&1
  echo "rc=$?"; tail -2 "$OUT/memcheck.log"
fi
