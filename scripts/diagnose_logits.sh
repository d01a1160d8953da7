#!/usr/bin/env bash
# Localizes a CUDA-vs-CPU logits difference on one checkpoint (device): `flashseek logits` with --layers 1..L on
# both backends in the given numerics, compared per position (scripts/compare_logits.py --profile), then the full
# model with each CUDA environment variant given (e.g. "nobranch=FLASHSEEK_BRANCHES=0") against the same CPU run.
# Usage: scripts/diagnose_logits.sh FLASHSEEK_BIN MODEL_DIR TOKENS_FILE PREFILL NUMERICS [NAME=ENV ...]
#   TOKENS_FILE: whitespace-separated token ids (e.g. from a golden's meta.json). Logs and logits under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
FS=$1 MODEL=$2 TOKENS=$3 PREFILL=$4 NUM=$5; shift 5
OUT=${OUT:-$PWD/out/diagnose}
mkdir -p "$OUT"
vocab=$(python3 -c "import json; print(json.load(open('$MODEL/config.json'))['vocab_size'])")
layers=$(python3 -c "import json; print(json.load(open('$MODEL/config.json'))['num_hidden_layers'])")
logits() {  # backend out [env...] -- extra args
  local b=$1 out=$2; shift 2
  env "$@" "$FS" logits --model "$MODEL" --tokens "$TOKENS" --prefill "$PREFILL" --backend "$b" --numerics "$NUM" \
    ${LAYERS:+--layers $LAYERS} --output "$out" >> "$OUT/logits.log" 2>&1 || echo "logits $b ${LAYERS:-all} FAILED"
}
for n in $(seq 1 "$layers"); do
  LAYERS=$n logits cpu "$OUT/cpu.L$n.bin"
  LAYERS=$n logits cuda "$OUT/cuda.L$n.bin"
  python3 scripts/compare_logits.py --ours "$OUT/cuda.L$n.bin" --ref "$OUT/cpu.L$n.bin" --vocab "$vocab" \
    --label "--layers $n cuda vs cpu ($NUM)" --profile
done
for v in "$@"; do
  name=${v%%=*}; envs=${v#*=}
  # shellcheck disable=SC2086
  logits cuda "$OUT/cuda.$name.bin" $envs
  python3 scripts/compare_logits.py --ours "$OUT/cuda.$name.bin" --ref "$OUT/cpu.L$layers.bin" --vocab "$vocab" \
    --label "all layers, cuda with $envs vs cpu ($NUM)" --profile
done
