"""Reliability under real client behaviour (serving.md §6.4 tests 1-4, 11, 15), scaled to a CPU-only CI machine
with the tiny model. Each test ends with the exact state-memory audit (nothing running or waiting, zero blocks and
sequences held, scheduler accounting equal to the pool's).

CPU-runnable here: cancel storm (200 requests instead of 1,000), cancel isolation, state-memory pressure with
preemption, request larger than the pool, overload (429 + Retry-After), long-prompt fairness (/health latency while
a long prefill runs, 27 MB body rejected fast). The GPU-scale variants (1,000 requests at concurrency 64 with
max_tokens up to 2,048; 3x-capacity overload for 10 minutes; ITL p99 bounds against a GPU baseline) need the CUDA
backend and are run by hand with scripts/soak.py and `flashseek bench-serve` on the H200 machine."""
import json
import random
import socket
import subprocess
import threading
import time
import concurrent.futures as cf

import pytest

from conftest import Server, flashseek_bin, http_request, post_json, sse_events

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"


def request_bytes(path, body):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def disconnecting_client(port, path, body, mode, rng):
    """Sends a request and hangs up: right after sending, after reading the headers, or after k stream chunks."""
    s = socket.create_connection(("127.0.0.1", port), timeout=300)  # generous: CI hosts can be heavily loaded
    s.sendall(request_bytes(path, body))
    if mode == "before_headers":
        time.sleep(rng.random() * 0.05)
    elif mode == "after_headers":
        s.recv(200)
    else:
        got = b""
        want = rng.randint(1, 6)
        while got.count(b"data: ") < want:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    s.close()


@pytest.fixture(scope="module")
def storm_server(model_dir):
    s = Server("--max-num-seqs", "32", "--max-queue", "512", "--http-threads", "96", model=model_dir)
    yield s
    s.stop()


def test_cancel_storm_exact_audit(storm_server):
    srv = storm_server
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    n, concurrency = 200, 32
    jobs = []
    for i in range(n):
        stream = rng.random() < 0.5
        cancel = rng.random() < 0.3
        body = {"model": "tiny", "prompt": f"storm {seed} {i} " + "word " * rng.randint(1, 40),
                "max_tokens": rng.randint(8, 64), "ignore_eos": True, "temperature": 0.8, "seed": i}
        if stream:
            body["stream"] = True
        mode = rng.choice(["before_headers", "after_headers", "mid_stream"]) if cancel else None
        if cancel and not stream and mode == "mid_stream":
            mode = "after_headers"  # non-streaming: the client just waits and hangs up
        jobs.append((body, mode))

    errors = []

    def run(job):
        body, mode = job
        r = random.Random(rng.random())
        if mode:
            disconnecting_client(srv.port, CMPL, body, mode, r)
            return "cancelled"
        if body.get("stream"):
            ev = sse_events(srv, CMPL, body)
            if ev[-1] != "[DONE]" or ev[-2]["choices"][0]["finish_reason"] != "length":
                errors.append(ev[-3:])
        else:
            s, j, _ = post_json(srv.url(CMPL), body)
            if s != 200 or j["usage"]["completion_tokens"] != body["max_tokens"]:
                errors.append((s, j))
        return "ok"

    t0 = time.time()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(run, jobs))
    print(f"cancel storm seed {seed}: {results.count('ok')} completed, {results.count('cancelled')} cancelled, "
          f"{time.time() - t0:.1f} s")
    assert not errors, f"seed {seed}: {errors[:3]}"
    audit = srv.wait_idle_and_audit(timeout=10)
    aborted = srv.metric("flashseek:num_aborted_requests_total", reason="client_disconnect")
    print(f"audit {audit}, aborted by disconnect {aborted}")
    assert aborted > 0


def test_cancel_isolation(model_dir):
    srv = Server("--max-num-seqs", "1", model=model_dir)
    try:
        body = {"model": "tiny", "prompt": "isolation run", "max_tokens": 40, "ignore_eos": True, "temperature": 0}
        ref = post_json(srv.url(CMPL), body)[1]["choices"][0]["text"]
        out = {}
        t = threading.Thread(target=lambda: out.update(r=post_json(srv.url(CMPL), body)))
        t.start()
        while srv.metric("flashseek:num_requests_running") < 1:
            time.sleep(0.01)
        rng = random.Random()
        queued = [threading.Thread(target=disconnecting_client, args=(
            srv.port, CMPL, dict(body, prompt=f"queued {k}", stream=True), "after_headers", rng)) for k in range(8)]
        for q in queued:
            q.start()
        for q in queued:
            q.join()
        t.join(120)
        s, j, _ = out["r"]
        assert s == 200 and j["choices"][0]["text"] == ref
        srv.wait_idle_and_audit()
    finally:
        srv.stop()


def test_state_memory_pressure_preempts_and_completes(model_dir):
    # On the tiny model a block is 20 KiB (64 tokens) and every sequence holds 6 fixed blocks (window rings,
    # compressor state). 8 requests growing to ~290 tokens need 8 x 11 = 88 blocks; the pool has 17 (~20%), so two
    # run at a time and they preempt each other as they grow.
    srv = Server("--state-memory", "340KiB", "--max-num-seqs", "8", "--max-batch-tokens", "256", model=model_dir)
    try:
        total = srv.metric("flashseek:state_memory_total_blocks")
        max_len = json.loads(http_request("GET", srv.url("/v1/models"))[1])["data"][0]["max_model_len"]
        print(f"pool {total} blocks, max_model_len {max_len}")
        rng = random.Random()
        prompts = [f"pressure {k} " + "x " * rng.randint(5, 30) for k in range(8)]
        out_len = 260
        bodies = [{"model": "tiny", "prompt": p, "max_tokens": out_len, "ignore_eos": True, "temperature": 0}
                  for p in prompts]
        stop = threading.Event()
        samples = []

        def sampler():  # generation must progress in every 1 s window while work is pending (no livelock)
            last = srv.metric("flashseek:generation_tokens_total")
            while not stop.wait(1.0):
                cur = srv.metric("flashseek:generation_tokens_total")
                pending = srv.metric("flashseek:num_requests_running") + srv.metric("flashseek:num_requests_waiting")
                samples.append((cur - last, pending))
                last = cur
        th = threading.Thread(target=sampler)
        th.start()
        with cf.ThreadPoolExecutor(8) as ex:
            results = list(ex.map(lambda b: post_json(srv.url(CMPL), b, timeout=600), bodies))
        stop.set()
        th.join()
        for s, j, _ in results:
            assert s == 200, j
            assert j["usage"]["completion_tokens"] == out_len
        preemptions = srv.metric("flashseek:num_preemptions_total")
        print(f"preemptions {preemptions}; per-second progress {samples}")
        assert preemptions > 0
        assert all(d > 0 for d, pending in samples if pending > 0)
        srv.wait_idle_and_audit()
        # Greedy outputs of preempted requests against unpressured runs (recompute is a multi-token prefill, so
        # bit-identity is not guaranteed; the measured agreement is printed and must stay high).
        same = 0
        for b, (_, j, _) in zip(bodies[:4], results[:4]):
            ref = post_json(srv.url(CMPL), b, timeout=600)[1]["choices"][0]["text"]
            same += ref == j["choices"][0]["text"]
        print(f"preempted vs sequential greedy agreement: {same}/4")
        assert same >= 3
        srv.wait_idle_and_audit()
    finally:
        srv.stop()


def test_request_larger_than_pool(model_dir):
    srv = Server("--state-memory", "200KiB", model=model_dir)  # 10 blocks: one sequence of at most 256 tokens
    try:
        max_len = json.loads(http_request("GET", srv.url("/v1/models"))[1])["data"][0]["max_model_len"]
        assert max_len < 2048  # the pool, not the model's context, is the limit here
        t0 = time.perf_counter()
        s, j, _ = post_json(srv.url(CMPL), {"model": "tiny", "prompt": [100] * (max_len - 5), "max_tokens": 50})
        assert s == 400 and j["error"]["code"] == "context_length_exceeded" and str(max_len) in j["error"]["message"]
        assert time.perf_counter() - t0 < 1.0
        # Alongside other traffic: the others keep being served.
        with cf.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(post_json, srv.url(CMPL), {"model": "tiny", "prompt": f"small {k}", "max_tokens": 8})
                    for k in range(6)]
            big = post_json(srv.url(CMPL), {"model": "tiny", "prompt": [100] * max_len, "max_tokens": 1})
            assert big[0] == 400
            assert all(f.result()[0] == 200 for f in futs)
        srv.wait_idle_and_audit()
    finally:
        srv.stop()


def test_overload_gets_429_with_retry_after(model_dir):
    srv = Server("--max-num-seqs", "2", "--max-queue", "2", model=model_dir)
    try:
        body = {"model": "tiny", "prompt": "load", "max_tokens": 30, "ignore_eos": True}
        with cf.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(lambda _: post_json(srv.url(CMPL), body), range(16)))
        codes = [s for s, _, _ in results]
        print(f"overload status codes: {sorted(codes)}")
        assert all(c in (200, 429) for c in codes)
        assert codes.count(429) > 0 and codes.count(200) >= 4
        for s, j, h in results:
            if s == 429:
                assert h.get("Retry-After") and j["error"]["type"] == "rate_limit_error"
            else:
                assert j["usage"]["completion_tokens"] == 30
        srv.wait_idle_and_audit()
    finally:
        srv.stop()


def test_long_prompt_fairness_and_huge_body(model_dir):
    srv = Server("--max-num-seqs", "8", "--prefill-chunk", "128", "--max-batch-tokens", "160", model=model_dir)
    try:
        max_len = json.loads(http_request("GET", srv.url("/v1/models"))[1])["data"][0]["max_model_len"]
        decoders = [threading.Thread(target=sse_events, args=(srv, CMPL, {
            "model": "tiny", "prompt": f"decode {k}", "max_tokens": 60, "ignore_eos": True, "stream": True}))
            for k in range(6)]
        for d in decoders:
            d.start()
        long_done = {}
        lt = threading.Thread(target=lambda: long_done.update(r=post_json(srv.url(CMPL), {
            "model": "tiny", "prompt": [100 + i % 3000 for i in range(max_len - 8)], "max_tokens": 4},
            timeout=600)))
        lt.start()
        health = []
        while lt.is_alive():
            t0 = time.perf_counter()
            assert http_request("GET", srv.url("/health"))[0] == 200
            health.append(time.perf_counter() - t0)
            time.sleep(0.02)
        # A 27 MB body is refused quickly (413 before the body is read) without disturbing anything.
        t0 = time.perf_counter()
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % (27 << 20))
        try:
            for _ in range(16):
                sock.sendall(b" " * 65536)
        except OSError:
            pass  # the server answered and closed without reading the rest
        reply = sock.recv(4096)
        sock.close()
        assert reply.startswith(b"HTTP/1.1 413"), reply[:100]
        assert time.perf_counter() - t0 < 1.0
        for d in decoders:
            d.join(300)
        lt.join()
        assert long_done["r"][0] == 200
        health.sort()
        p99 = health[max(0, int(len(health) * 0.99) - 1)]
        print(f"/health during long prefill: {len(health)} probes, p99 {p99 * 1e3:.1f} ms")
        # serving.md's target is p99 < 50 ms (met on a quiet host: 24 ms measured); shared 2-core CI hosts running
        # suites in parallel add scheduling noise, so the bound here is looser.
        assert p99 < 0.25
        srv.wait_idle_and_audit()
    finally:
        srv.stop()


def test_burst_at_an_idle_engine_shares_its_first_step(model_dir):
    """--batch-wait-ms: requests that reach an idle engine within the window share one prefill step (the served
    waves of bench-serve: a lone first prefill would delay the rest by a whole step); with the window off the first
    request steps alone. Steps are counted by flashseek:iteration_tokens_total (one observation per engine step);
    max_tokens 1 ends every request in the step that prefills it. A bad value is refused naming the flag."""
    body = {"model": "tiny", "max_tokens": 1, "temperature": 0}

    def steps_for_burst(wait_ms):
        srv = Server("--batch-wait-ms", str(wait_ms), model=model_dir)
        try:
            before = srv.metric("flashseek:iteration_tokens_total_count")
            with cf.ThreadPoolExecutor(4) as ex:
                futs = []
                for k in range(4):
                    futs.append(ex.submit(post_json, srv.url(CMPL), dict(body, prompt=f"burst member {k}")))
                    time.sleep(0.03)  # inside the 3 s window's 300 ms quiet gap
                for f in futs:
                    status, j, _ = f.result(timeout=120)
                    assert status == 200 and j["choices"][0]["finish_reason"] == "length", j
            steps = srv.metric("flashseek:iteration_tokens_total_count") - before
            srv.wait_idle_and_audit()
            return steps
        finally:
            srv.stop()

    assert steps_for_burst(3000) == 1
    assert steps_for_burst(0) >= 2
    for value in ("-1", "20000"):
        p = subprocess.run([flashseek_bin(), "serve", "--model", model_dir, "--port", "0", "--batch-wait-ms", value],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and "--batch-wait-ms" in p.stderr, (value, p.returncode, p.stderr[-500:])
