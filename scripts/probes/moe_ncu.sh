#!/usr/bin/env bash
# Nsight Compute look at the streaming MoE kernels (device): stall reasons, scheduler and memory sections of
# micro-benchmark launches, printed in full. KERNEL (regex, default bulk_expert_kernel) picks the kernel, SKIP and
# COUNT the launches (default: skip 120, i.e. into the M=16 block of the bulk kernel).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device_bundle.sh
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# launches of bulk_expert per M: 12 timed calls x 2 kernels + warm-up; skip into the M=16 block
timeout 300 "$NCU" --kernel-name regex:${KERNEL:-bulk_expert_kernel} --launch-skip ${SKIP:-120} --launch-count ${COUNT:-2} \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --section Occupancy --section SourceCounters --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_tex_throttle,smsp__pcsamp_warps_issue_stalled_imc_miss,smsp__pcsamp_warps_issue_stalled_drain,smsp__pcsamp_warps_issue_stalled_misc \
  "$B/test_cuda_linear" --bench --moe-only > "$OUT/ncu.txt" 2>&1
grep -vE "^\s*$|^    -+" "$OUT/ncu.txt" | grep -vE "^\s+(OPT|INF|WRN)|^          " | tail -120
