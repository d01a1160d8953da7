#!/usr/bin/env bash
# The GPU script of flashseek: every GPU run of the project is one subcommand here.
#
# On the build machine (has the dev packages; builds for sm_90a with nvcc as on the device):
#   bundle [--extra NAME=PATH]...  build flashseek, test_cuda_linear, test_cuda_attention, test_cuda_backend,
#                                  test_cuda_comm and the probes (BUILD folder, default build-gpucheck; JOBS,
#                                  default 2), stage them
#                                  with the shared libraries the device lacks (fmt, gtest, pcre2, httplib, cudart;
#                                  CUPTI for bench --timeline) in .gpucheck/bin and pack that into .gpucheck/bundle.tar.xz, the one file to carry
#                                  to the device. --extra adds another binary and its libraries, e.g. the flashseek
#                                  of an older commit for `compare`.
# On the device (runs the bundle, unpacked from .gpucheck/bundle.tar.xz on first use; FLASHSEEK_BUILD=DIR runs the
# binaries of a build folder instead):
#   harness [--quick]        every GPU test executable (the op harness of each kernel family and the backend)
#   perf [FILTER]            the op harness's perf mode: every family (or those whose name contains FILTER) at
#                            V4-Flash shapes, each variant against the copy bandwidth / cuBLASLt GEMM ceilings
#   sanitize [SECONDS]       compute-sanitizer memcheck and racecheck on the harness's --quick lists, the backend
#                            test and a short end-to-end run (in parallel, SECONDS per run, default 420);
#                            SANITIZE_ONLY=name,name runs only those runs (names as in the summary, e.g.
#                            racecheck_backend), so that a long one gets the machine to itself;
#                            SANITIZE_SHARDS=N splits each test-binary run into N gtest shards run side by side (a
#                            run is clean when every shard is; the tests' CPU references then use more cores); the
#                            backend runs together take at most one shard per 40 GB of GPU memory
#   e2e [--diagnose]         flashseek logits, CUDA against the goldens / the CPU reference, both criteria (below);
#                            --diagnose adds the per-layer localization on tiny-a / tiny-b; then paths that must
#                            keep the default path's bits (gemv_chain, query_chain on chain-shapes; indexer_branch,
#                            the indexer's form 0 and mhc_one_launch on tiny-a) against it, bit for bit. Goldens a
#                            backend or numerics refuses by design (EXPECTED_REFUSALS) must end in the named error; the
#                            comparisons that need those outputs are skipped, noted
#   envelopes                (any machine, CPU only) the reference's own envelopes for every end-to-end case
#   bench                    flashseek bench envelope: decode at 1/16/64/128/256 sequences at context 256, 1/16 at
#                            8192, prefill of one sequence of 256/1024/4096/16384 tokens (PREFILL_LENGTHS), and TP2 /
#                            EP2 as virtual ranks (LAYERS, default 20, full-size layers; PREFILL_CHUNK)
#   layouts [LAYOUTS]        virtual ranks on this one GPU (issue 16): TP2, TP4, EP2, EP4, TP2xEP2 (or LAYOUTS)
#                            against CUDA TP1 on every golden and tiny-sharding, exact and release numerics, envelope
#                            criterion (TP1 with --perturb-norms as the envelope); a layout a model cannot be split
#                            into (flashseek plan refuses it) is reported, not failed
#   ab "NAME=ENV ..." ...    A/B of environment variants (e.g. FLASHSEEK_DISABLE=wgmma_gemv) through flashseek bench,
#                            variants alternating for ROUNDS rounds (2); BENCH_ARGS overrides the bench flags; a word
#                            BIN=PATH in a variant runs that flashseek binary (before / after comparisons)
#   timeline "NAME=ENV ..." ...  one layer's kernels per variant from CUPTI (flashseek bench --timeline
#                            TIMELINE_STEPS, default 3; TIMELINE_ARGS, default one sequence at context 256): start, end
#                            and charged time of each kernel, in logs/timeline_NAME.log
#   served                   flashseek serve (the bench model, LAYERS layers, dummy weights, CUDA; SERVE_MODEL: a model
#                            directory instead, SERVE_ARGS replaces the flags, SERVE_ENV is the server's environment) and bench-serve against it: 256 prompt
#                            / 64 output tokens on /v1/completions at concurrency 16, 1, 64 (SERVE_CONCURRENCY),
#                            greedy, then 16 sampled (temperature 0.8, top-p 0.95); a failed request fails the step
#   curve                    the whole curve of one build: decode at 1/2/4/8/16/32/64/128/256 sequences (context 256)
#                            and 1/16/64/128 (context 8192), prefill of 256/1024/4096/8192/32768 tokens, then served
#                            (RUN_ENV: the benches' environment, e.g. FLASHSEEK_FORCE=name)
#   diagnose [MODEL TOKENS PREFILL NUMERICS] [NAME=ENV ...]   CUDA vs CPU logits per --layers N (default: tiny-a
#                            and tiny-b, exact), then the full model per environment variant: localizes a mismatch
#   compare OLD_BIN NEW_BIN  logits of two flashseek binaries on every committed golden, CPU exact / CPU release /
#                            CUDA exact (reference) / CUDA release (production); a table; exit 1 on any difference
#   probes                   the wgmma operand-convention probes and the weight-stream probe (scripts/probes)
#   ncu BINARY REGEX [ARGS]  Nsight Compute on the kernels matching REGEX in a bundled binary (SKIP, COUNT)
#   all                      harness, sanitize, e2e, perf, bench, probes in a row (tens of minutes: where a run has a
#                            time limit, run the subcommands separately)
#   multi-gpu STEP [ARGS]    issue 17 on a machine with two or more GPUs (kind nvidia-h200-x2), NCCL_NVLS_ENABLE=0
#                            exported; refused (exit 3) with fewer GPUs. One STEP per device call:
#     comm                   test_cuda_comm across the GPUs (peer one-shot / two-shot and NCCL, the own all-reduce
#                            bit for bit against its rank-order reference, graphs; NCCL must load) and its
#                            micro-benchmark: all-reduce of 8 KB .. 1 MB inside CUDA graphs, own one-shot / two-shot
#                            vs NCCL (graphs and eager), one rank per GPU and, for comparison, 2 virtual ranks on GPU 0
#     correctness            TP2 and EP2 against TP1 on every e2e case and tiny-sharding, per communicator and
#                            numerics, envelope criterion: against the CPU reference (its --perturb-norms run as the
#                            envelope) and against CUDA TP1 (CUDA TP1 --perturb-norms as the envelope); a layout a
#                            model cannot be split into (flashseek plan refuses it) is reported, not failed
#     bench [LAYOUTS] [COMMS]  flashseek bench, the whole 43-layer V4-Flash with dummy weights (default "TP2 EP2", every
#                            communicator): decode at 1 / 16 / 64 sequences at contexts 256 and 8,192, prefill of
#                            8,192 tokens; then the cost model (scripts/parallel_cost_model.py) for the comparison
#     serve [LAYOUTS] [COMMS]  flashseek serve on the same model + bench-serve, 1,024 prompt / 256 output tokens at
#                            concurrency 1, 16, 64 (default TP2, the first communicator)
#                            Ranks go on separate GPUs through MULTI_GPU_ARGS, flashseek flags added to every
#                            multi-rank run (default: "--devices 0,1,.." when `flashseek bench --help` lists
#                            --devices; without either the backend steps fail saying so). Communicators: COMMS, words
#                            NAME:VAR=VALUE (default "own:FLASHSEEK_COMM=peer nccl:FLASHSEEK_COMM=nccl"), the
#                            environment of each multi-rank run per communicator.
# Results go to $OUT (default out/gpu_check): summary.txt (every verdict) and logs.tar.gz (every log and JSON).
# Exit status: 0 when every step passed, 1 when one failed, 2 on bad usage, 3 when multi-gpu lacks a second GPU.
#
# End-to-end criteria: scripts/compare_logits.py per position: literal (max rel err <= 2e-2, argmax >= 99%) and the
# envelope criterion against the reference's own sensitivity (the CPU reference of the same numerics run again with
# `flashseek logits --perturb-norms $PERTURB_SEED`, every RMSNorm weight moved by one bf16 rounding): median and p90
# <= max(1.5 x envelope, 2e-2), argmax >= envelope - 2 points. Cases: every golden (exact numerics against the
# golden's logits), tiny-a, tiny-b, tiny-a-no-decisions (against the CPU exact); release numerics against the CPU
# release.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
# NVLink SHARP (multicast) stays off in every NCCL this script starts: on shared machines it can take GPUs out of service.
export FLASHSEEK_SOURCE_DIR=$ROOT PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
STAGE=$ROOT/.gpucheck
TARGETS=(flashseek test_cuda_linear test_cuda_attention test_cuda_backend test_cuda_comm)
PROBES=(wgmma_probe wgmma_f16_probe weight_stream_probe)  # scripts/probes/NAME.cu, built by bundle, run by probes
GPU_TESTS=(test_cuda_linear test_cuda_attention test_cuda_backend test_cuda_comm)
PERTURB_SEED=${PERTURB_SEED:-1}

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "gpu_check: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------------------- bundle
# Libraries the device image lacks; everything else (libc, libstdc++, the driver) comes from the device.
BUNDLED_LIBS='libfmt|libgtest|libgmock|libpcre2|libcpp-httplib|libcudart'

stage_binary() {  # path name: copies a binary and the bundled libraries it needs into .gpucheck/bin
  cp "$1" "$STAGE/bin/$2"
  ldd "$1" | awk '/=> \// {print $3}' | grep -E "$BUNDLED_LIBS" | while read -r lib; do
    cp -L "$lib" "$STAGE/bin/"
  done
}

cmd_bundle() {
  local extras=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --extra) [ $# -ge 2 ] && [[ "$2" == *=* ]] || die "--extra needs NAME=PATH"; extras+=("$2"); shift 2 ;;
      *) die "bundle: unknown argument $1" ;;
    esac
  done
  local build=${BUILD:-build-gpucheck}
  # A configure that failed leaves a cache but no build files: configure again then, not only when the folder is new.
  if [ ! -f "$build/CMakeCache.txt" ] || { [ ! -f "$build/Makefile" ] && [ ! -f "$build/build.ninja" ]; }; then
    cmake -S . -B "$build" -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release || die "configure failed"
  fi
  nice cmake --build "$build" -j"${JOBS:-2}" --target "${TARGETS[@]}" || die "build failed"
  rm -rf "$STAGE" && mkdir -p "$STAGE/bin"
  local t f
  for t in "${TARGETS[@]}"; do
    f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || die "$t was not built in $build"
    stage_binary "$f" "$t"
  done
  for e in "${extras[@]}"; do
    [ -x "${e#*=}" ] || die "--extra ${e}: not an executable"
    stage_binary "${e#*=}" "${e%%=*}"
  done
  # CUPTI for the kernel timeline (flashseek bench --timeline), loaded at run time from beside the binaries.
  local cupti
  cupti=$(ls /usr/local/cuda/lib64/libcupti.so.[0-9]* /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.[0-9]* \
    2> /dev/null | head -1)
  [ -z "$cupti" ] || cp -L "$cupti" "$STAGE/bin/"
  if command -v nvcc > /dev/null; then
    for p in "${PROBES[@]}"; do
      nvcc -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Isrc \
        -o "$STAGE/bin/$p" "scripts/probes/$p.cu" \
        || die "probe $p failed to build"
    done
  fi
  # One xz stream over all files: the binaries share most of their bytes (the kernels of flashseek_cuda), which a
  # 64 MB dictionary finds across files.
  tar -C "$STAGE" -cf - bin | xz -9 -T1 > "$STAGE/bundle.tar.xz" || die "packing failed"
  ls -la "$STAGE/bin"
  local size
  size=$(stat -c %s "$STAGE/bundle.tar.xz")
  echo "bundle: $STAGE/bundle.tar.xz, $((size / 1048576)) MiB (carry .gpucheck/bundle.tar.xz; the device call carries at most 64 MiB)"
  [ "$size" -lt $((60 * 1048576)) ] || echo "bundle: WARNING: larger than 60 MiB"
}

# ------------------------------------------------------------------------------------------------- device helpers
OUT=${OUT:-$ROOT/out/gpu_check}
LOG=$OUT/logs
SUMMARY=$OUT/summary.txt
FAILED=0
REFUSED=" "  # e2e: outputs of the current case's runs refused as expected (EXPECTED_REFUSALS)
note() { echo "$*" | tee -a "$SUMMARY"; }
fail() { note "FAIL: $*"; FAILED=1; }

setup_device() {  # BIN: the binaries; LIBS: their library path (bundled libraries, cuBLASLt for perf mode)
  if [ -n "${FLASHSEEK_BUILD:-}" ]; then
    BIN=$(mktemp -d)  # links to the build folder's binaries (outside $OUT: results only there)
    for t in "${TARGETS[@]}"; do
      f=$(find "$FLASHSEEK_BUILD" -type f -name "$t" -perm -u+x | head -1); [ -n "$f" ] && ln -sf "$(realpath "$f")" "$BIN/$t"
    done
  else
    BIN=$STAGE/bin
    if [ ! -d "$BIN" ]; then
      [ -f "$STAGE/bundle.tar.xz" ] || die "no $STAGE/bundle.tar.xz: run 'scripts/gpu_check.sh bundle' on the build machine and carry it (or set FLASHSEEK_BUILD)"
      tar -C "$STAGE" -xJf "$STAGE/bundle.tar.xz" || die "cannot unpack $STAGE/bundle.tar.xz"
    fi
  fi
  LIBS=$BIN
  # cuBLASLt (perf mode's GEMM ceiling, opened at run time): the CUDA toolkit's or the one in Python's nvidia wheels.
  local d
  for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s) for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null) /usr/local/cuda/lib64; do
    for lib in "$d"/libcublasLt.so* "$d"/lib/libcublasLt.so*; do
      [ -e "$lib" ] && { LIBS=$LIBS:$(dirname "$lib"); break 2; }
    done
  done
  LDP=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OUT
  mkdir -p "$LOG"
  : >> "$SUMMARY"
}

# Runs a bundled binary with its libraries.
run_bin() { env LD_LIBRARY_PATH="$LDP" "$@"; }
fs() { run_bin "$FS" "$@"; }

header() {
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | head -1)
  note "== gpu_check $1 $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown) on ${gpu:-no GPU}"
}

# The verdict of a gtest log (works with --gtest_brief=1, which prints only failures and the totals), the names of
# the failed tests and the harness's variant-coverage lines.
gtest_verdict() {  # log name rc
  local passed failed
  passed=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\..*/\1/p' "$1" | tail -1)
  failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$1" | sed -E 's/ \([0-9]+ ms\)$//' | sort -u | wc -l)
  if [ "$3" = 124 ]; then fail "$2: TIMEOUT (${passed:-?} passed before it)"
  elif [ "$3" != 0 ] || [ "$failed" != 0 ] || [ -z "$passed" ]; then fail "$2: exit $3, ${passed:-0} passed, $failed failed"
  elif [ "$passed" = 0 ]; then fail "$2: no test ran to completion (all skipped: no GPU visible?)"
  else note "$2: ${passed} passed"; fi
  grep -E '^\[  FAILED  \] [A-Za-z]' "$1" | sed -E 's/ \([0-9]+ ms\)$//' | sort -u | head -20 | tee -a "$SUMMARY"
  grep -E '^\[ coverage \]' "$1" | tee -a "$SUMMARY"
}

# ---------------------------------------------------------------------------------------------------------- harness
cmd_harness() {
  local quick=()
  case "$#:${1:-}" in
    0:) ;;
    1:--quick) quick=(--quick) ;;
    *) die "harness: usage: harness [--quick]" ;;
  esac
  header "harness ${quick[*]}"
  for t in "${GPU_TESTS[@]}"; do
    [ -x "$BIN/$t" ] || { fail "$t: not in the bundle"; continue; }
    local args=("${quick[@]}")
    [ "$t" = test_cuda_backend ] || [ "$t" = test_cuda_comm ] && args=()  # these tests have no modes
    timeout "${TEST_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" "$BIN/$t" "${args[@]}" --gtest_brief=1 > "$LOG/$t.log" 2>&1
    gtest_verdict "$LOG/$t.log" "$t${args[*]:+ ${args[*]}}" $?
  done
}

# ------------------------------------------------------------------------------------------------------------- perf
cmd_perf() {
  local filter=()
  [ $# -le 1 ] || die "perf: usage: perf [FILTER]"
  [ $# = 1 ] && filter=(--perf-filter "$1")
  header "perf ${1:-}"
  local matched=0
  for t in test_cuda_linear test_cuda_attention; do
    [ -x "$BIN/$t" ] || { fail "$t: not in the bundle"; continue; }
    timeout "${PERF_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" "$BIN/$t" --perf "${filter[@]}" \
      --json "$LOG/perf_$t.json" > "$LOG/perf_$t.log" 2>&1
    local rc=$?
    [ $rc = 3 ] && continue  # no family of this binary matches the filter
    matched=1
    cat "$LOG/perf_$t.log" >> "$SUMMARY"
    cat "$LOG/perf_$t.log"
    [ $rc = 0 ] || fail "$t --perf: exit $rc"
  done
  [ "${matched:-0}" = 1 ] || fail "perf: no family matches '${1:-}'"
}

# --------------------------------------------------------------------------------------------------------- sanitize
# 300 random token ids in [2, vocab_size of the config) with seed 11: the token file of a case without a golden.
random_tokens() {  # cfg out
  local vocab
  vocab=$(python3 -c "import json; print(json.load(open('$1'))['vocab_size'])")
  python3 -c "import random; r=random.Random(11); print(' '.join(str(r.randrange(2, $vocab)) for _ in range(300)))" > "$2"
}

# A tiny checkpoint and token file for the end-to-end runs (name: a config under tests/data/configs).
make_tiny() {  # name dir -> dir/name (checkpoint) and dir/name.tok (300 random tokens)
  local cfg=tests/data/configs/$1.json
  random_tokens "$cfg" "$2/$1.tok"
  fs gen-checkpoint --config "$cfg" --out "$2/$1" --seed 7 > "$LOG/gen_$1.log" 2>&1
}

cmd_sanitize() {
  local limit=${1:-420}
  [[ "$limit" =~ ^[0-9]+$ ]] || die "sanitize: SECONDS must be a number, got '$limit'"
  header "sanitize (${limit}s per run)"
  command -v compute-sanitizer > /dev/null || { fail "compute-sanitizer is not installed"; return; }
  local work; work=$(mktemp -d)
  # The kernel trace test needs CUPTI, which cannot attach while a sanitizer holds the same callback interface
  # ("CUPTI could not be loaded"); the kernels it traces run in the other backend tests.
  local backend_filter='-CudaParts.DummyWeightsFullConfigForward:CudaParts.CopyBandwidthIsPlausible:CudaKernelTrace.*'
  # The peer tests' ranks meet at spinning barriers, which a tool that runs one kernel at a time cannot schedule.
  local comm_filter='-CommPeer*:CommNccl*:*DeathTest*'
  # name | tool | command (the harness's reduced lists; the backend test without its full-size cases; 60 tokens
  # end to end in release numerics). Full gtest output, so that a log shows each test's time under the tool and a
  # run cut off by the time limit names the test it was in.
  local runs=(
    "memcheck_linear|memcheck|$BIN/test_cuda_linear --quick"
    "racecheck_linear|racecheck|$BIN/test_cuda_linear --quick"
    "memcheck_attention|memcheck|$BIN/test_cuda_attention --quick"
    "racecheck_attention|racecheck|$BIN/test_cuda_attention --quick"
    "memcheck_backend|memcheck|$BIN/test_cuda_backend --gtest_filter=$backend_filter"
    "racecheck_backend|racecheck|$BIN/test_cuda_backend --gtest_filter=$backend_filter"
    "memcheck_comm|memcheck|$BIN/test_cuda_comm --gtest_filter=$comm_filter"
    "memcheck_e2e|memcheck|$FS logits --model $work/tiny-a --tokens $work/short.tok --prefill 40 --backend cuda --numerics release --output $work/m.bin"
    "racecheck_e2e|racecheck|$FS logits --model $work/tiny-a --tokens $work/short.tok --prefill 40 --backend cuda --numerics release --output $work/r.bin"
  )
  local r name tool cmd pids=()
  if [ -n "${SANITIZE_ONLY:-}" ]; then  # keep the named runs; an unknown name is a usage error naming the known ones
    local only=() known=() want found
    for r in "${runs[@]}"; do known+=("${r%%|*}"); done
    IFS=',' read -r -a want <<< "$SANITIZE_ONLY"
    for name in "${want[@]}"; do
      found=0
      for r in "${runs[@]}"; do [ "${r%%|*}" = "$name" ] && { only+=("$r"); found=1; }; done
      [ $found = 1 ] || die "sanitize: SANITIZE_ONLY names '$name'; the runs are: ${known[*]}"
    done
    runs=("${only[@]}")
  fi
  # The end-to-end runs' checkpoint, made only where one of them runs (a bad SANITIZE_ONLY stops before it).
  if [[ " ${runs[*]%%|*} " == *_e2e* ]]; then
    make_tiny tiny-a "$work" || fail "gen-checkpoint tiny-a"
    awk '{NF=60; print}' "$work/tiny-a.tok" > "$work/short.tok"
  fi
  local shards=${SANITIZE_SHARDS:-1}
  [[ "$shards" =~ ^[1-9][0-9]*$ ]] || die "sanitize: SANITIZE_SHARDS must be a positive number, got '$shards'"
  # Each run as one or more parts: "name" alone, or "name.i" for gtest shard i of a test binary (the e2e runs are
  # one flashseek process and stay whole).
  # The backend test builds models of up to ~21 GB per process, more under the sanitizers' padding: side by side,
  # its shards ran the GPU out of memory and reported allocation failures instead of results (80 GB: eight backend
  # shards, and still three memcheck shards). Its runs therefore share at most one shard per 40 GB of the GPU's
  # memory between them.
  local backend_runs=0 gpu_mib backend_shards
  for r in "${runs[@]}"; do [[ "$r" == *test_cuda_backend* ]] && backend_runs=$((backend_runs + 1)); done
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)
  backend_shards=$shards
  if [ "$backend_runs" -gt 0 ]; then
    local cap=$(( ${gpu_mib:-0} / (40 * 1024 * backend_runs) )); [ "$cap" -ge 1 ] || cap=1
    if [ "$cap" -lt "$shards" ]; then
      backend_shards=$cap
      note "sanitize: the backend runs take $cap shard(s) each ($backend_runs backend run(s) on ${gpu_mib:-?} MiB)"
    fi
  fi
  local parts=() n i
  for r in "${runs[@]}"; do
    IFS='|' read -r name tool cmd <<< "$r"
    n=$shards; [[ "$name" == *_e2e ]] && n=1; [[ "$cmd" == *test_cuda_backend* ]] && n=$backend_shards
    if [ "$n" = 1 ]; then parts+=("$name||$tool|$cmd"); continue; fi
    for ((i = 0; i < n; i++)); do parts+=("$name.$i|GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i|$tool|$cmd"); done
  done
  local part shard_env
  for part in "${parts[@]}"; do
    IFS='|' read -r name shard_env tool cmd <<< "$part"
    # shellcheck disable=SC2086
    ( timeout "$limit" env LD_LIBRARY_PATH="$LDP" $shard_env compute-sanitizer --tool "$tool" --print-limit 20 \
        --error-exitcode 99 $cmd > "$LOG/sanitize_$name.log" 2>&1; echo $? > "$LOG/sanitize_$name.rc" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for part in "${parts[@]}"; do
    IFS='|' read -r name shard_env tool cmd <<< "$part"
    local rc summary
    rc=$(cat "$LOG/sanitize_$name.rc")
    summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOG/sanitize_$name.log" | tail -1)
    if [ "$rc" = 124 ]; then
      local in_test
      in_test=$(grep -E '^\[ RUN      \]' "$LOG/sanitize_$name.log" | tail -1 | sed 's/^\[ RUN      \] //')
      fail "$name: TIMEOUT after ${limit}s (unfinished: neither clean nor dirty${in_test:+; in $in_test})"
    elif grep -q 'Device not supported' "$LOG/sanitize_$name.log"; then fail "$name: compute-sanitizer refused the device"
    elif [ "$rc" != 0 ]; then fail "$name: exit $rc; $summary"
    else note "$name: clean; $summary"; fi
  done
  rm -rf "$work"
}

# -------------------------------------------------------------------------------------------------------------- e2e
# Every end-to-end case as "name|config|seed|prefill|tokens file|committed checkpoint|golden logits", into $1: every
# golden, then the configs named after it (tests/data/configs/NAME.json; default tiny-a, tiny-b, tiny-a-no-decisions).
e2e_cases() {
  local work=$1 d name configs=("${@:2}")
  [ ${#configs[@]} -gt 0 ] || configs=(tiny-a tiny-b tiny-a-no-decisions)
  for d in tests/data/goldens/*/; do
    [ -f "$d/meta.json" ] || continue
    name=$(basename "$d")
    python3 -c "import json; m=json.load(open('$d/meta.json')); print(' '.join(map(str, m['tokens'])))" > "$work/$name.tok"
    python3 - "$d" "$name" "$work" <<'PY'
import json, sys
d, name, work = sys.argv[1:]
m = json.load(open(d + "meta.json"))
seed = m.get("gen_checkpoint_seed", m.get("seed", ""))
ckpt = (d + m["checkpoint"]) if m.get("checkpoint") else ""
print(f"{name}|{d}config.json|{seed}|{m['prefill']}|{work}/{name}.tok|{ckpt}|{d}logits.bin")
PY
  done
  for name in "${configs[@]}"; do
    local cfg=tests/data/configs/$name.json
    [ -f "$cfg" ] || continue
    random_tokens "$cfg" "$work/$name.tok"
    echo "$name|$cfg|7|150|$work/$name.tok||"
  done
}

# Goldens whose model a backend or a numerics refuses by design, as "case:backend" or "case:numerics" (the CPU
# reference runs them in exact numerics against HF): the CUDA kernels compress by 4 or 128 only (wide-a: ratio 8,
# wide-b: 16, wide-c: 2), and release numerics simulate the indexer's Hadamard rotation, which needs a power-of-two
# index_head_dim (wide-a: 24, wide-b: 11). Such a run must end in the named error; the comparisons that need its
# output are skipped. Any other refusal, or a listed one that runs, is a failure.
EXPECTED_REFUSALS=" wide-a:cuda wide-a:release wide-b:cuda wide-b:release wide-c:cuda "
refusal_expected() { [[ "$EXPECTED_REFUSALS" == *" $name:$1 "* || "$EXPECTED_REFUSALS" == *" $name:$2 "* ]]; }

# One `flashseek logits` run of the current e2e case (name, model, tok, prefill), with RUN_ENV's assignments.
# REFUSED collects the outputs of runs refused as expected (reset per case).
run() {  # backend numerics out [extra logits args]
  local before=0
  [ -f "$LOG/e2e_$name.log" ] && before=$(wc -l < "$LOG/e2e_$name.log")
  # shellcheck disable=SC2086
  if timeout 300 env LD_LIBRARY_PATH="$LDP" ${RUN_ENV:-} "$FS" logits --model "$model" --tokens "$tok" \
    --prefill "$prefill" --backend "$1" --numerics "$2" --output "$3" "${@:4}" < /dev/null >> "$LOG/e2e_$name.log" 2>&1; then
    refusal_expected "$1" "$2" && fail "$name: logits --backend $1 --numerics $2 ran, but the case is listed as refused"
    return 0
  fi
  local err; err=$(tail -n +"$((before + 1))" "$LOG/e2e_$name.log" | grep -m1 "error:" || true)
  if refusal_expected "$1" "$2" && [[ "$err" == *"does not run the model"* || "$err" == *"is not a power of two"* ]]; then
    REFUSED="$REFUSED $3 "
    note "$name: logits --backend $1 --numerics $2 refused as expected (${err#*error: })"
    return 0
  fi
  fail "$name: logits --backend $1 --numerics $2 ${*:4} ${RUN_ENV:-} (logs/e2e_$name.log)"
}
# compare_logits.py on the current case; skipped (noted) when an input is the output of an expected refusal.
compare() {
  local a label="" prev=""
  for a in "$@"; do
    [ "$prev" = --label ] && label=$a
    prev=$a
  done
  for a in "$@"; do
    if [[ "$REFUSED" == *" $a "* ]]; then
      note "skipped (an input was refused as expected): $label"
      return 0
    fi
  done
  python3 scripts/compare_logits.py --vocab "$vocab" --json "$e2e" "$@" 2>&1 | tee -a "$SUMMARY"
}

# The checkpoint of a case in $work/$name (generated, or the committed one).
case_checkpoint() {  # work name cfg seed ckpt [binary]
  local bin=${6:-$FS}
  if [ -n "$5" ]; then echo "$5"; return; fi
  run_bin "$bin" gen-checkpoint --config "$3" --out "$1/$2" --seed "$4" < /dev/null >> "$LOG/gen_$2.log" 2>&1 || return 1
  echo "$1/$2"
}

# The current case's vocabulary and checkpoint (the globals vocab and model, from the case variables name, cfg, seed
# and ckpt); false, with a failure noted, when the checkpoint cannot be made.
case_setup() {  # work
  vocab=$(python3 -c "import json; print(json.load(open('$cfg'))['vocab_size'])")
  model=$(case_checkpoint "$1" "$name" "$cfg" "$seed" "$ckpt") || { fail "$name: gen-checkpoint"; return 1; }
}

# Both criteria side by side for every comparison of a compare_logits.py JSON file that has an envelope (a file of
# envelopes alone, as `envelopes` writes: those with their literal verdicts).
verdict_table() {  # jsonl
  [ -s "$1" ] && python3 - "$1" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
env_only = [r for r in rows if r["label"].split(" ")[1:2] == ["envelope"]]
rows = [r for r in rows if "envelope" in r]
if env_only:
    print(f"{'case':74s} {'median':>9s} {'p90':>9s} {'max':>9s} {'argmax':>7s} {'literal':>7s}")
    for r in env_only:
        print(f"{r['label'][:74]:74s} {r['rel_median']:9.2e} {r['rel_p90']:9.2e} {r['rel_max']:9.2e} "
              f"{100 * r['argmax_agreement']:6.2f}% {'PASS' if r['literal_pass'] else 'FAIL':>7s}")
if rows:
    print(f"{'case':58s} {'median':>9s} {'p90':>9s} {'max':>9s} {'argmax':>7s} {'literal':>7s} | "
          f"{'env med':>9s} {'env p90':>9s} {'env arg':>7s} {'envelope':>8s}")
    for r in rows:
        e = r["envelope"]
        print(f"{r['label'][:58]:58s} {r['rel_median']:9.2e} {r['rel_p90']:9.2e} {r['rel_max']:9.2e} "
              f"{100 * r['argmax_agreement']:6.2f}% {'PASS' if r['literal_pass'] else 'FAIL':>7s} | "
              f"{e['rel_median']:9.2e} {e['rel_p90']:9.2e} {100 * e['argmax_agreement']:6.2f}% "
              f"{'PASS' if r['envelope_pass'] else 'FAIL':>8s}")
PY
}

cmd_e2e() {
  local diagnose=0 cpu_only=0
  for a in "$@"; do
    case "$a" in --diagnose) diagnose=1 ;; --cpu-only) cpu_only=1 ;; *) die "e2e: unknown option $a" ;; esac
  done
  if [ $cpu_only = 1 ]; then header "envelopes (CPU only, --perturb-norms $PERTURB_SEED)"; else header "e2e"; fi
  local work; work=$(mktemp -d)
  DIAG=$work  # --diagnose writes its per-layer logits here
  e2e=$LOG/e2e.jsonl; : > "$e2e"  # the case variables are global: run() and compare() read them
  while IFS='|' read -r name cfg seed prefill tok ckpt golden; do
    REFUSED=" "
    case_setup "$work" || continue
    local ref_exact ref_label
    run cpu exact "$work/$name.cpu_exact.bin"
    if [ -n "$golden" ]; then
      ref_exact=$golden; ref_label="exact golden"
      compare --ours "$work/$name.cpu_exact.bin" --ref "$golden" --max-rel 1e-3 --label "$name CPU exact vs exact golden" \
        || fail "$name: the CPU reference no longer matches its golden"
    else
      ref_exact=$work/$name.cpu_exact.bin; ref_label="CPU exact"
    fi
    # The envelopes: the CPU reference of each numerics with its norms moved by one bf16 rounding.
    run cpu exact "$work/$name.cpu_exact_perturbed.bin" --perturb-norms "$PERTURB_SEED"
    run cpu release "$work/$name.cpu_release.bin"
    run cpu release "$work/$name.cpu_release_perturbed.bin" --perturb-norms "$PERTURB_SEED"
    if [ $cpu_only = 1 ]; then
      compare --ours "$work/$name.cpu_exact_perturbed.bin" --ref "$ref_exact" \
        --label "$name envelope exact: CPU exact --perturb-norms $PERTURB_SEED vs $ref_label"
      compare --ours "$work/$name.cpu_release_perturbed.bin" --ref "$work/$name.cpu_release.bin" \
        --label "$name envelope release: CPU release --perturb-norms $PERTURB_SEED vs CPU release"
      continue
    fi
    run cuda exact "$work/$name.cuda_exact.bin"
    run cuda release "$work/$name.cuda_release.bin"
    compare --ours "$work/$name.cuda_exact.bin" --ref "$ref_exact" --envelope "$work/$name.cpu_exact_perturbed.bin" \
      --label "$name cuda reference vs $ref_label" --profile || fail "$name: cuda reference (envelope criterion)"
    compare --ours "$work/$name.cuda_release.bin" --ref "$work/$name.cpu_release.bin" \
      --envelope "$work/$name.cpu_release_perturbed.bin" --label "$name cuda production vs CPU release" --profile \
      || fail "$name: cuda production (envelope criterion)"
    # Sensitivity probe: the other (equally valid) attention variant everywhere it fits; the spread two GPU
    # summation orders give (informational).
    for num in exact release; do
      RUN_ENV=FLASHSEEK_FORCE=attn_mma run cuda $num "$work/$name.cuda_mma_$num.bin"
      compare --ours "$work/$name.cuda_mma_$num.bin" --ref "$work/$name.cuda_$num.bin" \
        --label "$name cuda (attn_mma forced) vs cuda (default), $num" > /dev/null
    done
    if [ "$name" = tiny-a-no-decisions ]; then
      # --perturb-norms reaches the GPU's weights: CUDA exact with the flag differs from CUDA exact without it by
      # about the CPU envelope, and agrees with the CPU exact with the flag as closely as the unperturbed runs agree.
      run cuda exact "$work/$name.cuda_exact_perturbed.bin" --perturb-norms "$PERTURB_SEED"
      compare --ours "$work/$name.cuda_exact_perturbed.bin" --ref "$work/$name.cuda_exact.bin" \
        --label "$name flag check: cuda exact --perturb-norms vs cuda exact (expect ~ the CPU envelope)" > /dev/null
      compare --ours "$work/$name.cuda_exact_perturbed.bin" --ref "$work/$name.cpu_exact_perturbed.bin" \
        --label "$name flag check: cuda vs cpu, both --perturb-norms (expect ~ cuda vs cpu unperturbed)" > /dev/null
    fi
    if [ $diagnose = 1 ] && [[ "$name" == tiny-a || "$name" == tiny-b ]]; then
      diagnose_layers "$model" "$tok" 40 exact "$name"
    fi
  done < <(e2e_cases "$work")
  verdict_table "$e2e"
  [ $cpu_only = 1 ] || fused_identity "$work"
  rm -rf "$work"
}

# Paths that must give the default path's bits end to end, byte for byte, in both numerics: chain-shapes (a config
# whose wo_a / wo_b reach gemv_chain: 2 groups of 1,024 rows over 2,048 columns, and whose wq_a / q_norm / wq_b reach
# the query chain: q_lora_rank 256; 12 decode steps) with gemv_chain and with query_chain forced; tiny-a (index_topk
# 8: its ratio-4 layer scores from 36 tokens; 56 decode steps) with the indexer's query path on its side branch in
# prefill passes too (indexer_branch forced) and on the main path in decode (indexer_branch disabled), with the indexer's first form (FLASHSEEK_INDEXER_SELECT_FORM=0) and with mhc_pre as one
# launch at one token (mhc_one_launch forced: every decode step and the head); with ring_gemv forced, wo_b's row
# prepared inside the ring (prepare_in_ring) and the rings of wo_a and wo_b launched early (early_wo_a, early_wo_b);
# wo_a's input prepared by the attention's merge (prepare_in_merge).
fused_identity() {  # work dir
  make_tiny chain-shapes "$1" || { fail "gen-checkpoint chain-shapes"; return; }
  make_tiny tiny-a "$1" || { fail "gen-checkpoint tiny-a"; return; }
  awk '{NF=16; print}' "$1/chain-shapes.tok" > "$1/chain16.tok"
  awk '{NF=60; print}' "$1/tiny-a.tok" > "$1/tiny60.tok"
  same_logits chain-shapes "$1" chain16.tok "gemv_chain forced" FLASHSEEK_FORCE=gemv_chain
  same_logits chain-shapes "$1" chain16.tok "query_chain forced" FLASHSEEK_FORCE=query_chain
  same_logits tiny-a "$1" tiny60.tok "indexer_branch forced" FLASHSEEK_FORCE=indexer_branch
  same_logits tiny-a "$1" tiny60.tok "indexer_branch disabled" FLASHSEEK_DISABLE=indexer_branch
  same_logits tiny-a "$1" tiny60.tok "the indexer's form 0" FLASHSEEK_INDEXER_SELECT_FORM=0
  same_logits tiny-a "$1" tiny60.tok "mhc_one_launch forced" FLASHSEEK_FORCE=mhc_one_launch
  # ring_gemv's raw rows (one token, prepared in every CTA: prepare_in_ring) against the preparation launch; the ring
  # forced, since tiny-a's matrices are below its default floor
  same_logits tiny-a "$1" tiny60.tok "prepare_in_gemv disabled (ring_gemv, prepare_in_ring forced)" \
    FLASHSEEK_DISABLE=prepare_in_gemv FLASHSEEK_FORCE=ring_gemv,prepare_in_ring
  # the merge and the preparations before wo_a's and wo_b's rings launching their successors at entry (early_wo_a,
  # early_wo_b) against the default triggers, the ring forced on both sides (tiny-a's attention has no merge: the
  # preparations' triggers are what this compares; CudaForcedFormsKeepLogits covers the merge's on full-size layers)
  same_logits tiny-a "$1" tiny60.tok "early_wo_a, early_wo_b forced (ring_gemv forced)" \
    FLASHSEEK_FORCE=ring_gemv,early_wo_a,early_wo_b FLASHSEEK_FORCE=ring_gemv
  # the attention's merge writing wo_a's input prepared against the preparation launch: on chain-shapes' 300 tokens,
  # whose ratio-4 layer merges splits from ~64 positions on (tiny-a's attention never has more than one split), with
  # wo_a taking a prepared input on both sides (its one-token simt_gemv would take the raw row)
  same_logits chain-shapes "$1" chain-shapes.tok "prepare_in_merge forced (prepare_in_gemv disabled)" \
    FLASHSEEK_FORCE=prepare_in_merge FLASHSEEK_DISABLE=prepare_in_gemv
}

same_logits() {  # model dir tokens what VAR=value [BASE=value]: the model's logits with and without VAR=value
  # (both runs with BASE=value where given), byte for byte
  local name=$1 dir=$2 tok=$2/$3 what=$4 setting=$5 base=${6:-} num tag
  tag=$(echo "$name-$setting${base:+-$base}" | tr -c 'A-Za-z0-9_\n-' _)
  for num in exact release; do
    timeout 120 env LD_LIBRARY_PATH="$LDP" ${base:+"$base"} "$FS" logits --model "$dir/$name" --tokens "$tok" --prefill 4 \
      --backend cuda --numerics $num --output "$dir/${tag}_default_$num.bin" > "$LOG/same_${tag}_default_$num.log" 2>&1 \
      || { fail "$name: logits $num (logs/same_${tag}_default_$num.log)"; continue; }
    timeout 120 env LD_LIBRARY_PATH="$LDP" ${base:+"$base"} "$setting" "$FS" logits --model "$dir/$name" --tokens "$tok" --prefill 4 \
      --backend cuda --numerics $num --output "$dir/${tag}_set_$num.bin" > "$LOG/same_${tag}_set_$num.log" 2>&1 \
      || { fail "$name: logits $num, $what (logs/same_${tag}_set_$num.log)"; continue; }
    if cmp -s "$dir/${tag}_default_$num.bin" "$dir/${tag}_set_$num.bin"; then
      note "$name $num: $what gives the default path's logits bit for bit"
    else
      fail "$name $num: logits with $what differ from the default path's"
    fi
  done
}

# -------------------------------------------------------------------------------------------------------- diagnose
# CUDA vs CPU with only the first N layers, N = 1 .. all: the first N whose error jumps localizes a mismatch.
diagnose_layers() {  # model tokens prefill numerics label
  local model=$1 tok=$2 prefill=$3 num=$4 label=$5 vocab layers n b
  vocab=$(python3 -c "import json; print(json.load(open('$model/config.json'))['vocab_size'])")
  layers=$(python3 -c "import json; print(json.load(open('$model/config.json'))['num_hidden_layers'])")
  note "-- per layer: $label, CUDA vs CPU, $num numerics"
  for n in $(seq 1 "$layers"); do
    for b in cpu cuda; do
      timeout 120 env LD_LIBRARY_PATH="$LDP" "$FS" logits --model "$model" --tokens "$tok" --prefill "$prefill" \
        --backend $b --numerics "$num" --layers "$n" --output "$DIAG/$label.$b.L$n.bin" >> "$LOG/diagnose_$label.log" 2>&1 \
        || fail "$label: logits --backend $b --layers $n"
    done
    python3 scripts/compare_logits.py --ours "$DIAG/$label.cuda.L$n.bin" --ref "$DIAG/$label.cpu.L$n.bin" \
      --vocab "$vocab" --label "$label --layers $n" --profile 2>&1 | tee -a "$SUMMARY"
  done
}

cmd_diagnose() {
  header "diagnose"
  DIAG=$(mktemp -d)
  local variants=() models=()
  if [ $# -ge 4 ] && [ -d "$1" ]; then
    models=("$1|$2|$3|$4|$(basename "$1")"); shift 4
  else
    make_tiny tiny-a "$DIAG" && make_tiny tiny-b "$DIAG" || { fail "gen-checkpoint"; return; }
    models=("$DIAG/tiny-a|$DIAG/tiny-a.tok|40|exact|tiny-a" "$DIAG/tiny-b|$DIAG/tiny-b.tok|40|exact|tiny-b")
  fi
  for v in "$@"; do [[ "$v" == *=* ]] || die "diagnose: variant '$v' is not NAME=ENV"; variants+=("$v"); done
  local m model tok prefill num label vocab
  for m in "${models[@]}"; do
    IFS='|' read -r model tok prefill num label <<< "$m"
    diagnose_layers "$model" "$tok" "$prefill" "$num" "$label"
    vocab=$(python3 -c "import json; print(json.load(open('$model/config.json'))['vocab_size'])")
    for v in "${variants[@]}"; do
      # shellcheck disable=SC2086
      timeout 300 env LD_LIBRARY_PATH="$LDP" ${v#*=} "$FS" logits --model "$model" --tokens "$tok" --prefill "$prefill" \
        --backend cuda --numerics "$num" --output "$DIAG/$label.${v%%=*}.bin" >> "$LOG/diagnose_$label.log" 2>&1 \
        || fail "$label: logits with ${v#*=}"
      local last; last=$(ls "$DIAG/$label".cpu.L*.bin | sort -V | tail -1)
      python3 scripts/compare_logits.py --ours "$DIAG/$label.${v%%=*}.bin" --ref "$last" --vocab "$vocab" \
        --label "$label all layers, cuda with ${v#*=} vs cpu ($num)" --profile 2>&1 | tee -a "$SUMMARY"
    done
  done
  rm -rf "$DIAG"
}

# ------------------------------------------------------------------------------------------------------------ bench
BENCH_MODEL=tests/data/configs/v4-flash.json

run_bench() {  # tag, then flashseek bench flags
  local tag=$1; shift
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" ${RUN_ENV:-} "$FS" bench --model "$BENCH_MODEL" --dummy-weights \
    --layers "${LAYERS:-20}" --seed 1 "$@" --json "$LOG/bench_$tag.json" > "$LOG/bench_$tag.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || fail "bench $tag ($*): exit $rc"
  python3 - "$LOG/bench_$tag.json" "$tag" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"bench {sys.argv[2]}: no JSON ({e})"); sys.exit(0)
for r in d.get("prefill", []):
    print(f"bench {sys.argv[2]:8s} prefill of {r.get('tokens'):>6} tokens: {r.get('prefill_tok_s', 0):10.1f} tok/s, "
          f"{r.get('prefill_tflop_s', 0):7.1f} TFLOP/s = {100 * r.get('prefill_gemm_fraction', 0):5.1f}% of the FP8 rate")
for r in d.get("results", []):
    ranks = r.get("bytes_per_rank", [])
    per_rank = "" if len(ranks) < 2 else ", per rank " + " / ".join(f"{b / 1e9:.2f}" for b in ranks) + " GB"
    print(f"bench {sys.argv[2]:8s} context {r.get('context'):>6} sequences {r.get('concurrency'):>4}: "
          f"prefill {r.get('prefill_tok_s', 0):10.1f} tok/s ({100 * r.get('prefill_gemm_fraction', 0):4.1f}%), "
          f"TPOT {r.get('tpot_median_ms', 0):8.3f} ms, decode {r.get('decode_tok_s', 0):9.1f} tok/s, "
          f"roofline {100 * r.get('roofline_fraction', 0):5.1f}%{per_rank}")
PY
}

cmd_bench() {
  [ $# = 0 ] || die "bench takes no arguments (LAYERS, BENCH_TIMEOUT from the environment)"
  header "bench (${LAYERS:-20} layers)"
  # 64+ sequences of 8192 tokens (minutes of prefill each) stay out of the default envelope;
  # LONG_CONCURRENCY=1,16,64 adds them. PREFILL_CHUNK sets the backend's prefill chunk (default: the backend's).
  local chunk=()
  [ -z "${PREFILL_CHUNK:-}" ] || chunk=(--prefill-chunk "$PREFILL_CHUNK")
  run_bench decode256 "${chunk[@]}" --context 256 --concurrency 1,16,64,128,256 --output-len 32 --prefill none
  run_bench decode8k "${chunk[@]}" --context 8192 --concurrency "${LONG_CONCURRENCY:-1,16}" --output-len 32 \
    --prefill none
  run_bench prefill "${chunk[@]}" --prefill "${PREFILL_LENGTHS:-256,1024,4096,16384}" --context 256 --concurrency 1 \
    --output-len 8
  # Parallel layouts as virtual ranks on this one device: what each rank moves per step.
  run_bench tp2 "${chunk[@]}" --tp 2 --context 256 --concurrency 1,16,64 --output-len 16 --prefill none
  run_bench ep2 "${chunk[@]}" --ep 2 --context 256 --concurrency 1,16,64 --output-len 16 --prefill none
}

cmd_ab() {
  [ $# -ge 2 ] || die "ab: usage: ab \"NAME=ENV ...\" \"NAME=ENV ...\" [...]"
  local v
  for v in "$@"; do [[ "$v" == *=* ]] || die "ab: variant '$v' is not NAME=ENV"; done
  header "ab $*"
  local flags=${BENCH_ARGS:---context 256 --concurrency 1,16 --output-len 32} rounds=${ROUNDS:-2} r name
  for r in $(seq 1 "$rounds"); do
    for v in "$@"; do
      name=${v%%=*}
      # BIN=path among a variant's words picks another flashseek binary (e.g. an older commit's, for before/after)
      local bin=$FS envs=() w
      for w in ${v#*=}; do
        if [[ "$w" == BIN=* ]]; then bin=$(realpath "${w#BIN=}"); else envs+=("$w"); fi
      done
      [ -x "$bin" ] || die "ab: variant $name: $bin is not an executable"
      timeout "${BENCH_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" "${envs[@]}" "$bin" bench --model "$BENCH_MODEL" \
        --dummy-weights --layers "${LAYERS:-20}" --seed 1 $flags --json "$LOG/ab_${name}_$r.json" \
        > "$LOG/ab_${name}_$r.log" 2>&1 || fail "ab $name round $r: exit $?"
    done
  done
  python3 - "$LOG" "$rounds" "$@" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, statistics, sys
log, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'variant':<12} {'env':<44} {'seqs':>4} {'ctx':>6} {'TPOT ms (per round)':<24} {'roofline %':>10}")
for v in variants:
    name, env = v.split("=", 1)
    rows = {}
    for r in range(1, rounds + 1):
        try:
            d = json.load(open(f"{log}/ab_{name}_{r}.json"))
        except Exception as e:
            print(f"{name}: round {r} has no JSON ({e})"); continue
        for x in d["results"]:
            rows.setdefault((x["concurrency"], x["context"]), []).append((x["tpot_median_ms"], x["roofline_fraction"]))
    for (c, ctx), vals in sorted(rows.items()):
        t = " / ".join(f"{a:.3f}" for a, _ in vals)
        print(f"{name:<12} {env[:44]:<44} {c:>4} {ctx:>6} {t:<24} {100 * statistics.median(b for _, b in vals):>9.1f}%")
PY
}

# One layer's kernels per variant from CUPTI (`bench --timeline`): when each starts and ends and what it adds to the
# step (charged time), at one sequence unless TIMELINE_ARGS says otherwise; the tables stay in the logs.
cmd_timeline() {
  [ $# -ge 1 ] || die "timeline: usage: timeline \"NAME=ENV ...\" [...]"
  local v name
  for v in "$@"; do [[ "$v" == *=* ]] || die "timeline: variant '$v' is not NAME=ENV"; done
  header "timeline $*"
  local flags=${TIMELINE_ARGS:---context 256 --concurrency 1 --output-len 8 --prefill none}
  for v in "$@"; do
    name=${v%%=*}
    # shellcheck disable=SC2086
    timeout "${BENCH_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" ${v#*=} "$FS" bench --model "$BENCH_MODEL" \
      --dummy-weights --layers "${LAYERS:-20}" --seed 1 $flags --timeline "${TIMELINE_STEPS:-3}" \
      --json "$LOG/timeline_$name.json" > "$LOG/timeline_$name.log" 2>&1 || fail "timeline $name: exit $?"
    note "timeline $name (${v#*=}): logs/timeline_$name.log"
  done
}

# ---------------------------------------------------------------------------------------------------------- served
# `flashseek serve` with the bench model and bench-serve against it. SERVE_ARGS replaces the backend flags (default:
# CUDA, dummy weights, LAYERS layers), SERVE_ENV is the server's environment (e.g. FLASHSEEK_FORCE=...).
SERVER=
start_server() {  # tag port serve-flags...: starts `flashseek serve` (RUN_ENV its environment), waits for /health
  local tag=$1 port=$2; shift 2
  # shellcheck disable=SC2086
  env LD_LIBRARY_PATH="$LDP" ${RUN_ENV:-} "$FS" serve --port "$port" "$@" < /dev/null > "$LOG/serve_$tag.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 "${SERVE_START_TIMEOUT:-400}"); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
    kill -0 "$SERVER" 2> /dev/null || break
    sleep 1
  done
  fail "serve $tag did not come up (logs/serve_$tag.log)"
  stop_server
  return 1
}
stop_server() { [ -z "$SERVER" ] || { kill -TERM "$SERVER" 2> /dev/null; wait "$SERVER" 2> /dev/null; SERVER=; }; }

serve_model_dir() {  # dir: the bench model's config and the DeepSeek tokenizer, as serve reads a model directory
  cp "$BENCH_MODEL" "$1/config.json"
  cp assets/tokenizer/deepseek-v4/tokenizer.json "$1/tokenizer.json"
}

serve_client() {  # tag port concurrency prompts input-len output-len [bench-serve flags]: one run and its summary line
  local tag=$1 port=$2 c=$3 n=$4 in=$5 out=$6; shift 6
  timeout "${SERVE_CLIENT_TIMEOUT:-300}" env LD_LIBRARY_PATH="$LDP" "$FS" bench-serve --port "$port" \
    --endpoint /v1/completions --num-prompts "$n" --max-concurrency "$c" --random-input-len "$in" \
    --random-output-len "$out" --seed 1 --no-progress "$@" --save-result "$LOG/serve_$tag.json" \
    > "$LOG/serve_$tag.log" 2>&1 || fail "bench-serve $tag: exit $? (logs/serve_$tag.log)"
  # the summary line; exit 1 when a request failed (pipefail carries it through tee)
  python3 - "$LOG/serve_$tag.json" "$tag" "$*" <<'PY' 2>&1 | tee -a "$SUMMARY" || fail "bench-serve $tag: failed requests (logs/serve_$tag.log)"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"served {sys.argv[2]}: no JSON ({e})"); sys.exit(1)
print(f"served {sys.argv[2]:<12} {d.get('completed', 0)} requests ({d.get('failed', 0)} failed){' ' + sys.argv[3] if sys.argv[3] else ''}: "
      f"{d.get('output_throughput', 0):8.1f} output tok/s, TPOT median {d.get('median_tpot_ms', 0):.2f} ms "
      f"(p99 {d.get('p99_tpot_ms', 0):.2f}), TTFT median {d.get('median_ttft_ms', 0):.1f} ms")
sys.exit(0 if d.get("failed", 1) == 0 else 1)
PY
}

cmd_served() {
  [ $# = 0 ] || die "served takes no arguments (LAYERS, SERVE_CONCURRENCY, SERVE_ARGS, SERVE_ENV from the environment)"
  header "served (${SERVE_MODEL:-the bench model}, ${SERVE_ARGS:-${LAYERS:-20} layers, dummy weights, CUDA}${SERVE_ENV:+, $SERVE_ENV}; 256 prompt / 64 output tokens, /v1/completions)"
  local model=${SERVE_MODEL:-} port=${PORT:-8412} c n own=0
  [ -n "$model" ] || { model=$(mktemp -d); own=1; serve_model_dir "$model"; }
  # shellcheck disable=SC2086
  if RUN_ENV=${SERVE_ENV:-} start_server single "$port" --model "$model" --max-num-seqs 256 \
      ${SERVE_ARGS:---dummy-weights --backend cuda --layers ${LAYERS:-20}}; then
    for c in ${SERVE_CONCURRENCY:-16 1 64}; do
      n=$((c * 4 < 16 ? 16 : c * 4))
      serve_client "c$c" "$port" "$c" "$n" 256 64
    done
    serve_client c16_sampled "$port" 16 64 256 64 --temperature 0.8 --top-p 0.95
    stop_server
  fi
  [ $own = 0 ] || rm -rf "$model"
}

# The whole curve of one build: decode at 1-256 sequences (context 256) and 1-128 (8,192), prefill of 256-32,768
# tokens, then served; RUN_ENV applies to the benches, SERVE_ENV to the server.
cmd_curve() {
  [ $# = 0 ] || die "curve takes no arguments (LAYERS, RUN_ENV, SERVE_* from the environment)"
  header "curve (${LAYERS:-20} layers${RUN_ENV:+, $RUN_ENV})"
  run_bench curve256 --context 256 --concurrency 1,2,4,8,16,32,64,128,256 --output-len 32 --prefill none
  run_bench curve8k --context 8192 --concurrency 1,16,64,128 --output-len 32 --prefill none
  run_bench curve_prefill --prefill 256,1024,4096,8192,32768 --context 256 --concurrency none
  cmd_served
}

# -------------------------------------------------------------------------------------------------------- multi-gpu
# Issue 17 on two or more GPUs (the usage above). One step per device call: each stays under ten minutes.
MULTI_COMMS=${COMMS:-"own:FLASHSEEK_COMM=peer nccl:FLASHSEEK_COMM=nccl"}

gpu_count() { nvidia-smi -L 2> /dev/null | grep -c '^GPU '; }
layout_flags() {  # layout: its --tp / --ep flags
  case "$1" in
    TP1) ;; TP2) echo "--tp 2" ;; EP2) echo "--ep 2" ;; TP4) echo "--tp 4" ;; EP4) echo "--ep 4" ;;
    TP2xEP2) echo "--tp 2 --ep 2" ;;
    *) die "multi-gpu: unknown layout $1 (TP2, EP2, TP4, EP4, TP2xEP2)" ;;
  esac
}
# Whether `flashseek plan` lets this case's model be split into the layout; a refusal is noted once (exact), not
# failed: a model too small for the 128-wide FP8 blocks per rank is no defect of the layout.
layout_splits() {  # name cfg layout numerics
  # shellcheck disable=SC2046
  fs plan --model "$2" $(layout_flags "$3") > "$LOG/plan_${1}_$3.log" 2>&1 && return 0
  [ "$4" = exact ] && note "$1 $3: refused by the layout rules: $(grep -o 'layout .*' "$LOG/plan_${1}_$3.log" | tail -1)"
  return 1
}
comm_names() { local c; for c in $MULTI_COMMS; do echo "${c%%:*}"; done; }
# LAYOUT_ARGS (the layout's flags and the placement of its ranks on separate GPUs) and RUN_ENV (the communicator's
# environment) for the multi-rank runs that follow.
use_layout() {  # layout comm
  local ranks c place=${MULTI_GPU_ARGS:-}
  case "$1" in TP2|EP2) ranks=2 ;; TP4|EP4|TP2xEP2) ranks=4 ;; *) die "multi-gpu: unknown layout $1" ;; esac
  [ "$ranks" -le "$GPUS" ] || { fail "$1 needs $ranks GPUs; this machine has $GPUS"; return 1; }
  if [ -z "$place" ]; then
    fs bench --help 2>&1 | grep -q -- '--devices' || {
      fail "$1: this flashseek has no multi-device placement (no --devices in 'flashseek bench --help'; MULTI_GPU_ARGS unset): its ranks would all run on GPU 0"
      return 1; }
    place="--devices $(seq -s, 0 $((ranks - 1)))"
  fi
  read -r -a LAYOUT_ARGS <<< "$(layout_flags "$1") $place"
  RUN_ENV=
  for c in $MULTI_COMMS; do [ "${c%%:*}" = "$2" ] && RUN_ENV=${c#*:}; done
  [ -n "$RUN_ENV" ] || die "multi-gpu: no communicator '$2' in COMMS ($MULTI_COMMS)"
}
# NCCL from Python's nvidia wheels (nvidia-nccl-cu13) when neither the loader nor the CUDA toolkit has it.
find_nccl() {
  [ -z "${FLASHSEEK_NCCL_LIBRARY:-}" ] || return 0
  ldconfig -p 2> /dev/null | grep -q 'libnccl\.so\.2 ' && return 0
  [ -e /usr/local/cuda/lib64/libnccl.so.2 ] && return 0
  local lib
  lib=$(python3 -c 'import glob, os, nvidia; print(next(iter(f for p in nvidia.__path__ for f in glob.glob(os.path.join(p, "nccl", "lib", "libnccl.so.2"))), ""))' 2> /dev/null)
  [ -n "$lib" ] && export FLASHSEEK_NCCL_LIBRARY=$lib && note "NCCL from the Python wheel: $lib"
}

mg_comm() {
  header "multi-gpu comm ($GPUS GPUs)"
  [ -x "$BIN/test_cuda_comm" ] || { fail "test_cuda_comm: not in the bundle"; return; }
  timeout "${TEST_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" FLASHSEEK_REQUIRE_NCCL=1 "$BIN/test_cuda_comm" \
    --gtest_brief=1 > "$LOG/test_cuda_comm.log" 2>&1
  gtest_verdict "$LOG/test_cuda_comm.log" "test_cuda_comm ($GPUS GPUs)" $?
  local b
  for b in "gpus|" "virtual|--virtual --ranks 2"; do
    # shellcheck disable=SC2086
    timeout 300 env LD_LIBRARY_PATH="$LDP" "$BIN/test_cuda_comm" --bench ${b#*|} --json "$LOG/allreduce_${b%%|*}.json" \
      > "$LOG/allreduce_${b%%|*}.log" 2>&1 || fail "all-reduce benchmark (${b%%|*}): exit $? (logs/allreduce_${b%%|*}.log)"
    tee -a "$SUMMARY" < "$LOG/allreduce_${b%%|*}.log"
  done
}

mg_correctness() {
  header "multi-gpu correctness (TP2 / EP2 against TP1 and the CPU reference)"
  local work num layout comm ref ours; work=$(mktemp -d)
  e2e=$LOG/multi_gpu_e2e.jsonl; : > "$e2e"  # the case variables are global: run() and compare() read them
  while IFS='|' read -r name cfg seed prefill tok ckpt golden; do
    REFUSED=" "
    case_setup "$work" || continue
    for num in exact release; do
      RUN_ENV=
      ref=$work/$name.cpu_$num.bin
      if [ -n "$golden" ] && [ $num = exact ]; then ref=$golden; else run cpu $num "$ref"; fi
      run cpu $num "$work/$name.cpu_${num}_p.bin" --perturb-norms "$PERTURB_SEED"
      RUN_ENV=CUDA_VISIBLE_DEVICES=0 run cuda $num "$work/$name.tp1_$num.bin"
      RUN_ENV=CUDA_VISIBLE_DEVICES=0 run cuda $num "$work/$name.tp1_${num}_p.bin" --perturb-norms "$PERTURB_SEED"
      for layout in TP2 EP2; do
        layout_splits "$name" "$cfg" $layout $num || continue
        for comm in $(comm_names); do
          use_layout $layout "$comm" || continue
          ours=$work/$name.${layout}_${comm}_$num.bin
          run cuda $num "$ours" "${LAYOUT_ARGS[@]}"
          [ -s "$ours" ] || continue
          compare --ours "$ours" --ref "$ref" --envelope "$work/$name.cpu_${num}_p.bin" \
            --label "$name $layout ($comm) cuda $num vs CPU $num" || fail "$name $layout ($comm) $num vs CPU"
          compare --ours "$ours" --ref "$work/$name.tp1_$num.bin" --envelope "$work/$name.tp1_${num}_p.bin" \
            --label "$name $layout ($comm) vs TP1 cuda $num" || fail "$name $layout ($comm) $num vs TP1"
        done
      done
    done
  done < <(e2e_cases "$work" tiny-a tiny-b tiny-a-no-decisions tiny-sharding)
  RUN_ENV=
  verdict_table "$e2e"
  rm -rf "$work"
}

mg_bench() {  # [layouts] [communicators]
  local layouts=${1:-"TP2 EP2"} comms=${2:-$(comm_names | tr '\n' ' ')} layout comm
  header "multi-gpu bench: whole V4-Flash (43 layers, dummy weights), $layouts, $comms"
  for layout in $layouts; do
    for comm in $comms; do
      use_layout "$layout" "$comm" || continue
      LAYERS=43 run_bench "${layout}_${comm}_256" "${LAYOUT_ARGS[@]}" --context 256 --concurrency 1,16,64 \
        --output-len 32 --prefill none
      LAYERS=43 run_bench "${layout}_${comm}_8k" "${LAYOUT_ARGS[@]}" --context 8192 --concurrency 1,16,64 \
        --output-len 32 --prefill none
      LAYERS=43 run_bench "${layout}_${comm}_prefill" "${LAYOUT_ARGS[@]}" --prefill 8192 --context 256 \
        --concurrency 1 --output-len 8
    done
  done
  RUN_ENV=
  note "-- the cost model's predictions (docs/perf.md §5.3), for the comparison"
  python3 scripts/parallel_cost_model.py 2>&1 | tee -a "$SUMMARY"
}

mg_serve() {  # [layouts] [communicators]
  local layouts=${1:-TP2} comms=${2:-$(comm_names | head -1)} port=${PORT:-8411} layout comm c
  header "multi-gpu serve: whole V4-Flash, $layouts, $comms; bench-serve 1,024 prompt / 256 output tokens"
  local model; model=$(mktemp -d)
  serve_model_dir "$model"
  for layout in $layouts; do
    for comm in $comms; do
      use_layout "$layout" "$comm" || continue
      local tag=${layout}_$comm
      start_server "$tag" "$port" --model "$model" --dummy-weights --backend cuda --max-num-seqs 64 \
        "${LAYOUT_ARGS[@]}" || continue
      for c in ${SERVE_CONCURRENCY:-1 16 64}; do
        local prompts=$((c * 4 < 8 ? 8 : c * 4))
        timeout 300 env LD_LIBRARY_PATH="$LDP" "$FS" bench-serve --port "$port" --num-prompts "$prompts" \
          --max-concurrency "$c" --random-input-len 1024 --random-output-len 256 --no-progress \
          --save-result "$LOG/serve_${tag}_c$c.json" > "$LOG/serve_${tag}_c$c.log" 2>&1 \
          || fail "bench-serve $tag concurrency $c: exit $? (logs/serve_${tag}_c$c.log)"
        note "-- $tag, concurrency $c, $prompts requests:"
        tail -25 "$LOG/serve_${tag}_c$c.log" | tee -a "$SUMMARY"
      done
      stop_server
    done
  done
  RUN_ENV=
  rm -rf "$model"
}

cmd_multi_gpu() {
  local step=${1:-}
  [ $# -ge 1 ] && shift
  find_nccl
  case "$step" in
    comm) [ $# = 0 ] || die "multi-gpu comm takes no arguments"; mg_comm ;;
    correctness) [ $# = 0 ] || die "multi-gpu correctness takes no arguments"; mg_correctness ;;
    bench) mg_bench "$@" ;;
    serve) mg_serve "$@" ;;
    *) die "multi-gpu: usage: multi-gpu comm | correctness | bench [LAYOUTS] [COMMS] | serve [LAYOUTS] [COMMS]" ;;
  esac
}

# ---------------------------------------------------------------------------------------------------------- compare
cmd_compare() {
  [ $# = 2 ] || die "compare: usage: compare OLD_BIN NEW_BIN"
  local old new
  old=$(realpath "$1" 2>/dev/null); new=$(realpath "$2" 2>/dev/null)
  [ -x "$old" ] || die "compare: $1 is not an executable"
  [ -x "$new" ] || die "compare: $2 is not an executable"
  header "compare $1 vs $2"
  local work table=$LOG/compare.txt; work=$(mktemp -d); : > "$table"
  printf '%-26s %-22s %-12s %s\n' golden run result detail | tee -a "$table"
  row() { printf '%-26s %-22s %-12s %s\n' "$1" "$2" "$3" "$4" | tee -a "$table"; }
  local want b num
  while IFS='|' read -r name cfg seed prefill tok ckpt golden; do
    [ -n "$golden" ] || continue  # goldens only
    want=$(python3 -c "import json; print(json.load(open('$(dirname "$golden")/meta.json')).get('content_hash', ''))")
    # Each binary's checkpoint must have the golden's content hash; both then run on the new binary's one.
    for b in old new; do
      local bin=$old; [ $b = new ] && bin=$new
      local dir got
      mkdir -p "$work/$b"
      dir=$(case_checkpoint "$work/$b" "$name" "$cfg" "$seed" "$ckpt" "$bin") || dir=
      got=$([ -n "$dir" ] && run_bin "$bin" inspect --model "$dir" < /dev/null 2>/dev/null | awk '/^content-hash:/ {print $2}')
      if [ -n "$want" ] && [ "$got" = "$want" ]; then row "$name" "checkpoint ($b)" identical "$got"
      else row "$name" "checkpoint ($b)" DIFFERENT "got '${got:-none}', golden '$want'"; fi
      [ $b = new ] && model=$dir
    done
    for run in "cpu exact" "cpu release" "cuda exact" "cuda release"; do
      read -r b num <<< "$run"
      local failed=0 why= why_old=
      for which in old new; do
        local bin=$old; [ $which = new ] && bin=$new
        timeout 600 env LD_LIBRARY_PATH="$LDP" "$bin" logits --model "$model" --tokens "$tok" --prefill "$prefill" \
          --backend "$b" --numerics "$num" --output "$work/$name.$b.$num.$which.bin" < /dev/null \
          > "$work/run.log" 2>&1 || { failed=$((failed + 1)); why=$(grep -m1 'error:' "$work/run.log"); }
        cat "$work/run.log" >> "$LOG/compare_$name.log"
        [ $which = old ] && why_old=$why
      done
      # A configuration both binaries refuse (e.g. release numerics of a model off their grid) is no difference.
      if [ $failed = 2 ] && [ -n "$why" ] && [ "$why" = "$why_old" ]; then row "$name" "$b $num" refused "both binaries: ${why#*error: }"; continue; fi
      if [ $failed != 0 ]; then row "$name" "$b $num" FAILED "a logits run failed (logs/compare_$name.log)"; continue; fi
      if cmp -s "$work/$name.$b.$num.old.bin" "$work/$name.$b.$num.new.bin"; then
        row "$name" "$b $num" identical "$(stat -c %s "$work/$name.$b.$num.new.bin") bytes"
      else
        row "$name" "$b $num" DIFFERENT "$(python3 - "$work/$name.$b.$num.old.bin" "$work/$name.$b.$num.new.bin" <<'PY'
import sys
import numpy as np
a, b = (np.fromfile(p, dtype="<f4") for p in sys.argv[1:3])
if a.size != b.size:
    print(f"sizes {a.size} vs {b.size} floats")
else:
    d = np.abs(a.astype(np.float64) - b)
    print(f"{int((a != b).sum())} of {a.size} floats differ, max |diff| {np.nanmax(d):.3e}")
PY
)"
      fi
    done
  done < <(e2e_cases "$work")
  cat "$table" >> "$SUMMARY"
  if grep -qE ' (DIFFERENT|FAILED) ' "$table"; then fail "compare: differences (table above)"; else note "compare: every run identical"; fi
  rm -rf "$work"
}

# ----------------------------------------------------------------------------------------------------- probes, ncu
cmd_probes() {
  header probes
  local p
  for p in "${PROBES[@]}"; do
    [ -x "$BIN/$p" ] || { fail "$p: not in the bundle (bundle builds it where nvcc exists)"; continue; }
    timeout 120 "$BIN/$p" > "$LOG/$p.log" 2>&1 || fail "$p: exit $? (logs/$p.log)"
    # The stream probe's table (one line per variant) is its result; the wgmma probes end with their verdicts.
    if [ $p = weight_stream_probe ]; then cat "$LOG/$p.log"; else tail -3 "$LOG/$p.log"; fi | tee -a "$SUMMARY"
  done
}

cmd_ncu() {
  [ $# -ge 2 ] || die "ncu: usage: ncu BINARY REGEX [ARGS...]   e.g. ncu test_cuda_linear bulk_expert_kernel --perf --perf-filter experts"
  local bin=$1 regex=$2; shift 2
  [ -x "$BIN/$bin" ] || die "ncu: $bin is not in the bundle"
  header "ncu $bin $regex $*"
  local ncu; ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout "${NCU_TIMEOUT:-540}" env LD_LIBRARY_PATH="$LDP" "$ncu" --kernel-name "regex:$regex" \
    --launch-skip "${SKIP:-0}" --launch-count "${COUNT:-2}" --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    "$BIN/$bin" "$@" > "$LOG/ncu.txt" 2>&1 || fail "ncu: exit $?"
  grep -vE '^\s*$|^    -+' "$LOG/ncu.txt" | tail -150 | tee -a "$SUMMARY"
}

# ------------------------------------------------------------------------------------------------------------- main
[ $# -ge 1 ] || usage
sub=$1; shift
# Virtual ranks on one GPU against TP1 (issue 16's acceptance on one device): every golden and tiny-sharding.
cmd_layouts() {
  local layouts=${*:-TP2 TP4 EP2 EP4 TP2xEP2}
  header "virtual layouts ($layouts) against TP1"
  local work num layout ours compared=0; work=$(mktemp -d)
  e2e=$LOG/layouts_e2e.jsonl; : > "$e2e"  # the case variables are global: run() and compare() read them
  while IFS='|' read -r name cfg seed prefill tok ckpt golden; do
    REFUSED=" "
    case_setup "$work" || continue
    for num in exact release; do
      RUN_ENV=
      # TP1 itself is the e2e subcommand's business: a model or numerics it refuses (e.g. release numerics of an
      # indexer head that is not a power of two) is noted here, and its layouts are not run.
      if ! fs logits --model "$model" --tokens "$tok" --prefill "$prefill" --backend cuda --numerics $num \
          --output "$work/$name.tp1_$num.bin" < /dev/null > "$LOG/layouts_tp1_$name.log" 2>&1; then
        note "$name $num: TP1 did not run: $(grep -m1 -o 'error: .*' "$LOG/layouts_tp1_$name.log")"
        continue
      fi
      run cuda $num "$work/$name.tp1_${num}_p.bin" --perturb-norms "$PERTURB_SEED"
      for layout in $layouts; do
        layout_splits "$name" "$cfg" $layout $num || continue
        ours=$work/$name.${layout}_$num.bin
        # shellcheck disable=SC2046
        run cuda $num "$ours" $(layout_flags $layout)
        [ -s "$ours" ] || continue
        compare --ours "$ours" --ref "$work/$name.tp1_$num.bin" --envelope "$work/$name.tp1_${num}_p.bin" \
          --label "$name $layout (virtual) vs TP1 cuda $num" || fail "$name $layout $num vs TP1"
        compared=$((compared + 1))
      done
    done
  done < <(e2e_cases "$work" tiny-sharding)
  verdict_table "$e2e"
  note "layouts: $compared comparisons against TP1"
  [ $compared -gt 0 ] || fail "layouts: no layout was compared (no case ran on the CUDA backend)"
  rm -rf "$work"
}

case "$sub" in
  bundle) cmd_bundle "$@"; exit $? ;;
  -h|--help|help) usage 0 ;;
  harness|perf|sanitize|e2e|envelopes|bench|ab|timeline|served|curve|diagnose|compare|probes|ncu|all|multi-gpu|layouts) ;;
  *) echo "gpu_check: unknown subcommand '$sub'" >&2; usage ;;
esac
mkdir -p "$OUT"
if [ "$sub" = multi-gpu ]; then
  GPUS=$(gpu_count)
  if [ "$GPUS" -lt 2 ]; then
    echo "gpu_check multi-gpu: this machine has $GPUS GPU(s); issue 17 needs two or more (device kind nvidia-h200-x2)." >&2
    echo "On one GPU: 'harness' runs test_cuda_comm on virtual ranks, 'bench' the virtual TP2 / EP2 layouts." >&2
    exit 3
  fi
fi
if [ "$sub" = envelopes ]; then
  # CPU only: any flashseek binary (FLASHSEEK_BIN, e.g. a CPU-only build's) on any machine.
  [ -n "${FLASHSEEK_BIN:-}" ] || die "envelopes needs FLASHSEEK_BIN=path/to/flashseek (a CPU-only build is enough)"
  BIN=$(dirname "$(realpath "$FLASHSEEK_BIN")"); LIBS=$BIN; FS=$(realpath "$FLASHSEEK_BIN")
  LDP=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mkdir -p "$LOG"
else
  setup_device
  FS=${FLASHSEEK_BIN:-$BIN/flashseek}
  [ -x "$FS" ] || [ "$sub" = probes ] || [ "$sub" = perf ] || die "$FS is not an executable flashseek binary"
fi
case "$sub" in
  harness) cmd_harness "$@" ;;
  perf) cmd_perf "$@" ;;
  sanitize) cmd_sanitize "$@" ;;
  e2e) cmd_e2e "$@" ;;
  envelopes) [ $# = 0 ] || die "envelopes takes no arguments"; cmd_e2e --cpu-only ;;
  bench) cmd_bench "$@" ;;
  ab) cmd_ab "$@" ;;
  timeline) cmd_timeline "$@" ;;
  served) cmd_served "$@" ;;
  curve) cmd_curve "$@" ;;
  diagnose) cmd_diagnose "$@" ;;
  compare) cmd_compare "$@" ;;
  probes) [ $# = 0 ] || die "probes takes no arguments"; cmd_probes ;;
  ncu) cmd_ncu "$@" ;;
  multi-gpu) cmd_multi_gpu "$@" ;;
  layouts) cmd_layouts "$@" ;;
  all) [ $# = 0 ] || die "all takes no arguments"
       cmd_harness; cmd_sanitize; cmd_e2e; cmd_perf; cmd_bench; cmd_probes ;;
esac
[ $FAILED = 0 ] && note "gpu_check $sub: PASS" || note "gpu_check $sub: FAIL"
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
exit $FAILED
