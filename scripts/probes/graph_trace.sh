#!/usr/bin/env bash
# Per-node timeline of the captured decode graph (device): nsys with --cuda-graph-trace=node on a short bench, then a
# per-kernel summary of one decode step (start order, duration, gap before it on its stream) as CSV under $OUT.
# Usage (device, after scripts/device_bundle.sh): scripts/probes/graph_trace.sh CONCURRENCY [LAYERS]
set -uo pipefail
C=${1:-1}; L=${2:-20}
command -v nsys >/dev/null || { ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null; echo "no nsys"; exit 1; }
nsys profile --cuda-graph-trace=node -t cuda -o "$OUT/trace_c$C" -f true "$B/flashseek" bench \
  --model tests/data/configs/v4-flash.json --dummy-weights --layers "$L" --context 256 --concurrency "$C" \
  --output-len 8 --seed 1 > "$OUT/trace_bench_c$C.log" 2>&1 || echo "nsys rc=$?"
nsys stats --report cuda_gpu_trace --format csv --output "$OUT/trace_c$C" "$OUT/trace_c$C.nsys-rep" > /dev/null 2>&1
rm -f "$OUT/trace_c$C.nsys-rep" "$OUT/trace_c$C.sqlite"
ls "$OUT"
