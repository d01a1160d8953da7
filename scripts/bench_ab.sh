#!/usr/bin/env bash
# A/B decode benchmark on the device machine: the same `flashseek bench` (full-size V4-Flash layers, dummy weights)
# run once per environment variant, alternating variants so that clock drift hits both alike, each result saved as
# JSON under $OUT and summarised in one table (TPOT median, roofline fraction per concurrency).
# Usage: scripts/bench_ab.sh FLASHSEEK_BIN "NAME=ENV ..." ["NAME=ENV ..."]   e.g.
#        scripts/bench_ab.sh .gpucheck/flashseek "pdl=FLASHSEEK_PDL=1" "nopdl=FLASHSEEK_PDL=0"
# Extra bench flags via BENCH_ARGS (default: --layers 20 --context 256 --concurrency 1,16 --output-len 32).
set -uo pipefail
cd "$(dirname "$0")/.."
FS=$1; shift
OUT=${OUT:-$PWD/out/bench_ab}
mkdir -p "$OUT"
ARGS=${BENCH_ARGS:---layers 20 --context 256 --concurrency 1,16 --output-len 32}
ROUNDS=${ROUNDS:-2}
for r in $(seq 1 "$ROUNDS"); do
  for v in "$@"; do
    name=${v%%=*}; envs=${v#*=}
    # shellcheck disable=SC2086
    env $envs "$FS" bench --model tests/data/configs/v4-flash.json --dummy-weights $ARGS --seed 1 \
      --json "$OUT/bench_${name}_$r.json" > "$OUT/bench_${name}_$r.log" 2>&1 || echo "bench $name round $r FAILED (exit $?)"
  done
done
python3 - "$OUT" "$ROUNDS" "$@" <<'EOF'
import json, sys, statistics
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'variant':<10} {'conc':>4} {'ctx':>6} {'TPOT ms (per round)':<24} {'roofline %':>10}")
for v in variants:
    name = v.split("=", 1)[0]
    rows = {}
    for r in range(1, rounds + 1):
        try:
            d = json.load(open(f"{out}/bench_{name}_{r}.json"))
        except Exception as e:
            print(f"{name}: round {r} has no JSON ({e})"); continue
        for x in d["results"]:
            rows.setdefault((x["concurrency"], x["context"]), []).append((x["tpot_median_ms"], x["roofline_fraction"]))
    for (c, ctx), vals in sorted(rows.items()):
        t = " / ".join(f"{a:.3f}" for a, _ in vals)
        print(f"{name:<10} {c:>4} {ctx:>6} {t:<24} {100 * statistics.median(b for _, b in vals):>9.1f}%")
EOF
