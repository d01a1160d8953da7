#!/usr/bin/env python3
# Writes golden logits for the flashseek golden test (tests/golden): a tiny random checkpoint made by
# `flashseek gen-checkpoint` is loaded into HF transformers' DeepseekV4ForCausalLM (fp32, CPU; the independent
# oracle, docs/model.md §6), which runs a prefill of P tokens followed by teacher-forced cached decode steps,
# exactly the `flashseek logits` contract. Output: tests/data/goldens/<name>/{config.json, meta.json, logits.bin}.
#
# Needs the oracle packages: scripts/install_deps.sh --oracle (torch, transformers >= 5.15).
# Example:
#   scripts/make_goldens.py --flashseek build-cpu/tools/flashseek/flashseek \
#       --config tests/data/configs/golden-a.json --name golden-a --seed 11 --prefill 203 --tokens 520
# A decision-free golden (every expert active, index_topk above every query's entry count; the literal
# accuracy criterion of issue 4 is meaningful on it, see docs/perf.md):
#   scripts/make_goldens.py --flashseek build-acc/tools/flashseek/flashseek --no-decisions \
#       --config tests/data/configs/golden-d.json --name golden-d-no-decisions --seed 15 --prefill 143 --tokens 300
# A golden of a trained model (scripts/oracle/train_tiny.py): the checkpoint is committed beside the golden
# (<name>/model/, recorded as meta "checkpoint") and the tokens are the bytes of a text (token = byte + 2):
#   scripts/make_goldens.py --flashseek build-cpu/tools/flashseek/flashseek --config /tmp/trained-a/config.json \
#       --model /tmp/trained-a --keep-checkpoint --tokens-text README.md --name trained-a --prefill 150 --tokens 400
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle"))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A golden is rejected when a top-k decision of the oracle was closer to a tie than this (relative gap): the
# engine's fp32 rounding could then legitimately pick the other candidate and fail the 1e-4 acceptance.
MIN_RELATIVE_MARGIN = 1e-5


def content_hash(flashseek, model_dir):
    """The checkpoint content hash printed by `flashseek inspect --model DIR`."""
    out = subprocess.run([flashseek, "inspect", "--model", model_dir], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"content[ _-]?hash\s*[:=]\s*(\S+)", out, re.IGNORECASE)
    if not m:
        raise SystemExit(f"`flashseek inspect` printed no content hash:\n{out}")
    return m.group(1)


def generate_checkpoint(flashseek, config, seed, out_dir):
    subprocess.run([flashseek, "gen-checkpoint", "--config", config, "--out", out_dir, "--seed", str(seed)],
                   check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True, help="official-layout config.json of the tiny model")
    ap.add_argument("--name", required=True, help="golden name: output goes to tests/data/goldens/<name>")
    ap.add_argument("--seed", type=int, default=None, help="gen-checkpoint seed (required without --model)")
    ap.add_argument("--prefill", type=int, required=True, help="tokens in the first (prefill) forward")
    ap.add_argument("--tokens", type=int, required=True, help="total tokens T")
    ap.add_argument("--token-seed", type=int, default=None, help="seed of the random token ids (default: fresh)")
    ap.add_argument("--flashseek", default=os.path.join(REPO, "build-cpu/tools/flashseek/flashseek"))
    ap.add_argument("--model", default=None, help="use this checkpoint folder instead of running gen-checkpoint "
                    "(development only unless --keep-checkpoint: the golden then records no hash and the test "
                    "rejects it)")
    ap.add_argument("--keep-checkpoint", action="store_true",
                    help="with --model: copy the checkpoint into <name>/model/ and record its content hash (for "
                         "trained checkpoints, which no seed regenerates)")
    ap.add_argument("--tokens-text", default=None,
                    help="token ids = the first --tokens bytes of this text file + 2 (byte-level trained models) "
                         "instead of random ids")
    ap.add_argument("--out-root", default=os.path.join(REPO, "tests/data/goldens"))
    ap.add_argument("--max-attempts", type=int, default=8, help="token seeds to try when margins are too small")
    ap.add_argument("--no-decisions", action="store_true",
                    help="require a decision-free golden (no router top-k choice: num_experts_per_tok = "
                         "n_routed_experts; no indexer top-k choice: index_topk >= every query's ratio-4 entries), "
                         "so that the literal accuracy criterion is meaningful on it; refuse to write otherwise")
    args = ap.parse_args()
    if args.seed is None and not args.model:
        raise SystemExit("--seed is required unless --model DIR gives the checkpoint")
    if args.keep_checkpoint and not args.model:
        raise SystemExit("--keep-checkpoint needs --model DIR")
    if not 1 <= args.prefill <= args.tokens:
        raise SystemExit(f"--prefill {args.prefill} must be in [1, --tokens {args.tokens}]")

    import torch
    import transformers
    from hf_model import load_hf_model
    from hf_run import DecisionMargins, per_position_rel_err, run_full, run_prefill_decode
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    tmp = tempfile.mkdtemp(prefix="flashseek-golden-")
    try:
        if args.model:
            model_dir = args.model
            chash = content_hash(args.flashseek, model_dir) if args.keep_checkpoint else None
        else:
            model_dir = os.path.join(tmp, "model")
            generate_checkpoint(args.flashseek, args.config, args.seed, model_dir)
            chash = content_hash(args.flashseek, model_dir)
        model, official = load_hf_model(model_dir)
        vocab = official["vocab_size"]

        token_seed = args.token_seed if args.token_seed is not None else int.from_bytes(os.urandom(4), "little")
        for attempt in range(args.max_attempts):
            if args.tokens_text:
                text_offset = 61 * attempt  # a near-tie moves the window along the text
                text = open(args.tokens_text, "rb").read()[text_offset:text_offset + args.tokens]
                if len(text) < args.tokens:
                    raise SystemExit(f"--tokens-text {args.tokens_text}: {len(text)} bytes from offset "
                                     f"{text_offset}, --tokens {args.tokens}")
                tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int64) + 2
            else:
                tokens = np.random.default_rng(token_seed).integers(0, vocab, size=args.tokens).astype(np.int64)
            margins = DecisionMargins(model)
            t0 = time.time()
            cached = run_prefill_decode(model, tokens, args.prefill)
            margins.close()
            t_cached = time.time() - t0
            worst = min(margins.router_min, margins.indexer_min)
            print(f"[{args.name}] token seed {token_seed if not args.tokens_text else 'text +' + str(text_offset)}: router margin {margins.router_min:.3g}, indexer margin "
                  f"{margins.indexer_min:.3g} over {margins.indexer_choices} indexer choices, swiglu clamped "
                  f"{margins.swiglu_clamped}/{margins.swiglu_total}, {t_cached:.1f}s")
            if worst >= MIN_RELATIVE_MARGIN:
                break
            if args.token_seed is not None or attempt == args.max_attempts - 1:
                raise SystemExit(f"top-k margin {worst:.3g} < {MIN_RELATIVE_MARGIN}: near-tie, pick other seeds")
            if not args.tokens_text:
                token_seed += 1

        decision_free = margins.router_min == float("inf") and margins.indexer_choices == 0
        if args.no_decisions:
            cfg = json.load(open(args.config))
            if cfg["num_experts_per_tok"] != cfg["n_routed_experts"]:
                raise SystemExit(f"--no-decisions: {args.config} has num_experts_per_tok "
                                 f"{cfg['num_experts_per_tok']} < n_routed_experts {cfg['n_routed_experts']}")
            if not decision_free:
                raise SystemExit(f"--no-decisions: the oracle made {margins.indexer_choices} indexer top-k choices "
                                 f"(raise index_topk above {args.tokens // 4}) and router margin "
                                 f"{margins.router_min:.3g} (inf = no choice)")

        full = run_full(model, tokens)
        self_err = per_position_rel_err(cached, full)
        print(f"[{args.name}] HF cached (prefill {args.prefill} + {args.tokens - args.prefill} decode steps) vs HF "
              f"full forward: max rel err {self_err.max():.3g} at t={int(self_err.argmax())}, mean {self_err.mean():.3g}")
        if self_err.max() > 1e-5:
            raise SystemExit("HF's cached run disagrees with its own full forward: not a usable oracle here")
        if not np.all(np.isfinite(cached)):
            raise SystemExit("non-finite golden logits")

        out_dir = os.path.join(args.out_root, args.name)
        os.makedirs(out_dir, exist_ok=True)
        shutil.copyfile(args.config, os.path.join(out_dir, "config.json"))
        if args.keep_checkpoint:
            kept = os.path.join(out_dir, "model")
            shutil.rmtree(kept, ignore_errors=True)
            os.makedirs(kept)
            for fn in ("config.json", "model.safetensors", "training.json"):  # training.json: train_tiny.py's record
                if os.path.exists(os.path.join(model_dir, fn)):
                    shutil.copyfile(os.path.join(model_dir, fn), os.path.join(kept, fn))
            if content_hash(args.flashseek, kept) != chash:
                raise SystemExit(f"{kept}: the copied checkpoint's content hash differs from {model_dir}'s")
        cached.astype("<f4").tofile(os.path.join(out_dir, "logits.bin"))
        meta = {
            "name": args.name,
            "config": os.path.relpath(os.path.join(out_dir, "config.json"), REPO),
            **({"checkpoint": "model"} if args.keep_checkpoint else {"gen_checkpoint_seed": args.seed}),
            "content_hash": chash,
            "prefill": args.prefill,
            "n_tokens": int(args.tokens),
            "vocab_size": vocab,
            **({"tokens_text": os.path.relpath(args.tokens_text, REPO), "tokens_text_offset": text_offset}
               if args.tokens_text
               else {"token_seed": token_seed}),
            "tokens": [int(t) for t in tokens],
            "logits": "logits.bin (float32 little-endian, n_tokens x vocab_size; row t = logits after token t)",
            "tolerance_rel_l2_per_position": 1e-4,
            "oracle": {"library": "transformers", "class": "DeepseekV4ForCausalLM", "dtype": "float32",
                       "device": "cpu", "attn_implementation": "eager",
                       "transformers_version": transformers.__version__, "torch_version": torch.__version__,
                       "numpy_version": np.__version__},
            "checks": {
                "hf_cached_vs_full_max_rel_err": float(self_err.max()),
                "router_topk_min_relative_margin": margins.router_min if margins.router_min != float("inf") else None,
                "indexer_topk_min_relative_margin":
                    margins.indexer_min if margins.indexer_min != float("inf") else None,
                "indexer_topk_choices": margins.indexer_choices,
                "swiglu_clamped_fraction": margins.swiglu_clamped / max(1, margins.swiglu_total),
                "decision_free": decision_free,
            },
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(os.path.relpath(a, REPO) if os.path.exists(a) else a for a in sys.argv),
        }
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print(f"[{args.name}] wrote {out_dir} ({cached.nbytes / 1e6:.2f} MB logits)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
