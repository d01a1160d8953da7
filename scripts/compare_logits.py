#!/usr/bin/env python3
# Compares two `flashseek logits` outputs (T x vocab little-endian float32 rows) position by position:
# relative L2 error ||ours_t - ref_t|| / ||ref_t|| and argmax agreement. Used by scripts/gpu_check.sh for the
# CUDA backend against the exact goldens (or CPU exact numerics) and against the CPU release numerics.
# Exit status 0 when max relative error <= --max-rel and argmax agreement >= --min-argmax, 1 otherwise, 2 on bad
# input (message names the file).
import argparse
import json
import os
import sys

import numpy as np


def load(path, vocab):
    if not os.path.isfile(path):
        sys.exit(f"compare_logits: {path}: no such file")
    data = np.fromfile(path, dtype="<f4")
    if data.size == 0 or data.size % vocab != 0:
        print(f"compare_logits: {path}: {data.size} floats is not a positive multiple of vocab {vocab}",
              file=sys.stderr)
        sys.exit(2)
    return data.reshape(-1, vocab).astype(np.float64)


def main():
    ap = argparse.ArgumentParser(description="per-position relative error and argmax agreement of two logits files")
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--max-rel", type=float, default=2e-2)
    ap.add_argument("--min-argmax", type=float, default=0.99)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default=None, help="append a JSON line with the figures to this file")
    ap.add_argument("--profile", action="store_true", help="also print the error at a few positions (localization)")
    a = ap.parse_args()
    if a.vocab <= 0:
        print(f"compare_logits: --vocab must be positive, got {a.vocab}", file=sys.stderr)
        sys.exit(2)
    ours, ref = load(a.ours, a.vocab), load(a.ref, a.vocab)
    if ours.shape != ref.shape:
        print(f"compare_logits: {a.ours} has {ours.shape[0]} rows, {a.ref} has {ref.shape[0]}", file=sys.stderr)
        sys.exit(2)
    if not np.all(np.isfinite(ours)):
        bad = int(np.argmax(~np.isfinite(ours).all(axis=1)))
        print(f"compare_logits: {a.ours}: non-finite logits (first at row {bad})", file=sys.stderr)
        rel = np.full(ours.shape[0], np.inf)
    else:
        rel = np.linalg.norm(ours - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-30)
    agree = float(np.mean(np.argmax(ours, axis=1) == np.argmax(ref, axis=1)))
    ok = bool(np.max(rel) <= a.max_rel and agree >= a.min_argmax)
    worst = int(np.argmax(rel))
    print(f"{a.label or a.ours}: {ours.shape[0]} positions, rel err max {np.max(rel):.3e} (pos {worst}) "
          f"median {np.median(rel):.3e} mean {np.mean(rel):.3e}; argmax agreement {100 * agree:.2f}% "
          f"[limits {a.max_rel:g}, {100 * a.min_argmax:g}%] -> {'PASS' if ok else 'FAIL'}")
    if a.profile:
        picks = sorted(set(list(range(min(12, len(rel)))) + list(range(12, len(rel), max(1, len(rel) // 16)))))
        print("  rel err by position: " + " ".join(f"{p}:{rel[p]:.1e}" for p in picks))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({"label": a.label, "ours": a.ours, "ref": a.ref, "positions": int(ours.shape[0]),
                                "rel_max": float(np.max(rel)), "rel_median": float(np.median(rel)),
                                "rel_mean": float(np.mean(rel)), "argmax_agreement": agree,
                                "max_rel_limit": a.max_rel, "min_argmax_limit": a.min_argmax, "pass": ok}) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
