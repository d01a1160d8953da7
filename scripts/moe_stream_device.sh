#!/usr/bin/env bash
# Device half of the persistent streaming MoE kernels (src/cuda/moe/moe_stream.cu): op harness, MoE micro-bench
# (streaming variants and probes vs per-tile GEMV vs mma), end-to-end decode bench A/B: the fastest streaming
# variant of the micro-bench at M=16 (its settings as FLASHSEEK_MOE_STREAM_* variables) vs FLASHSEEK_MOE_STREAM=0;
# logs in $OUT. Stays under ~4 minutes.
# Build here first (build-stream: test_cuda_linear, flashseek), then scripts/moe_stream_stage.sh.
# Usage on the device: bash scripts/moe_stream_device.sh [--full-tests] [--memcheck]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/.devcarry" || { echo "no .devcarry"; exit 1; }
export LD_LIBRARY_PATH=$PWD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for b in flashseek test_cuda_linear; do
  [ -f "$b.gz" ] && [ ! -f "$b" ] && gunzip -k "$b.gz" && chmod +x "$b"
done
FULL=0; MEMCHECK=0
for a in "$@"; do case $a in --full-tests) FULL=1 ;; --memcheck) MEMCHECK=1 ;; esac; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
T='./test_cuda_linear'
echo "== micro-bench (MoE)"
timeout 70 $T --bench --moe-only --json "$OUT/bench-moe.json" > "$OUT/bench-moe.log" 2>&1; echo "rc=$?"
grep -E "copy|experts" "$OUT/bench-moe.log" | cut -c1-120
# Fastest non-probe streaming variant at M=16 -> environment.
BEST=$(grep -E "M=16 .* stream" "$OUT/bench-moe.log" | grep -v probe | awk '{for(i=1;i<=NF;i++) if($i=="us"){print $(i-1), $0; break}}' |
  sort -n | head -1 | sed -E 's/.*% +//; s/ up\+down//')
ENV="FLASHSEEK_MOE_STREAM=1"
case " $BEST " in *" cb1024 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_CB=1024" ;; esac
case " $BEST " in *" cb2048 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_CB=2048" ;; esac
case " $BEST " in *" r192 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_RING=192" ;; esac
case " $BEST " in *" r96x2 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_RING=96 FLASHSEEK_MOE_STREAM_CTAS=2" ;; esac
case " $BEST " in *" ws "*) ENV="$ENV FLASHSEEK_MOE_STREAM_WS=1" ;; esac
case " $BEST " in *" w16 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_WARPS=16" ;; esac
case " $BEST " in *" l2 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_L2=2" ;; esac
case " $BEST " in *" r64x2 "*) ENV="$ENV FLASHSEEK_MOE_STREAM_RING=64 FLASHSEEK_MOE_STREAM_CTAS=2" ;; esac
echo "best streaming variant at M=16: '$BEST' -> $ENV"
if [ $FULL = 1 ]; then F='*'; else F='MoeLayer.*:MoeRoute.*'; fi
echo "== tests ($F, $ENV)"
env $ENV timeout 130 $T --gtest_filter="$F" > "$OUT/test.log" 2>&1; echo "rc=$?"
grep -E "^\[  (FAILED|PASSED) |^\[       OK|Failure|Expected|Which is|path=|error" "$OUT/test.log" | head -30
fsbench() {  # $1 = tag, rest = env
  local tag=$1; shift
  echo "== flashseek bench $tag ($*)"
  env "$@" timeout 60 ./flashseek bench --model "$ROOT/tests/data/configs/v4-flash.json" --dummy-weights --layers 20 \
    --context 256 --concurrency 1,16 --output-len 16 --json "$OUT/fsbench-$tag.json" > "$OUT/fsbench-$tag.log" 2>&1
  echo "rc=$?"
  grep -E "TPOT|roofline|copy" "$OUT/fsbench-$tag.log" | cut -c1-120
  grep -E "moe.routed" "$OUT/fsbench-$tag.log" | cut -c1-100
}
fsbench stream $ENV
fsbench old FLASHSEEK_MOE_STREAM=0
if [ $MEMCHECK = 1 ] && command -v compute-sanitizer >/dev/null; then
  echo "== memcheck (MoE cases)"
  env $ENV timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $T --gtest_filter='MoeLayer.*' > "$OUT/memcheck.log" 2>&1
  echo "rc=$?"; tail -2 "$OUT/memcheck.log"
fi
