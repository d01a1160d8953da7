"""Reference log-probabilities from `flashseek logits` (the CLI's teacher-forced logits over a token file), for
checking the server's echo / prompt_logprobs / lm-eval numbers on the same tokens."""
import json
import os
import subprocess
import tempfile

import numpy as np

from conftest import flashseek_bin


def log_softmax_rows(model_dir, tokens):
    """Row t = log-softmax (float64) of the logits after consuming tokens[0..t], from one prefill over all tokens."""
    vocab = json.load(open(os.path.join(model_dir, "config.json")))["vocab_size"]
    with tempfile.TemporaryDirectory() as d:
        tok_file, out = os.path.join(d, "tokens.txt"), os.path.join(d, "logits.bin")
        open(tok_file, "w").write(" ".join(map(str, tokens)))
        subprocess.run([flashseek_bin(), "logits", "--model", model_dir, "--tokens", tok_file, "--prefill",
                        str(len(tokens)), "--output", out, "--threads", "1"], check=True, capture_output=True)
        rows = np.fromfile(out, dtype="<f4").reshape(len(tokens), vocab).astype(np.float64)
    m = rows.max(axis=1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=1, keepdims=True)))


def prompt_token_logprobs(model_dir, tokens):
    """[None, logprob of tokens[1] given tokens[0], ...]: what echo / prompt_logprobs report per prompt position."""
    lsm = log_softmax_rows(model_dir, tokens)
    return [None] + [float(lsm[p - 1][tokens[p]]) for p in range(1, len(tokens))]
