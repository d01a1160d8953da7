#!/usr/bin/env python3
"""Decode cost model of the whole V4-Flash (43 layers, no MTP) under parallel layouts: docs/perf.md, section
"Parallel layouts", prints what this script prints.

A decode step of a layout costs, per layer,

    X_C  +  sum over the layout-dependent ops of t_op(bytes the busiest rank streams, C)  +  all-reduces

plus the head. X_C is everything a layout does not change (replicated projections wq_a / wkv, compressors,
indexer, mHC, norms, routing, activation preparation, the KV store, the launch gaps of the step): it is calibrated
so that TP1 reproduces the step time measured on one H200 (docs/perf.md §1.1; 20 layers scaled to 43). The
layout-dependent ops are the ones a rank holds a slice of: wq_b, wo_a, wo_b (split over tp), the routed experts (the
distinct experts a rank holds, each split over tp), the shared expert and the head (split over all ranks), and at 16
sequences the sparse attention (its work is per query head). Their times come from the per-op measurements of
docs/perf.md §1.1 / §2.1 at the same number of sequences; a slice's time is interpolated in its bytes between the
measured points with the measured per-launch floor. Expert parallelism is gated by the rank with the most distinct
experts; that count is a Monte Carlo over uniform routing (6 distinct of 256 per token; real routing is skewed,
which makes EP worse). All-reduce times are per call (message = sequences x 4096 bf16 values).

A second prediction assumes the kernels reach the targets of docs/perf.md §4 (fraction of the memory roofline on a
rank's own bytes: 55% at 1 sequence, 60% at 16, 45% at 64) and adds the all-reduces of the first kind listed.

Usage: scripts/parallel_cost_model.py [--samples N]
"""
import argparse
import random

L = 43
HIDDEN = 4096
EXPERTS, TOPK = 256, 6

# Bytes (docs/model.md §3): FP8 weight + E8M0 scales.
WQ_B = 32768 * 1024 + 256 * 8
WO_A = 8192 * 4096 + 64 * 32
WO_B = 4096 * 8192 + 32 * 64
EXPERT = 3 * (2048 * 2048 + 2048 * 128)  # w1, w3: [2048, 2048] I8 + [2048, 128]; w2 the same bytes
SHARED = 3 * (2048 * 4096 + 16 * 32)
HEAD = 129280 * 4096 * 2
# Streamed by every rank whatever the layout, per layer: wq_a, wkv, both mHC fn, the router weight; the compressors
# and the indexer on the 21 ratio-4 layers (29.9 MB) and the compressor on the 20 ratio-128 layers (8.4 MB).
REPLICATED_LAYER = (1024 * 4096 + 8 * 32) + (512 * 4096 + 4 * 32) + 2 * 24 * 16384 * 4 + 256 * 4096 * 2
COMPRESSORS_STEP = 21 * (2 * 1024 * 4096 * 2 + 8192 * 1024 + 64 * 8 + 64 * 4096 * 2 + 2 * 256 * 4096 * 2) \
    + 20 * (2 * 512 * 4096 * 2)

MB = 1e6
US = 1e-6


def interp(points, x):
    """Piecewise-linear interpolation over (bytes, seconds) points (at least two), extrapolated from the last
    segment."""
    pts = sorted(points)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1 or (x1, y1) == pts[-1]:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]


class Gpu:
    """Measured per-op times on one H200 (docs/perf.md), rescaled for another GPU's copy bandwidth."""

    def __init__(self, name, copy_bw, scale_from_h200=1.0):
        self.name, self.copy_bw, self.k = name, copy_bw, scale_from_h200

    def op(self, points, b, floor):
        """Seconds of an op streaming b bytes: the measured points with (0 bytes, floor) added; the part above the
        floor streams bytes and scales with the copy bandwidth."""
        t = interp([(0.0, floor)] + points, b)
        return floor + max(t - floor, 0.0) * self.k


H200 = Gpu("H200", 4.23e12)
# RTX PRO 6000 Blackwell (96 GB, PCIe 5.0, no NVLink): 1.792 TB/s nominal, about 1.6 TB/s copy (docs/kernels.md
# §3.4 "@~1.6 (~90%)"); same kernels' fractions of it assumed (sm_120 has neither wgmma nor a measurement).
PRO6000 = Gpu("RTX PRO 6000", 1.6e12, 4.23 / 1.6)

# Per-op measurements (seconds) by number of sequences C: (bytes, time) points and a floor (launch + latency).
# C = 1: SIMT GEMV (wq_a 4.2 MB 6.1 us, 16.8 MB 14.0 us micro; wq_b / wo_a / wo_b 33.6 MB 20-22 us in the step),
# moe_gemv experts 67 us per layer for 6 experts (80 MB), shared expert 35 us (25 MB), head 290 us (1.06 GB).
# C = 16: wgmma GEMV 33.6 MB 24 us (micro), wo_a f16 GEMV 50 us (step), wgmma experts 442 us per layer for 78.6
# distinct experts, shared expert 51 us, sparse attention 732 us per 20 layers, head 384 us.
# C = 64: tile GEMM (micro at M = 64) wq_b 82.7 us, wo_b 104 us, wo_a 106.6 us; tile experts 67 of 88 ms of a
# profiled step = 3.10 ms per layer of the 81.4 ms / 20 graph step for E[distinct] 199.7 experts; shared expert as
# one expert-sized tile pass (25 MB at the experts' rate); head 1,383 us.
MEAS = {
    1: dict(step_20=4.51e-3, fp8=[(4.2 * MB, 6.1 * US), (16.8 * MB, 14.0 * US), (33.6 * MB, 21.0 * US)],
            wo_a=[(4.2 * MB, 6.1 * US), (16.8 * MB, 14.0 * US), (33.6 * MB, 21.0 * US)],
            experts_per_byte=(67 - 8) * US / (6 * EXPERT), experts_floor=8 * US,
            shared=[(SHARED, 35 * US)], shared_floor=8 * US, head=[(HEAD, 290 * US)], attention=None),
    16: dict(step_20=13.76e-3, fp8=[(33.6 * MB, 24 * US)], wo_a=[(33.6 * MB, 50 * US)],
             experts_per_byte=442 * US / (78.6 * EXPERT), experts_floor=0.0,
             shared=[(SHARED, 51 * US)], shared_floor=8 * US, head=[(HEAD, 384 * US)], attention=732 * US / 20),
    64: dict(step_20=81.4e-3, fp8=[(33.6 * MB, 93 * US)], wo_a=[(33.6 * MB, 106.6 * US)],
             experts_per_byte=3.10e-3 / (199.7 * EXPERT), experts_floor=0.0,
             shared=[(SHARED, 3.10e-3 / 199.7 * SHARED / EXPERT)], shared_floor=0.0, head=[(HEAD, 1383 * US)],
             attention=None),
}
FLOOR = 4 * US  # one launch of a streaming GEMV (wq_a's 4.2 MB in 6.1 us: 2 us of bytes at ~2 TB/s)


_distinct_cache = {}


def distinct_max(c, ep, samples, rng):
    """E[max over the ep expert groups of the distinct experts a group holds] for c tokens routed uniformly."""
    key = (c, ep)
    if key not in _distinct_cache:
        per_group = EXPERTS // ep
        total = 0.0
        for _ in range(samples):
            chosen = set()
            for _ in range(c):
                chosen.update(rng.sample(range(EXPERTS), TOPK))
            counts = [0] * ep
            for e in chosen:
                counts[e // per_group] += 1
            total += max(counts)
        _distinct_cache[key] = total / samples
    return _distinct_cache[key]


def allreduce(c, n, kind):
    """Seconds of one all-reduce of c x 4096 bf16 values over n ranks."""
    if n == 1:
        return 0.0
    m = c * HIDDEN * 2
    if kind == "nvlink-own":  # one-shot: published 4.5 / 4.8 / 7.8 us at 32 KB (TP 2 / 4 / 8), peer reads at 374 GB/s
        base = {2: 4.5, 4: 4.8, 8: 7.8}[n] * US
        return base + (n - 1) * m / 374e9
    if kind == "nvlink-nccl":  # measured on the H200 pair: ~50 us for 8 KB - 1 MB, launched eagerly
        return 50 * US
    # PCIe 5.0 x16 without NVLink: two-shot moves 2 (n - 1) / n of the message per GPU at an assumed 50 GB/s P2P;
    # latency 15 us (custom, derived in docs/kernels.md §3.5) or 40 us (NCCL, its measured 37.9 us all-gather).
    base = 15 * US if kind == "pcie-own" else 40 * US
    return base + 2 * (n - 1) / n * m / 50e9


def layer_ops(gpu, c, tp, ep, samples, rng):
    """Seconds per layer of the layout-dependent ops on the busiest rank."""
    m = MEAS[c]
    t = gpu.op(m["fp8"], WQ_B / tp, FLOOR) + gpu.op(m["fp8"], WO_B / tp, FLOOR) + gpu.op(m["wo_a"], WO_A / tp, FLOOR)
    t += m["experts_floor"] + distinct_max(c, ep, samples, rng) * EXPERT / tp * m["experts_per_byte"] * gpu.k
    t += gpu.op(m["shared"], SHARED / (tp * ep), m["shared_floor"])
    if m["attention"] is not None:  # per query head: split over tp
        t += max(m["attention"] / tp, FLOOR)
    return t


def layout_independent(c, samples, rng):
    """X_C: seconds per layer that TP1 on one H200 spends outside the layout-dependent ops (calibration)."""
    m = MEAS[c]
    return (m["step_20"] - H200.op(m["head"], HEAD, FLOOR)) / 20 - layer_ops(H200, c, 1, 1, samples, rng)


def step_time(gpu, c, tp, ep, ar_kind, samples, rng):
    """Predicted decode step (seconds) of the whole model on tp x ep GPUs of kind `gpu` at c sequences, and the
    all-reduce part of it. X_C is the H200's: latency-bound work is assumed as fast on the other GPU."""
    ranks = tp * ep
    comm = allreduce(c, tp, ar_kind) + allreduce(c, ranks, ar_kind)
    head = gpu.op(MEAS[c]["head"], HEAD / ranks, FLOOR)
    per_layer = layout_independent(c, samples, rng) + layer_ops(gpu, c, tp, ep, samples, rng) + comm
    return L * per_layer + head, L * comm


def rank_bytes(c, tp, ep, samples, rng):
    """Weight bytes the busiest rank streams in one decode step (the roofline's numerator; the KV is < 2%)."""
    per_layer = REPLICATED_LAYER + (WQ_B + WO_A + WO_B) / tp + SHARED / (tp * ep)
    per_layer += distinct_max(c, ep, samples, rng) * EXPERT / tp
    return L * per_layer + COMPRESSORS_STEP + HEAD / (tp * ep)


TARGET_FRACTION = {1: 0.55, 16: 0.60, 64: 0.45}  # docs/perf.md §4


def target_step(gpu, c, tp, ep, ar_kind, samples, rng):
    """The step if every rank streamed its bytes at the §4 target fraction of the copy bandwidth."""
    comm = allreduce(c, tp, ar_kind) + allreduce(c, tp * ep, ar_kind)
    return rank_bytes(c, tp, ep, samples, rng) / (TARGET_FRACTION[c] * gpu.copy_bw) + L * comm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=400, help="Monte Carlo samples of the routing (400)")
    args = ap.parse_args()
    rng = random.Random(20261201)
    print("X_C (per layer, layout-independent): " + ", ".join(
        f"C={c}: {layout_independent(c, args.samples, rng) * 1e6:.0f} us" for c in (1, 16, 64)))
    print("E[max distinct experts per group]: " + ", ".join(
        f"C={c} EP{ep}: {distinct_max(c, ep, args.samples, rng):.2f}" for c in (1, 16, 64) for ep in (1, 2, 4, 8)))

    def report(title, gpu, layouts, kinds):
        print(f"\n{title}")
        print(f"{'layout':10} {'C':>3} {'GB/rank':>8} {'roofline':>9} "
              + " ".join(f"{k + ' TPOT':>18} {'tok/s':>7}" for k in kinds) + f" {'all-reduce share':>17}"
              + f" {'at targets':>12} {'tok/s':>7}")
        for tp, ep in layouts:
            name = f"TP{tp}" if ep == 1 else (f"EP{ep}" if tp == 1 else f"TP{tp}xEP{ep}")
            for c in (1, 16, 64):
                cells, share = [], []
                for k in kinds:
                    t, comm = step_time(gpu, c, tp, ep, k, args.samples, rng)
                    cells.append(f"{t * 1e3:15.2f} ms {c / t:7.0f}")
                    share.append(f"{100 * comm / t:.0f}%")
                b = rank_bytes(c, tp, ep, args.samples, rng)
                tt = target_step(gpu, c, tp, ep, kinds[0], args.samples, rng)
                print(f"{name:10} {c:3d} {b / 1e9:8.2f} {b / gpu.copy_bw * 1e3:6.2f} ms " + " ".join(cells)
                      + f" {' / '.join(share):>17} {tt * 1e3:9.2f} ms {c / tt:7.0f}")

    report("2 x H200 (NV18)", H200, [(1, 1), (2, 1), (1, 2)], ["nvlink-own", "nvlink-nccl"])
    report("8 x RTX PRO 6000 (96 GB, PCIe 5.0)", PRO6000, [(8, 1), (1, 8), (4, 2), (2, 4)], ["pcie-own", "pcie-nccl"])


if __name__ == "__main__":
    main()
