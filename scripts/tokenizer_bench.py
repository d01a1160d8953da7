#!/usr/bin/env python3
"""Single-thread encode throughput: flashseek (tests/tokenizer/bench_tokenizer) vs HF tokenizers, same machine, same
corpus (scripts/tokenizer_hf_oracle.py without the code-point lines, i.e. natural text, code, numbers, emoji).
HF runs `Tokenizer.encode` text by text (each call is single-threaded; RAYON_NUM_THREADS=1 as well).
Runs are interleaved and the median of REPEATS passes of each is reported.
Usage: python3 scripts/tokenizer_bench.py --bench BUILD/tests/tokenizer/bench_tokenizer [--repeats 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "assets/tokenizer/deepseek-v4/tokenizer.json"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--join", type=int, default=0,
                    help="concatenate the corpus into this many large texts (amortizes HF's per-call Python overhead)")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="tokbench_")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/tokenizer_hf_oracle.py"), "--tokenizer", args.tokenizer,
                    "--out", out, "--seed", "1", "--no-codepoints"], check=True, stdout=subprocess.DEVNULL)
    texts = [json.loads(line)["text"] for line in open(os.path.join(out, "corpus.jsonl"), encoding="utf-8")]
    if args.join:
        per = (len(texts) + args.join - 1) // args.join
        texts = ["\n".join(texts[i:i + per]) for i in range(0, len(texts), per)]
        with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    hf_times, ours = [], []
    for _ in range(args.repeats):
        tok = Tokenizer.from_file(args.tokenizer)  # fresh object: cold BPE cache, like each flashseek pass
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t, add_special_tokens=False)
        hf_times.append(time.perf_counter() - t0)
        r = subprocess.run([args.bench, args.tokenizer, os.path.join(out, "corpus.jsonl"), "1"], check=True,
                           capture_output=True, text=True)
        ours.append(json.loads(r.stdout)["median_s"])
    hf, fs = statistics.median(hf_times), statistics.median(ours)
    print(json.dumps({"bytes": nbytes, "texts": len(texts), "hf_s": hf, "flashseek_s": fs,
                      "hf_mb_per_s": nbytes / hf / 1e6, "flashseek_mb_per_s": nbytes / fs / 1e6,
                      "speedup": hf / fs}))


if __name__ == "__main__":
    main()
