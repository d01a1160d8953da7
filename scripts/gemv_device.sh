#!/usr/bin/env bash
# Device half of the decode-GEMV work (CUDA engineer): op harness (default and the selectable variants),
# micro-benchmark per variant, the end-to-end decode bench per variant, memcheck on the GEMV cases; logs in $OUT.
# Build here first: BUILD=build-gemv scripts/cuda_linear_build.sh, then copy the stripped flashseek binary,
# libpcre2 and libcpp-httplib into .devcarry/. Usage on the device: bash scripts/gemv_device.sh
# Variants (environment): FLASHSEEK_GEMV_KW=4 (four warps split K per 16-row tile; default 1 = one long-lived warp),
# FLASHSEEK_GEMV_SIMT1=0 (M = 1 dense linears on the tensor-core GEMV, default: SIMT GEMV).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/.devcarry" || { echo "no .devcarry"; exit 1; }
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for b in flashseek test_cuda_linear; do  # carried gzipped when the carry would exceed its limit
  [ -f "$b.gz" ] && [ ! -f "$b" ] && gunzip -k "$b.gz" && chmod +x "$b"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
T='./test_cuda_linear'
echo "== tests (default)"
timeout 120 $T > "$OUT/test.log" 2>&1; echo "rc=$?"
grep -E "^\[  (FAILED|PASSED) |Failure|Expected|Which is|seed=|error" "$OUT/test.log" | head -20
GF='LinearTest.SmallM*:LinearTest.Raw*:LinearTest.Gemv*:LinearTest.Grouped*:LinearTest.Fp*:MoeLayer.*'
for v in "FLASHSEEK_GEMV_KW=4" "FLASHSEEK_GEMV_SIMT1=0"; do
  echo "== tests $v"
  env $v timeout 90 $T --gtest_filter="$GF" > "$OUT/test-$v.log" 2>&1; echo "rc=$?"
  grep -E "^\[  (FAILED|PASSED) |Failure|Expected|Which is|seed=|error" "$OUT/test-$v.log" | head -10
done
echo "== micro-bench (default)"
timeout 120 $T --bench --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "rc=$?"
grep -E "copy|gemv|experts" "$OUT/bench.log" | grep -vE "M=64|compressor|head|M=3 " | cut -c1-100
echo "== micro-bench FLASHSEEK_GEMV_KW=4"
FLASHSEEK_GEMV_KW=4 timeout 100 $T --bench > "$OUT/bench-kw4.log" 2>&1; echo "rc=$?"
grep -E "gemv" "$OUT/bench-kw4.log" | grep -E "wq_b|wo_b|shared w1|experts" | grep -vE "M=3 " | cut -c1-100
echo "== micro-bench FLASHSEEK_GEMV_SIMT1=0 (M=1 dense on the tensor GEMV)"
FLASHSEEK_GEMV_SIMT1=0 timeout 100 $T --bench --dense-only > "$OUT/bench-nosimt.log" 2>&1; echo "rc=$?"
grep -E "M=1 .*gemv" "$OUT/bench-nosimt.log" | cut -c1-100
fsbench() {  # $1 = tag, rest = env
  local tag=$1; shift
  echo "== flashseek bench $tag"
  env "$@" timeout 150 ./flashseek bench --model "$ROOT/tests/data/configs/v4-flash.json" --dummy-weights --layers 20 \
    --context 256 --concurrency 1,16 --output-len 8 --json "$OUT/fsbench-$tag.json" > "$OUT/fsbench-$tag.log" 2>&1
  echo "rc=$?"
  grep -E "TPOT|roofline" "$OUT/fsbench-$tag.log" | cut -c1-110
}
fsbench default FLASHSEEK_NONE=0
grep -E "op  |prepare|moe\.|attn.w" "$OUT/fsbench-default.log" | cut -c1-80
fsbench kw4 FLASHSEEK_GEMV_KW=4
if command -v compute-sanitizer >/dev/null; then
  echo "== memcheck (GEMV cases)"
  timeout 150 compute-sanitizer --tool memcheck --print-limit 10 $T \
    --gtest_filter='LinearTest.SmallM*:LinearTest.Raw*:MoeLayer.*' > "$OUT/memcheck.log" 2>&1; echo "rc=$?"
  tail -2 "$OUT/memcheck.log"
fi
