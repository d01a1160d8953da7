#!/usr/bin/env python3
# Bisects a golden mismatch: for a committed golden, regenerates its checkpoint, then for N = 1..L layers runs
# `flashseek logits --layers N` and the HF oracle truncated to the same N layers (then hc_head, norm, head), on the
# golden's tokens (optionally only the first K), and prints the per-position relative error of each. The first N
# that fails names the layer (and the prefill/decode phase) to look at.
# Example: python3 scripts/oracle/compare_engine.py --flashseek build-cpu/tools/flashseek/flashseek \
#              --golden tests/data/goldens/golden-a --max-tokens 160
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_model import load_hf_model  # noqa: E402
from hf_run import per_position_rel_err, run_prefill_decode  # noqa: E402


def engine_logits(flashseek, model_dir, tokens, prefill, n_layers, tmp, extra):
    tok_path, out_path = os.path.join(tmp, "tokens.txt"), os.path.join(tmp, "logits.bin")
    with open(tok_path, "w") as f:
        f.write(" ".join(str(t) for t in tokens) + "\n")
    cmd = [flashseek, "logits", "--model", model_dir, "--tokens", tok_path, "--prefill", str(prefill),
           "--output", out_path, "--layers", str(n_layers)] + extra
    subprocess.run(cmd, check=True, capture_output=True)
    return np.fromfile(out_path, dtype="<f4").reshape(len(tokens), -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--flashseek", required=True)
    ap.add_argument("--golden", required=True, help="tests/data/goldens/<name>")
    ap.add_argument("--max-tokens", type=int, default=0, help="use only the first K tokens (0 = all)")
    ap.add_argument("--layers", default="", help="comma-separated layer counts (default 1..L)")
    ap.add_argument("--engine-args", default="", help="extra flashseek logits arguments, e.g. '--chunk 7'")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    with open(os.path.join(args.golden, "meta.json")) as f:
        meta = json.load(f)
    tokens = meta["tokens"][:args.max_tokens or None]
    prefill = min(meta["prefill"], len(tokens))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([args.flashseek, "gen-checkpoint", "--config", os.path.join(args.golden, "config.json"),
                        "--out", model_dir, "--seed", str(meta["gen_checkpoint_seed"])], check=True,
                       capture_output=True)
        with open(os.path.join(model_dir, "config.json")) as f:
            n_total = json.load(f)["num_hidden_layers"]
        counts = [int(x) for x in args.layers.split(",")] if args.layers else list(range(1, n_total + 1))
        for n in counts:
            model, _ = load_hf_model(model_dir, n_layers=n)
            hf = run_prefill_decode(model, tokens, prefill)
            ours = engine_logits(args.flashseek, model_dir, tokens, prefill, n, tmp, args.engine_args.split())
            err = per_position_rel_err(ours, hf)
            bad = np.nonzero(~(err <= 1e-4))[0]
            first = f", first > 1e-4 at t={bad[0]} ({'prefill' if bad[0] < prefill else 'decode'})" if len(bad) else ""
            print(f"layers {n}: max rel err {err.max():.3e} at t={int(err.argmax())}, {len(bad)} positions > 1e-4"
                  f"{first}", flush=True)


if __name__ == "__main__":
    main()
