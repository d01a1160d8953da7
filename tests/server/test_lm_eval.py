"""lm-evaluation-harness against `flashseek serve` (CPU backend, tiny model), fully offline: the `local-completions`
model with the Hugging Face tokenizer of the repository's V4 tokenizer files (a local path, no hub) runs the
multiple-choice loglikelihood task of tests/data/lm_eval. Each choice's loglikelihood that lm-eval reports (from
`echo` + `logprobs` on /v1/completions) must equal the one computed from `flashseek logits` on the same tokens
(teacher-forced log-softmax rows), within 1e-4."""
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR, Server
from logits_reference import prompt_token_logprobs

TASK_DIR = os.path.join(SOURCE_DIR, "tests", "data", "lm_eval")
TOKENIZER_DIR = os.path.join(SOURCE_DIR, "assets", "tokenizer", "deepseek-v4")
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def encode_pair(tok, context, continuation):
    """lm-eval's split of a (context, continuation) pair for causal models (lm_eval.api.model._encode_pair)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok.encode(context + continuation, add_special_tokens=False)
    ctx = tok.encode(context, add_special_tokens=False)
    return ctx, whole[len(ctx):]


def reference_loglikelihood(model_dir, tokens, n_continuation):
    """Sum of the continuation tokens' logprobs from `flashseek logits` on the whole token list."""
    return sum(prompt_token_logprobs(model_dir, tokens)[len(tokens) - n_continuation:])


def test_lm_eval_loglikelihoods_match_flashseek_logits(model_dir, tmp_path):
    pytest.importorskip("lm_eval")
    from transformers import AutoTokenizer

    server = Server("--max-num-seqs", "8", "--prefill-chunk", "7", model=model_dir)
    try:
        out_dir = tmp_path / "lm_eval_out"
        model_args = ",".join([f"base_url={server.url('/v1/completions')}", "model=tiny",
                               "tokenizer_backend=huggingface", f"tokenizer={TOKENIZER_DIR}",
                               "tokenized_requests=True", "num_concurrent=4", "max_retries=1", "max_length=2048"])
        cmd = [sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args", model_args,
               "--tasks", "flashseek_mc", "--include_path", TASK_DIR, "--log_samples", "--output_path",
               str(out_dir), "--batch_size", "1"]
        r = subprocess.run(cmd, cwd=TASK_DIR, env=dict(os.environ, **OFFLINE), capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    finally:
        server.stop()
    sample_files = glob.glob(str(out_dir / "**" / "samples_flashseek_mc_*.jsonl"), recursive=True)
    assert len(sample_files) == 1, sample_files
    samples = [json.loads(line) for line in open(sample_files[0])]
    n_docs = sum(1 for _ in open(os.path.join(TASK_DIR, "flashseek_mc.jsonl")))
    assert len(samples) == n_docs

    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    checked = 0
    for s in samples:
        # Logged as {"gen_args_<i>": {"arg_0": context, "arg_1": continuation}} and [[str(ll), str(is_greedy)]].
        args = [s["arguments"][f"gen_args_{i}"] for i in range(len(s["arguments"]))]
        assert len(args) == len(s["resps"]) == len(s["doc"]["choices"])
        for arg, resp in zip(args, s["resps"]):
            context, continuation = arg["arg_0"], arg["arg_1"]
            ll_lm_eval = float(resp[0][0])
            ctx, cont = encode_pair(tok, context, continuation)
            want = reference_loglikelihood(model_dir, ctx + cont, len(cont))
            assert abs(ll_lm_eval - want) <= 1e-4, (context, continuation, ll_lm_eval, want)
            checked += 1
    assert checked == sum(len(s["doc"]["choices"]) for s in samples) >= 40
