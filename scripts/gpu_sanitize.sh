#!/usr/bin/env bash
# compute-sanitizer over the op-consistency harness (issue 4: memcheck and racecheck clean on the harness), on the
# device machine, with the binaries staged by `scripts/gpu_check.sh --bundle` in .gpucheck/. The tools run in
# parallel (each on its own process; the GPU is shared) under one time limit each; the summary lists every tool x
# binary with its exit code and the sanitizer's own summary line. A timeout is reported as such, never as clean.
# Usage (device): scripts/gpu_sanitize.sh [seconds per run, default 200]     logs under $OUT (default out/sanitize)
set -uo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-200}
OUT=${OUT:-$PWD/out/sanitize}
mkdir -p "$OUT"
BIN=$PWD/.gpucheck
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FLASHSEEK_SOURCE_DIR=$PWD
command -v compute-sanitizer > /dev/null || { echo "no compute-sanitizer on this machine"; exit 2; }
# name | tool | binary | gtest filter (racecheck: the kernels with shared memory: attention incl. the 64-head
# cases, mHC, compressor, indexer; GEMV/MoE/sampling of the linear harness)
runs=(
  "memcheck_attention|memcheck|test_cuda_attention|-*Bench*"
  "racecheck_attention|racecheck|test_cuda_attention|-*Bench*"
  "memcheck_linear|memcheck|test_cuda_linear|-Sample.DistributionMatchesHostRules"
  "racecheck_linear|racecheck|test_cuda_linear|MoeLayer.*:MoeRoute.*:LinearTest.*Gemv*:LinearTest.SmallM*:LinearTest.SplitK*:LinearTest.Grouped*:Sample.Greedy*"
)
pids=()
for r in "${runs[@]}"; do
  IFS='|' read -r name tool bin filter <<< "$r"
  ( timeout "$LIMIT" compute-sanitizer --tool "$tool" --print-limit 20 --error-exitcode 99 "$BIN/$bin" \
      --gtest_brief=1 --gtest_filter="$filter" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
for r in "${runs[@]}"; do
  IFS='|' read -r name tool bin filter <<< "$r"
  rc=$(cat "$OUT/$name.rc")
  verdict="exit $rc"
  [ "$rc" = 124 ] && verdict="TIMEOUT after ${LIMIT}s (not clean, not dirty: unfinished)"
  echo "$name ($tool $bin --gtest_filter=$filter): $verdict; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$name.log" | tail -1); tests: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+' "$OUT/$name.log" | tr '\n' ' ')"
done | tee "$OUT/summary.txt"
