"""flashseek bench-serve against a CPU server: the prompts it sends have the lengths asked for, on both endpoints.
Completions prompts are token ids (exactly --random-input-len); chat prompts are random words, as many as the
server's /tokenize says make --random-input-len tokens, so the chat template adds only its own few tokens (one
random word per token would give chat prompts about twice the length asked for). Its report carries the server's own
mean TTFT beside the client's, and no graph-pass counts from a server without CUDA graphs."""
import json
import subprocess

from conftest import Server, flashseek_bin


def bench(srv, endpoint, tmp_path, input_len=48, n=4, extra=()):
    out = tmp_path / "result.json"
    p = subprocess.run([flashseek_bin(), "bench-serve", "--port", str(srv.port), "--endpoint", endpoint,
                        "--num-prompts", str(n), "--max-concurrency", "2", "--random-input-len", str(input_len),
                        "--random-output-len", "4", "--seed", "7", "--no-progress", "--save-result", str(out),
                        *extra],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "/tokenize unavailable" not in p.stderr, p.stderr
    r = json.loads(out.read_text())
    assert r["completed"] == n and all(not e for e in r["errors"]), r["errors"]
    assert r["output_lens"] == [4] * n
    # The server's own TTFT (its /metrics histogram over the run) lies inside the client's interval for every request:
    # it starts after the request was sent and ends before the first token reaches the client.
    server_ttft = r["server_mean_ttft_ms"]
    assert isinstance(server_ttft, float) and 0 < server_ttft <= r["mean_ttft_ms"] + 1e-6, (server_ttft, r["mean_ttft_ms"])
    # A CPU server runs no CUDA graphs and publishes no graph-pass counters: the report says none.
    assert r["server_graph_passes"] is None, r["server_graph_passes"]
    bench.last = r
    return r["input_lens"]


def test_prompt_lengths_match_the_request_on_both_endpoints(model_dir, tmp_path):
    srv = Server(model=model_dir)
    try:
        assert bench(srv, "/v1/completions", tmp_path) == [48] * 4
        chat = bench(srv, "/v1/chat/completions", tmp_path)
        # The template's role markers add a few tokens; random words never tokenize to exactly the estimate.
        assert all(44 <= n <= 48 + 12 for n in chat), chat
        assert (bench.last["temperature"], bench.last["top_p"], bench.last["top_k"]) == (0.0, 1.0, 0)  # greedy
    finally:
        srv.stop()


def test_sampled_requests_complete_and_are_recorded(model_dir, tmp_path):
    """--temperature / --top-p / --top-k send sampled requests (each with a seed of its own): they complete with the
    lengths asked for, and the result JSON records the sampling parameters."""
    srv = Server(model=model_dir)
    try:
        assert bench(srv, "/v1/completions", tmp_path, extra=("--temperature", "0.8", "--top-p", "0.9",
                                                              "--top-k", "20")) == [48] * 4
        r = bench.last
        assert (r["temperature"], r["top_p"], r["top_k"]) == (0.8, 0.9, 20), r
        assert (r["frequency_penalty"], r["presence_penalty"], r["repetition_penalty"]) == (0.0, 0.0, 1.0), r
        # The logit adjustments, with a greedy request: accepted by the server, recorded in the result.
        assert bench(srv, "/v1/completions", tmp_path, extra=("--frequency-penalty", "0.5", "--presence-penalty",
                                                              "-0.25", "--repetition-penalty", "1.1")) == [48] * 4
        r = bench.last
        assert (r["frequency_penalty"], r["presence_penalty"], r["repetition_penalty"]) == (0.5, -0.25, 1.1), r
        assert r["completed"] == 4 and r["failed"] == 0, r
    finally:
        srv.stop()



def test_bad_flags_are_refused_naming_the_flag():
    """Refused before any request is sent (no server is needed): each message names the flag and the value."""
    for flag, value in (("--num-prompts", "0"), ("--random-input-len", "0"), ("--random-output-len", "-2"),
                        ("--burstiness", "0"), ("--burstiness", "nan"), ("--max-concurrency", "-1"),
                        ("--port", "70000"), ("--request-rate", "0"), ("--temperature", "-0.5"),
                        ("--temperature", "2.5"), ("--top-p", "0"), ("--top-p", "1.5"), ("--top-k", "-3"),
                        ("--frequency-penalty", "2.5"), ("--presence-penalty", "-3"), ("--repetition-penalty", "0"),
                        ("--repetition-penalty", "nan")):
        p = subprocess.run([flashseek_bin(), "bench-serve", flag, value], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and flag in p.stderr and value in p.stderr, (flag, value, p.returncode,
                                                                              p.stderr[-500:])
