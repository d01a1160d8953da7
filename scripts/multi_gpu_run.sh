#!/usr/bin/env bash
# Issue 17 ("Run the whole V4-Flash on two H200s") on a machine with two or more GPUs (device kind nvidia-h200-x2).
# One script, a few calls (each under the device tool's 10 minutes); NCCL_NVLS_ENABLE=0 is exported for every step.
#
# On the build machine (has the dev packages; builds for sm_90a):
#   bundle          build flashseek, test_cuda_comm and test_cuda_backend (BUILD, default build-gpucheck; JOBS,
#                   default 2), stage them with the shared libraries the device image lacks and pack them as
#                   .gpubundle/multi_gpu.tar.xz (git-ignored: carry `.gpubundle` with the device call)
# On the device (unpacks the bundle on first use; FLASHSEEK_BUILD=DIR runs that build folder's binaries instead):
#   comm            test_cuda_comm (every test: peer one-shot / two-shot and NCCL across the GPUs, bit-exactness of
#                   the own all-reduce against its rank-order reference, graphs; NCCL must load) and its
#                   micro-benchmark: all-reduce 8 KB .. 1 MB inside CUDA graphs, own one-shot / two-shot vs NCCL,
#                   one rank per GPU, plus the same on virtual ranks of GPU 0 for comparison      (~3 min)
#   correctness     TP2 and EP2 against TP1 on every golden and on tests/data/configs/tiny-sharding.json, with each
#                   communicator (COMMS), reference and production numerics, the envelope criterion
#                   (scripts/compare_logits.py): against the CPU reference, and against the CUDA TP1 run with the
#                   CUDA TP1 --perturb-norms run as its envelope. A layout a model cannot be split into is reported
#                   as refused, not failed
#   bench [L] [C]   flashseek bench on the whole 43-layer V4-Flash config, dummy weights: layouts L (default "TP2
#                   EP2"), communicators C (default: every one of COMMS); 1, 16, 64 sequences at contexts 256 and
#                   8,192 (the 8,192-token prefill included), per-op table; then the cost model's predictions
#   serve [L] [C]   flashseek serve on the same model and layout + flashseek bench-serve: 1,024 prompt / 256 output
#                   tokens at concurrency 1, 16 and 64 (default L = TP2, C = the first of COMMS)
#   all             comm, correctness, bench, serve in a row (longer than one device call: run the steps apart)
# Placement: the ranks go on separate GPUs through PLACEMENT, flashseek arguments added to every multi-rank run
# (default: "--devices 0,1,..." when `flashseek bench --help` lists --devices; without it the backend steps stop
# with a message, since every rank would run on GPU 0). Communicators: COMMS, a list of NAME:VAR=VALUE (default
# "own:FLASHSEEK_COMM=peer nccl:FLASHSEEK_COMM=nccl"), the environment each multi-rank run gets per communicator.
# Results: $OUT (default out/multi_gpu): summary.txt (every verdict and table) and logs/.
# Exit status: 0 when every step passed, 1 when one failed, 2 on bad usage, 3 when the machine has fewer than 2 GPUs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
export FLASHSEEK_SOURCE_DIR=$ROOT PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
BUNDLE=$ROOT/.gpubundle/multi_gpu.tar.xz
TARGETS=(flashseek test_cuda_comm test_cuda_backend)
COMMS=${COMMS:-"own:FLASHSEEK_COMM=peer nccl:FLASHSEEK_COMM=nccl"}
PERTURB_SEED=${PERTURB_SEED:-1}

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "multi_gpu_run: $*" >&2; exit 2; }
[ $# -ge 1 ] || usage 2
STEP=$1; shift
case "$STEP" in -h|--help|help) usage 0 ;; bundle|comm|correctness|bench|serve|all) ;; *) usage 2 ;; esac

# ------------------------------------------------------------------------------------------------------- bundle
if [ "$STEP" = bundle ]; then
  set -e
  BUILD=${BUILD:-build-gpucheck}
  [ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release
  nice cmake --build "$BUILD" -j"${JOBS:-2}" --target "${TARGETS[@]}"
  stage=$(mktemp -d)
  for t in "${TARGETS[@]}"; do cp "$(find "$BUILD" -type f -name "$t" -perm -u+x | head -1)" "$stage/"; done
  # The libraries the device image lacks (everything else, libc and the CUDA driver included, comes from there).
  for f in "$stage"/*; do ldd "$f" | awk '/=> \// {print $3}'; done \
    | grep -E 'libfmt|libgtest|libgmock|libpcre2|libcpp-httplib' | sort -u | while read -r lib; do cp -L "$lib" "$stage/"; done
  mkdir -p "$(dirname "$BUNDLE")"
  tar -cJf "$BUNDLE" -C "$stage" .
  rm -rf "$stage"
  ls -la "$BUNDLE"
  exit 0
fi

# ------------------------------------------------------------------------------------------------------- device
OUT=${OUT:-$ROOT/out/multi_gpu}
LOG=$OUT/logs
mkdir -p "$LOG"
SUMMARY=$OUT/summary.txt
touch "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
FAILED=0
failed() { note "FAILED: $*"; FAILED=1; }

GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
if [ "${GPUS:-0}" -lt 2 ]; then
  echo "multi_gpu_run: this machine has ${GPUS:-0} GPU(s); issue 17 needs at least 2 (device kind nvidia-h200-x2)." >&2
  echo "On one GPU: test_cuda_comm (virtual ranks) and the virtual TP/EP layouts of scripts/gpu_check.sh." >&2
  exit 3
fi

if [ -n "${FLASHSEEK_BUILD:-}" ]; then
  BIN=$(cd "$FLASHSEEK_BUILD" && pwd)/bin; mkdir -p "$BIN"
  for t in "${TARGETS[@]}"; do f=$(find "$FLASHSEEK_BUILD" -type f -name "$t" -perm -u+x | head -1); [ -n "$f" ] && cp "$f" "$BIN/"; done
else
  BIN=$ROOT/.gpubundle/multi
  if [ ! -x "$BIN/flashseek" ]; then
    [ -f "$BUNDLE" ] || die "no $BUNDLE: run 'scripts/multi_gpu_run.sh bundle' on the build machine and carry .gpubundle"
    mkdir -p "$BIN" && tar -xJf "$BUNDLE" -C "$BIN" || die "cannot unpack $BUNDLE"
  fi
  export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
FS=$BIN/flashseek
[ -x "$FS" ] || die "$FS is not an executable flashseek binary"

{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nvidia-smi topo -m; } \
  > "$LOG/gpus.txt" 2>&1
note "multi_gpu_run $STEP $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $GPUS GPUs: $(head -1 "$LOG/gpus.txt"); NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"

# The ranks of a layout on separate GPUs.
placement() { # ranks
  if [ -n "${PLACEMENT:-}" ]; then echo "$PLACEMENT"; return 0; fi
  if "$FS" bench --help 2>&1 | grep -q -- '--devices'; then echo "--devices $(seq -s, 0 $(($1 - 1)))"; return 0; fi
  return 1
}
ranks_of() { case "$1" in TP2|EP2) echo 2 ;; TP4|EP4|TP2xEP2) echo 4 ;; *) echo 1 ;; esac; }
layout_args() { case "$1" in TP2) echo "--tp 2" ;; EP2) echo "--ep 2" ;; TP4) echo "--tp 4" ;; EP4) echo "--ep 4" ;;
  TP2xEP2) echo "--tp 2 --ep 2" ;; TP1) echo "" ;; *) die "unknown layout $1 (TP2, EP2, TP4, EP4, TP2xEP2)" ;; esac; }
comm_env() { for c in $COMMS; do [ "${c%%:*}" = "$1" ] && { echo "${c#*:}"; return 0; }; done; die "no communicator $1 in COMMS=$COMMS"; }
comm_names() { for c in $COMMS; do echo "${c%%:*}"; done; }
need_placement() {
  if ! placement 2 > /dev/null; then
    failed "$STEP: this flashseek has no multi-device placement (no --devices in 'flashseek bench --help' and PLACEMENT unset): every rank would run on GPU 0. Set PLACEMENT to the flags that place ranks on separate GPUs."
    return 1
  fi
}
# Runs flashseek with a layout's placement and a communicator's environment: run_fs LOGNAME LAYOUT COMM args...
run_fs() {
  local log=$1 layout=$2 comm=$3; shift 3
  local extra=() envs=()
  if [ "$layout" != TP1 ]; then
    read -r -a extra <<< "$(layout_args "$layout") $(placement "$(ranks_of "$layout")")"
    read -r -a envs <<< "$(comm_env "$comm")"
  fi
  env "${envs[@]}" "$FS" "$@" "${extra[@]}" >> "$LOG/$log.log" 2>&1
}

# ------------------------------------------------------------------------------------------------------- comm
step_comm() {
  note "== comm: test_cuda_comm on $GPUS GPUs (NCCL required)"
  FLASHSEEK_REQUIRE_NCCL=1 timeout "${TEST_TIMEOUT:-300}" "$BIN/test_cuda_comm" --gtest_brief=1 > "$LOG/test_cuda_comm.log" 2>&1
  local rc=$?
  note "test_cuda_comm: exit $rc, $(grep -E '^\[  PASSED  \]' "$LOG/test_cuda_comm.log" | tail -1) $(grep -E '^\[  FAILED  \] [0-9]+ test' "$LOG/test_cuda_comm.log")"
  grep -E '^\[  FAILED  \] [A-Za-z]|^\[  SKIPPED \] [A-Za-z]' "$LOG/test_cuda_comm.log" | sort -u | head -20 | tee -a "$SUMMARY"
  [ $rc = 0 ] || failed "test_cuda_comm (logs/test_cuda_comm.log)"
  note "== comm: all-reduce micro-benchmark inside CUDA graphs, one rank per GPU"
  timeout 300 "$BIN/test_cuda_comm" --bench --json "$OUT/allreduce_gpus.json" 2>&1 | tee "$LOG/allreduce_gpus.log" | tee -a "$SUMMARY"
  [ "${PIPESTATUS[0]}" = 0 ] || failed "all-reduce benchmark on $GPUS GPUs"
  note "== comm: the same on 2 virtual ranks of GPU 0 (no link: the kernels' own cost)"
  timeout 200 "$BIN/test_cuda_comm" --bench --virtual --ranks 2 --json "$OUT/allreduce_virtual.json" 2>&1 \
    | tee "$LOG/allreduce_virtual.log" | tee -a "$SUMMARY"
  [ "${PIPESTATUS[0]}" = 0 ] || failed "all-reduce benchmark on virtual ranks"
}

# ------------------------------------------------------------------------------------------------------- correctness
compare() { # ours ref envelope vocab label
  python3 scripts/compare_logits.py --ours "$1" --ref "$2" --envelope "$3" --vocab "$4" --label "$5" \
    --json "$OUT/correctness.jsonl" 2>&1 | tee -a "$SUMMARY"
  [ "${PIPESTATUS[0]}" = 0 ] || failed "$5"
}

step_correctness() {
  need_placement || return
  note "== correctness: TP2 / EP2 on $GPUS GPUs against TP1 and the CPU reference (envelope criterion)"
  local work; work=$(mktemp -d)
  local cases=()
  for d in tests/data/goldens/*/; do [ -f "$d/meta.json" ] && cases+=("golden:${d%/}"); done
  cases+=("config:tests/data/configs/tiny-sharding.json")
  for c in "${cases[@]}"; do
    local kind=${c%%:*} path=${c#*:} name seed prefill vocab ckpt cfg
    if [ "$kind" = golden ]; then
      name=$(basename "$path")
      read -r seed prefill vocab ckpt < <(python3 -c "import json; m=json.load(open('$path/meta.json')); print(m.get('gen_checkpoint_seed', m.get('seed')), m['prefill'], m.get('vocab_size') or json.load(open('$path/config.json'))['vocab_size'], m.get('checkpoint', ''))")
      python3 -c "import json; m=json.load(open('$path/meta.json')); print(' '.join(map(str, m['tokens'])))" > "$work/$name.tok"
      cfg=$path/config.json
    else
      name=$(basename "$path" .json); cfg=$path; seed=7; prefill=150; ckpt=
      vocab=$(python3 -c "import json; print(json.load(open('$cfg'))['vocab_size'])")
      python3 -c "import random; r=random.Random(11); print(' '.join(str(r.randrange(2, $vocab)) for _ in range(300)))" > "$work/$name.tok"
    fi
    if [ -n "$ckpt" ]; then cp -r "$path/$ckpt" "$work/$name"
    else "$FS" gen-checkpoint --config "$cfg" --out "$work/$name" --seed "$seed" > "$LOG/c_$name.log" 2>&1 || { failed "$name: gen-checkpoint"; continue; }; fi
    local base=(logits --model "$work/$name" --tokens "$work/$name.tok" --prefill "$prefill")
    for num in exact release; do
      local ref="$work/$name.cpu_$num.bin"
      if [ "$kind" = golden ] && [ $num = exact ]; then ref=$path/logits.bin; fi
      [ -f "$ref" ] || run_fs "c_$name" TP1 - "${base[@]}" --backend cpu --numerics $num --output "$ref"
      run_fs "c_$name" TP1 - "${base[@]}" --backend cpu --numerics $num --output "$work/$name.cpu_${num}_p.bin" --perturb-norms "$PERTURB_SEED"
      CUDA_VISIBLE_DEVICES=0 run_fs "c_$name" TP1 - "${base[@]}" --backend cuda --numerics $num --output "$work/$name.tp1_$num.bin" \
        || { failed "$name TP1 cuda $num (logs/c_$name.log)"; continue; }
      CUDA_VISIBLE_DEVICES=0 run_fs "c_$name" TP1 - "${base[@]}" --backend cuda --numerics $num --output "$work/$name.tp1_${num}_p.bin" \
        --perturb-norms "$PERTURB_SEED"
      for layout in TP2 EP2; do
        for comm in $(comm_names); do
          local ours="$work/$name.${layout}_${comm}_$num.bin"
          if ! run_fs "c_$name" "$layout" "$comm" "${base[@]}" --backend cuda --numerics $num --output "$ours"; then
            if tail -3 "$LOG/c_$name.log" | grep -q "layout $layout: "; then  # the layout rules (model/sharding.h)
              note "$name $layout: refused: $(tail -3 "$LOG/c_$name.log" | grep "layout $layout: " | tail -1)"
            else failed "$name $layout $comm $num (logs/c_$name.log)"; fi
            continue
          fi
          compare "$ours" "$ref" "$work/$name.cpu_${num}_p.bin" "$vocab" "$name $layout ($comm) cuda $num vs CPU $num"
          compare "$ours" "$work/$name.tp1_$num.bin" "$work/$name.tp1_${num}_p.bin" "$vocab" "$name $layout ($comm) vs TP1 cuda $num"
        done
      done
    done
  done
  rm -rf "$work"
}

# ------------------------------------------------------------------------------------------------------- bench
step_bench() { # [layouts] [comms]
  need_placement || return
  local layouts=${1:-"TP2 EP2"} comms=${2:-$(comm_names | tr '\n' ' ')}
  for layout in $layouts; do
    for comm in $comms; do
      note "== bench: whole V4-Flash (43 layers, dummy weights), $layout, $comm all-reduce"
      run_fs "bench_${layout}_$comm" "$layout" "$comm" bench --model tests/data/configs/v4-flash.json --dummy-weights \
        --concurrency "${CONCURRENCY:-1,16,64}" --context "${CONTEXTS:-256,8192}" --json "$OUT/bench_${layout}_$comm.json" \
        || failed "bench $layout $comm (logs/bench_${layout}_$comm.log)"
      tail -40 "$LOG/bench_${layout}_$comm.log" >> "$SUMMARY"
    done
  done
  note "== the cost model's predictions (docs/perf.md §5.3) for comparison"
  python3 scripts/parallel_cost_model.py 2>&1 | tee -a "$SUMMARY"
}

# ------------------------------------------------------------------------------------------------------- serve
step_serve() { # [layouts] [comms]
  need_placement || return
  local layouts=${1:-TP2} comms=${2:-$(comm_names | head -1)} port=${PORT:-8411}
  local model; model=$(mktemp -d)/v4-flash
  mkdir -p "$model"
  cp tests/data/configs/v4-flash.json "$model/config.json"
  cp assets/tokenizer/deepseek-v4/tokenizer.json "$model/tokenizer.json"
  for layout in $layouts; do
    for comm in $comms; do
      note "== serve: whole V4-Flash, $layout, $comm all-reduce; bench-serve 1,024 prompt / 256 output tokens"
      local log="serve_${layout}_$comm"
      run_fs "$log" "$layout" "$comm" serve --model "$model" --dummy-weights --backend cuda --port "$port" \
        --max-num-seqs 64 &
      local server=$!
      local up=0
      for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && { up=1; break; }
        kill -0 $server 2> /dev/null || break
        sleep 1
      done
      if [ $up = 0 ]; then failed "serve $layout $comm did not come up (logs/$log.log)"; kill $server 2> /dev/null; continue; fi
      for c in ${SERVE_CONCURRENCY:-1 16 64}; do
        local prompts=$((c * 4 < 8 ? 8 : c * 4))
        "$FS" bench-serve --port "$port" --num-prompts "$prompts" --max-concurrency "$c" --random-input-len 1024 \
          --random-output-len 256 --no-progress --save-result "$OUT/serve_${layout}_${comm}_c$c.json" \
          > "$LOG/${log}_c$c.log" 2>&1 || failed "bench-serve $layout $comm concurrency $c (logs/${log}_c$c.log)"
        note "-- concurrency $c ($prompts requests):"
        tail -25 "$LOG/${log}_c$c.log" >> "$SUMMARY"
      done
      kill -TERM $server 2> /dev/null
      wait $server 2> /dev/null
    done
  done
  rm -rf "$(dirname "$model")"
}

case "$STEP" in
  comm) step_comm ;;
  correctness) step_correctness ;;
  bench) step_bench "$@" ;;
  serve) step_serve "$@" ;;
  all) step_comm; step_correctness; step_bench; step_serve ;;
esac
note "multi_gpu_run $STEP: $([ $FAILED = 0 ] && echo PASS || echo FAIL)"
exit $FAILED
