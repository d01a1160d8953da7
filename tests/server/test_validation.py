"""Input validation and the security surface (serving.md §6.4 tests 5, 6, 10, 12, 24), CPU only:
- the parameter validation matrix (>= 60 cases): every bad request gets a 4xx with an OpenAI error body naming the
  parameter, never a 5xx; handling time and RSS stay bounded over thousands of bad requests;
- context overflow: 400 with both numbers, the boundary case succeeds, omitted max_tokens is clamped;
- HTTP limits: 413 for a too-large Content-Length before the body is sent, for a chunked body over the limit, and
  the limit itself accepted; UTF-8 input (invalid bytes, lone surrogates, NUL, BOM, long runs);
- API key on every route except /health (constant-time compare, case-sensitive), loopback-only default bind;
- SIGTERM: in-flight requests finish, new ones get 503, clean exit; with --shutdown-timeout 0 a fast exit.
None of these tests needs a GPU."""
import json
import socket
import statistics
import threading
import time

import pytest

from conftest import Server, http_request, post_json, sse_events

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def chat(**kw):
    return dict({"model": "tiny", "messages": MSG, "max_tokens": 4}, **kw)


def cmpl(**kw):
    return dict({"model": "tiny", "prompt": "hi", "max_tokens": 4}, **kw)


# (endpoint, body, expected status, expected param)
BAD = [
    (CHAT, chat(temperature=-0.5), 400, "temperature"),
    (CHAT, chat(temperature=2.5), 400, "temperature"),
    (CHAT, chat(temperature="hot"), 400, "temperature"),
    (CHAT, chat(temperature=True), 400, "temperature"),
    (CHAT, chat(top_p=0), 400, "top_p"),
    (CHAT, chat(top_p=1.5), 400, "top_p"),
    (CHAT, chat(top_p=-1), 400, "top_p"),
    (CHAT, chat(top_p=5e-324), 400, "top_p"),  # rounds to 0 as a float (found by schemathesis)
    (CHAT, chat(top_k=-2), 400, "top_k"),
    (CHAT, chat(top_k=10**9), 400, "top_k"),
    (CHAT, chat(top_k=1.5), 400, "top_k"),
    (CHAT, chat(n=0), 400, "n"),
    (CHAT, chat(n=10**9), 400, "n"),
    (CHAT, chat(n=17, temperature=1), 400, "n"),
    (CHAT, chat(n=2, temperature=0), 400, "n"),
    (CHAT, chat(max_tokens=0), 400, "max_tokens"),
    (CHAT, chat(max_tokens=-1), 400, "max_tokens"),
    (CHAT, chat(max_tokens=2**63), 400, "max_tokens"),
    (CHAT, chat(max_tokens=2**64 + 5), 400, "max_tokens"),
    (CHAT, chat(max_tokens="10"), 400, "max_tokens"),
    (CHAT, chat(max_completion_tokens=0), 400, "max_completion_tokens"),
    (CHAT, chat(max_tokens=100000), 400, "max_tokens"),
    (CHAT, chat(logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    (CHAT, chat(logprobs=True, top_logprobs=-1), 400, "top_logprobs"),
    (CHAT, chat(top_logprobs=3), 400, "top_logprobs"),
    (CHAT, chat(logprobs=5), 400, "logprobs"),
    (CHAT, chat(stop=["x"] * 17), 400, "stop"),
    (CHAT, chat(stop=""), 400, "stop"),
    (CHAT, chat(stop=["a" * 300]), 400, "stop"),
    (CHAT, chat(stop=[1, 2]), 400, "stop"),
    (CHAT, chat(stop={"a": 1}), 400, "stop"),
    (CHAT, chat(stop_token_ids=[-1]), 400, "stop_token_ids"),
    (CHAT, chat(stop_token_ids=[10**7]), 400, "stop_token_ids"),
    (CHAT, chat(logit_bias={"999999999": 5}), 400, "logit_bias"),
    (CHAT, chat(logit_bias={"5": 101}), 400, "logit_bias"),
    (CHAT, chat(logit_bias=[1]), 400, "logit_bias"),
    (CHAT, chat(presence_penalty=3), 400, "presence_penalty"),
    (CHAT, chat(frequency_penalty=-2.5), 400, "frequency_penalty"),
    (CHAT, chat(repetition_penalty=0), 400, "repetition_penalty"),
    (CHAT, chat(repetition_penalty=5e-324), 400, "repetition_penalty"),  # rounds to 0 as a float (schemathesis)
    (CMPL, cmpl(repetition_penalty=1e-46), 400, "repetition_penalty"),
    (CHAT, chat(min_p=2), 400, "min_p"),
    (CHAT, chat(seed="abc"), 400, "seed"),
    (CHAT, chat(seed=1.5), 400, "seed"),
    (CHAT, chat(stream="yes"), 400, "stream"),
    (CHAT, chat(stream_options={"include_usage": True}), 400, "stream_options"),
    (CHAT, chat(stream=True, stream_options=[1]), 400, "stream_options"),
    (CHAT, chat(model="gpt-4"), 404, "model"),
    (CHAT, chat(model=5), 400, "model"),
    (CHAT, {"model": "tiny", "max_tokens": 4}, 400, "messages"),
    (CHAT, chat(messages=[]), 400, "messages"),
    (CHAT, chat(messages="hello"), 400, "messages"),
    (CHAT, chat(messages=[{"role": "wizard", "content": "x"}]), 400, None),
    (CHAT, chat(messages=[{"content": "x"}]), 400, None),
    (CHAT, chat(messages=[{"role": "user", "content": 5}]), 400, None),
    (CHAT, chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400, None),
    (CHAT, chat(tools="none"), 400, "tools"),
    (CHAT, chat(tools=[{"type": "function"}]), 400, "tools"),
    (CHAT, chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]), 400, "tools"),
    (CHAT, chat(tools=[{"type": "function", "function": {"name": ""}}]), 400, "tools"),
    (CHAT, chat(tools=[{"type": "function", "function": {"name": "f"}}] * 2, tool_choice="required"), 400, "tools"),
    (CHAT, chat(tool_choice="always"), 400, "tool_choice"),
    (CHAT, chat(tool_choice="required"), 400, "tool_choice"),
    (CHAT, chat(response_format={"type": "json_schema"}), 400, "response_format"),
    (CHAT, chat(response_format={"type": "xml"}), 400, "response_format"),
    (CHAT, chat(response_format="json"), 400, "response_format"),
    (CHAT, chat(chat_template_kwargs=[1]), 400, "chat_template_kwargs"),
    (CHAT, chat(reasoning_effort=3), 400, "reasoning_effort"),
    (CHAT, chat(drop_thinking=5), 400, "drop_thinking"),  # was param "request" (hostile-client audit)
    (CHAT, chat(debug_forced_tokens=[-5]), 400, "debug_forced_tokens"),
    (CHAT, chat(debug_forced_tokens="abc"), 400, "debug_forced_tokens"),
    (CMPL, cmpl(prompt=""), 400, "prompt"),
    ("/tokenize", {"model": "tiny", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}, 400, "prompt"),
    (CMPL, cmpl(prompt=[]), 400, "prompt"),
    (CMPL, cmpl(prompt=[[]]), 400, "prompt"),
    (CMPL, cmpl(prompt=[-1]), 400, "prompt"),
    (CMPL, cmpl(prompt=[[-1]]), 400, "prompt"),
    (CMPL, cmpl(prompt=[129280]), 400, "prompt"),
    (CMPL, cmpl(prompt=[1.5]), 400, "prompt"),
    (CMPL, cmpl(prompt=5), 400, "prompt"),
    (CMPL, cmpl(prompt=[{"a": 1}]), 400, "prompt"),
    (CMPL, cmpl(prompt=["a", [1]]), 400, "prompt"),
    (CMPL, cmpl(prompt=["a"] * 17), 400, "prompt"),
    (CMPL, {"model": "tiny", "max_tokens": 4}, 400, "prompt"),
    (CMPL, cmpl(logprobs=21), 400, "logprobs"),
    (CMPL, cmpl(logprobs=-1), 400, "logprobs"),
    (CMPL, cmpl(echo="yes"), 400, "echo"),
    (CMPL, cmpl(best_of=3), 400, "best_of"),
    (CMPL, cmpl(suffix="x"), 400, "suffix"),
    (CMPL, cmpl(max_tokens=2048), 400, "max_tokens"),
]

# Raw bodies: (endpoint, bytes, expected param)
RAW = [
    (CHAT, b"", "body"),
    (CHAT, b"{", "body"),
    (CHAT, b"[1,2,3]", "body"),
    (CHAT, b"\"just a string\"", "body"),
    (CHAT, b"null", "body"),
    (CHAT, b"{\"model\": \"tiny\", \"model\": \"tiny\", \"messages\": []}", "model"),
    (CHAT, b"{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"content\":\"b\"}]}", "content"),
    (CHAT, b"{\"model\":\"tiny\",\"temperature\":NaN,\"messages\":[]}", "body"),
    (CHAT, b"{\"model\":\"tiny\",\"temperature\":Infinity,\"messages\":[]}", "body"),
    (CHAT, b"{\"model\":\"tiny\",\"temperature\":1e999,\"messages\":[]}", None),
    (CMPL, b"{\"model\":\"tiny\",\"prompt\":\"\xff\xfe bad utf8\"}", "body"),
    (CMPL, b"{\"model\":\"tiny\",\"prompt\":\"\xc0\xaf overlong\"}", "body"),
    (CMPL, b"{\"model\":\"tiny\",\"prompt\":\"lone \\ud800 surrogate\"}", "body"),
    (CMPL, b"\xef\xbb\xbf{\"model\":\"tiny\",\"prompt\":\"bom\"}", None),
    # nlohmann ends the input at a NUL byte: what followed it was silently ignored (hostile-client audit).
    (CMPL, b"{\"model\":\"tiny\",\"prompt\":\"a\",\"max_tokens\":1}\x00{\"max_tokens\":0}", "body"),
    (CMPL, b"{\"model\":\"tiny\",\"prompt\":\"a\",\"max_tokens\":1}\x00", "body"),
]


def check_error(status, body_text, expect_status, expect_param):
    assert 400 <= status < 500, (status, body_text)
    if expect_status:
        assert status == expect_status, (status, body_text)
    j = json.loads(body_text)
    err = j["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert err["message"]
    if expect_param:
        assert err["param"] == expect_param, err


def test_validation_matrix(server):
    assert len(BAD) + len(RAW) >= 60
    times = []
    for path, body, status, param in BAD:
        t0 = time.perf_counter()
        s, text, _ = http_request("POST", server.url(path), body)
        times.append(time.perf_counter() - t0)
        check_error(s, text, status, param)
    for path, raw, param in RAW:
        s, text, _ = http_request("POST", server.url(path), raw)
        if raw.startswith(b"\xef\xbb\xbf") or b"1e999" in raw:
            assert s < 500, (raw, s, text)  # BOM / overflowing literal: rejected or accepted, never a 5xx
            continue
        check_error(s, text, 400, param)
    times.sort()
    p99 = times[int(len(times) * 0.99) - 1]
    print(f"validation: {len(BAD) + len(RAW)} cases, median {statistics.median(times) * 1e3:.2f} ms, "
          f"p99 {p99 * 1e3:.2f} ms")
    # serving.md asks for p99 < 10 ms on a quiet machine; CI boxes run suites in parallel on 2 cores, so the
    # assertion leaves room for scheduling noise while the measured numbers are printed.
    assert statistics.median(times) < 0.05 and p99 < 0.25
    server.wait_idle_and_audit()


def test_bad_requests_do_not_grow_memory(server):
    # Warm-up: enough requests for every HTTP worker thread (one per connection; the default, --max-num-seqs +
    # --max-queue + 16, is 288 here) to have served one, so their first-touched stacks are not counted as growth.
    for i in range(900):
        path, body, _, _ = BAD[i % len(BAD)]
        http_request("POST", server.url(path), body)
    before = server.rss_kb()
    t0 = time.time()
    n = 0
    while n < 3000:
        path, body, _, _ = BAD[n % len(BAD)]
        s, _, _ = http_request("POST", server.url(path), body)
        assert 400 <= s < 500
        n += 1
    after = server.rss_kb()
    print(f"RSS before {before} kB, after {after} kB over {n} bad requests ({time.time() - t0:.1f} s)")
    assert after - before < 2048


def test_context_overflow_and_boundary(server):
    max_len = json.loads(http_request("GET", server.url("/v1/models"))[1])["data"][0]["max_model_len"]
    ids = [100 + i % 5000 for i in range(max_len - 10)]
    t0 = time.perf_counter()
    s, j, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": ids, "max_tokens": 20})
    elapsed = time.perf_counter() - t0
    assert s == 400 and j["error"]["code"] == "context_length_exceeded", j
    msg = j["error"]["message"]
    assert str(max_len) in msg and str(max_len - 10) in msg and "20" in msg, msg
    assert elapsed < 0.5
    # Prompt alone too long.
    s, j, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": ids + [5] * 20})
    assert s == 400 and j["error"]["code"] == "context_length_exceeded"
    # Boundary: max_model_len - 1 prompt tokens + 1 output token fits exactly.
    boundary = [100 + i % 5000 for i in range(max_len - 1)]
    s, j, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": boundary, "max_tokens": 1, "ignore_eos": True},
                        timeout=300)
    assert s == 200, j
    assert j["usage"]["completion_tokens"] == 1 and j["choices"][0]["finish_reason"] == "length"
    # Omitted max_tokens is clamped to the remaining context.
    s, j, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": boundary[:max_len - 3], "ignore_eos": True},
                        timeout=300)
    assert s == 200, j
    assert j["usage"]["completion_tokens"] == 3 and j["choices"][0]["finish_reason"] == "length"
    assert "Traceback" not in server.logs()
    server.wait_idle_and_audit()


def raw_http(port, data, read_timeout=5.0, until_closed=False):
    """Sends `data` on one connection and returns what the server writes: up to the end of its first JSON answer,
    or with until_closed everything until it closes the connection (None if it is still open after read_timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
            if not until_closed and b"\r\n\r\n" in out and b"}" in out:
                return out
    except socket.timeout:
        return None if until_closed else out
    finally:
        s.close()


def test_http_size_limits(model_dir):
    srv = Server("--max-body-bytes", "65536", model=model_dir)
    try:
        # Huge Content-Length, no body sent: 413 right away, so the body was never read.
        t0 = time.perf_counter()
        out = raw_http(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 28000000\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 413"), out[:200]
        assert time.perf_counter() - t0 < 1.0
        # At the limit: accepted by the transport (the JSON is valid, padded with spaces) -> 200.
        body = json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": 1}).encode()
        padded = body[:-1] + b" " * (65536 - len(body)) + b"}"
        assert len(padded) == 65536
        s, text, _ = http_request("POST", srv.url(CMPL), padded)
        assert s == 200, text
        s, text, _ = http_request("POST", srv.url(CMPL), padded[:-1] + b" }")
        assert s == 413, text
        assert json.loads(text)["error"]["code"] == "request_too_large"
        # Chunked body over the limit: 413 while reading.
        chunks = b"".join(b"%x\r\n%s\r\n" % (4096, b" " * 4096) for _ in range(20)) + b"0\r\n\r\n"
        out = raw_http(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
        assert out.startswith(b"HTTP/1.1 413"), out[:200]
        # Headers: more than 100, or more than 16 KiB in total, give 431; one line over 8 KiB gives 400 (the
        # HTTP library's own per-line limit, answered before our code runs).
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(150))
        out = raw_http(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        assert out.startswith(b"HTTP/1.1 431"), out[:100]
        big = b"".join(b"X-B%d: %s\r\n" % (i, b"v" * 4000) for i in range(5))
        out = raw_http(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
        assert out.startswith(b"HTTP/1.1 431"), out[:100]
        out = raw_http(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 400"), out[:100]
        # The server is still fine.
        s, j, _ = post_json(srv.url(CMPL), {"model": "tiny", "prompt": "ok", "max_tokens": 2})
        assert s == 200, j
    finally:
        assert srv.stop() == 0


def test_an_answer_given_without_reading_the_body_ends_the_connection(model_dir):
    """A request answered before its body was read (an unknown method, a refused API key) must not leave the body
    to be parsed as the next request: that desynchronises the connection (a later request gets the answer to
    garbage, e.g. a 414) and lets a body smuggle a request. The server answers once, says Connection: close, and
    closes; a request hidden in the body is never answered."""
    key = "sk-Test-0123456789"
    srv = Server("--api-key", key, model=model_dir)
    try:
        smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + key.encode() + b"\r\n\r\n"
        for filler in (0, 3000, 4000, 9000, 20000):  # reads are buffered: bodies short and long of a buffer
            body = b'{"prompt": "' + b"p" * filler + b'"}' + smuggled
            for method, auth in (("QUERY", key), ("TRACE", key), ("BREW", key), ("POST", "wrong")):
                head = (b"%s /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (method.encode(), auth.encode(), len(body)))
                out = raw_http(srv.port, head + body, read_timeout=20, until_closed=True)
                assert out is not None, (method, filler, "the connection stayed open")
                assert out.count(b"HTTP/1.1 ") == 1, (method, filler, out[:600])
                assert out.startswith(b"HTTP/1.1 401" if auth == "wrong" else b"HTTP/1.1 400"), (method, out[:200])
                assert b"Connection: close" in out and b'"object":"list"' not in out, (method, filler, out[:600])
                err = json.loads(out[out.index(b"\r\n\r\n") + 4:])["error"]
                assert err["message"] and err["message"] != "HTTP error 400", err
        # The server keeps serving on new connections.
        assert http_request("GET", srv.url("/v1/models"), None, {"X-Api-Key": key})[0] == 200
    finally:
        assert srv.stop() == 0


def test_pipelined_requests_are_all_answered_in_order(server):
    """Requests sent back to back on one connection, before any answer, are all answered, in order (input read
    with one request is kept for the next)."""
    body = json.dumps(cmpl(max_tokens=1)).encode()
    reqs = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % (len(body), body))
    out = raw_http(server.port, reqs, read_timeout=120, until_closed=True)
    assert out is not None
    assert out.count(b"HTTP/1.1 ") == 3 and out.count(b"HTTP/1.1 200 OK\r\n") == 3, out[:1500]
    i_health, i_cmpl, i_models = out.index(b'{"status":"ok"}'), out.index(b'"text_completion"'), out.index(b'"object":"list"')
    assert i_health < i_cmpl < i_models


def test_body_framing_cannot_smuggle_a_request(server):
    """cpp-httplib frames bodies loosely: it never reads the body of a GET, takes the first of two Content-Length
    headers, reads a Transfer-Encoding other than exactly "chunked" up to the peer's close, and ends a chunked body
    early, without an error, when a chunk is not followed by CRLF. Each left bytes of the body to be parsed as the
    next request, so a request hidden in a body was answered (found by the hostile-client audit). Now the ambiguous
    framings are refused (400 naming the header) and a GET with a body or a chunked request ends its connection: the
    hidden request is never answered, and the server keeps serving."""
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    js = json.dumps(cmpl(max_tokens=1)).encode()
    chunk = b"%x\r\n%s" % (len(js), js)
    post = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = [  # (request, expected status, expected param)
        (b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(smuggled), smuggled), 200, None),
        (b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
         % (len(smuggled), smuggled), 200, None),
        (post + b"Content-Length: %d\r\nContent-Length: 0\r\n\r\n%s%s" % (len(js), js, smuggled), 400, "Content-Length"),
        (post + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n0\r\n\r\n%s" % (len(js), chunk, smuggled),
         400, "Transfer-Encoding"),
        (post + b"Transfer-Encoding: gzip, chunked\r\n\r\n%s\r\n0\r\n\r\n%s" % (chunk, smuggled), 400, "Transfer-Encoding"),
        (post + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n0\r\n\r\n%s" % (chunk, smuggled),
         400, "Transfer-Encoding"),
        (post + b"Transfer-Encoding: chunked\r\n\r\n%sX\r\n%s0\r\n\r\n" % (chunk, smuggled), 200, None),  # no CRLF
        (post + b"Transfer-Encoding: chunked\r\n\r\n%s\r\n0\r\n\r\n%s" % (chunk, smuggled), 200, None),
    ]
    for data, status, param in cases:
        out = raw_http(server.port, data, read_timeout=30, until_closed=True)
        assert out is not None, (data[:120], "the connection stayed open")
        assert out.count(b"HTTP/1.1 ") == 1 and b'"object":"list"' not in out, (data[:120], out[:800])
        assert out.startswith(b"HTTP/1.1 %d" % status) and b"Connection: close" in out, (data[:120], out[:400])
        if param:
            assert json.loads(out[out.index(b"\r\n\r\n") + 4:])["error"]["param"] == param, out[:600]
    # Identical duplicate Content-Length headers, a GET with Content-Length: 0 and plain keep-alive still work.
    ok = (post + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s" % (len(js), len(js), js)
          + b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
          + b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out = raw_http(server.port, ok, read_timeout=60, until_closed=True)
    assert out is not None and out.count(b"HTTP/1.1 200 OK\r\n") == 3, out[:1500]
    server.wait_idle_and_audit()


def test_slow_clients_cannot_take_every_worker(model_dir):
    """Slowloris: connections that send their request head or body a byte at a time, each byte well within the read
    timeout, held their workers indefinitely; with as many of them as workers, /health went unanswered for as long
    as they kept trickling. While connections wait for a worker, a request arriving slower than 64 KiB/s after its
    first second now gives its worker up (400, closed)."""
    srv = Server("--http-threads", "4", model=model_dir)
    socks = []
    stop = threading.Event()
    try:
        heads = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ",  # head never finished
                 b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000\r\n\r\n{\"model\": "]  # body never finished
        for i in range(12):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.sendall(heads[i % 2])
            socks.append(s)

        def trickle():
            while not stop.is_set():
                for s in socks:
                    try:
                        s.sendall(b"a")
                    except OSError:
                        pass
                stop.wait(0.5)
        th = threading.Thread(target=trickle, daemon=True)
        th.start()
        time.sleep(1.0)
        for _ in range(3):
            t0 = time.monotonic()
            s, text, _ = http_request("GET", srv.url("/health"), timeout=30)
            assert s == 200, text
            assert time.monotonic() - t0 < 8, f"/health took {time.monotonic() - t0:.1f} s behind slow clients"
            s, j, _ = post_json(srv.url(CMPL), cmpl(max_tokens=2), timeout=30)
            assert s == 200, j
        stop.set()
        th.join()
    finally:
        stop.set()
        for s in socks:
            s.close()
        assert srv.stop() == 0


def test_api_key_and_default_bind(model_dir):
    key = "sk-Test-0123456789"
    srv = Server("--api-key", key, model=model_dir)
    try:
        routes = [("GET", "/v1/models", None), ("GET", "/metrics", None), ("POST", CHAT, chat()),
                  ("POST", CMPL, cmpl()), ("POST", "/tokenize", {"prompt": "x"}),
                  ("POST", "/detokenize", {"tokens": [1, 2]}), ("GET", "/openapi.json", None),
                  ("POST", "/v1/responses", {"model": "tiny", "input": "x", "max_output_tokens": 2}),
                  ("GET", "/nonexistent", None)]
        for method, path, body in routes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + key.lower()},
                            {"Authorization": "Bearer " + key[:-1]}, {"Authorization": "Bearer " + key + "x"},
                            {"X-Api-Key": key.upper()}):
                s, text, h = http_request(method, srv.url(path), body, headers)
                assert s == 401, (method, path, headers, s)
                assert json.loads(text)["error"]["type"] == "authentication_error"
            s, _, _ = http_request(method, srv.url(path), body, {"Authorization": "Bearer " + key})
            assert s == (404 if path == "/nonexistent" else 200), (path, s)
        s, _, _ = http_request("GET", srv.url("/v1/models"), None, {"X-Api-Key": key})
        assert s == 200
        assert http_request("GET", srv.url("/health"))[0] == 200
        # The test hook is refused unless the server was started with --enable-debug-hooks.
        s, text, _ = http_request("POST", srv.url(CMPL), cmpl(debug_forced_tokens=[5]), {"Authorization": "Bearer " + key})
        assert s == 400 and json.loads(text)["error"]["param"] == "debug_forced_tokens"
        # Default bind: a loopback listener only.
        port_hex = "%04X" % srv.port
        listeners = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in open(table).read().splitlines()[1:]:
                f = line.split()
                if f[3] == "0A" and f[1].endswith(":" + port_hex):
                    listeners.append(f[1])
        assert listeners == ["0100007F:" + port_hex], listeners
    finally:
        srv.stop()


def test_sigterm_drains_in_flight_and_refuses_new(model_dir):
    srv = Server("--shutdown-timeout", "60", model=model_dir)
    result = {}

    def long_stream():
        # Long enough to still be running after the 0.3 s below on a fast machine (60 tokens once finished first,
        # so the server had drained and exited before the refused request could be sent).
        result["events"] = sse_events(srv, CMPL, {"model": "tiny", "prompt": "drain me", "max_tokens": 600,
                                                  "ignore_eos": True, "stream": True})
    t = threading.Thread(target=long_stream)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and srv.metric("flashseek:num_requests_running") < 1:
        time.sleep(0.02)
    t0 = time.time()
    srv.proc.send_signal(15)
    time.sleep(0.3)
    s, j, h = post_json(srv.url(CMPL), cmpl())
    assert s == 503 and "Retry-After" in h, (s, j)
    assert http_request("GET", srv.url("/health"))[0] == 503
    t.join(120)
    events = result["events"]
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert sum(len(e["choices"][0]["text"]) > 0 for e in events[:-1]) > 0
    srv.proc.wait(30)
    assert srv.proc.returncode == 0
    assert time.time() - t0 < 60 + 5


def test_sigterm_with_zero_timeout_exits_fast(model_dir):
    srv = Server("--shutdown-timeout", "0", model=model_dir)
    result = {}

    def long_stream():
        try:
            result["events"] = sse_events(srv, CMPL, {"model": "tiny", "prompt": "abort me", "max_tokens": 1500,
                                                      "ignore_eos": True, "stream": True})
        except Exception as e:  # the connection may close once the error event is out
            result["error"] = e
    t = threading.Thread(target=long_stream)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and srv.metric("flashseek:num_requests_running") < 1:
        time.sleep(0.02)
    t0 = time.time()
    srv.proc.send_signal(15)
    srv.proc.wait(10)
    assert time.time() - t0 < 4.0
    assert srv.proc.returncode == 0
    t.join(10)
    if "events" in result:
        assert result["events"][-1] == "[DONE]"
        assert any(isinstance(e, dict) and "error" in e for e in result["events"])


def test_keep_alive_carries_many_requests_per_connection(server):
    """The default keeps a connection for 10,000 requests (cpp-httplib's own default closes it after 5)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.connect()
    local = conn.sock.getsockname()
    for i in range(40):
        path, body = ("/v1/completions", json.dumps(cmpl(max_tokens=1))) if i % 4 == 0 else ("/health", None)
        conn.request("POST" if body else "GET", path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200 and not r.will_close, (i, r.status, r.getheader("Connection"))
        assert conn.sock is not None and conn.sock.getsockname() == local, i
    conn.close()


def test_idle_connections_give_their_workers_to_waiting_ones(model_dir):
    """Each open connection holds a worker thread. With every worker held by an idle connection (keep-alive
    connections between requests, and connections opened and left silent), a new client is still served at once:
    idle connections give their workers up while others wait, instead of after the keep-alive timeout (60 s here)."""
    import http.client
    srv = Server("--http-threads", "4", "--keep-alive-timeout", "60", model=model_dir)
    held = []
    try:
        for _ in range(4):  # served once, then idle on keep-alive
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            assert r.status == 200 and not r.will_close
            held.append(conn)
        for _ in range(4):  # connected, silent
            held.append(socket.create_connection(("127.0.0.1", srv.port), timeout=60))
        for _ in range(3):
            t0 = time.monotonic()
            s, j, _ = post_json(srv.url(CMPL), cmpl(max_tokens=2), timeout=60)
            assert s == 200, j
            assert time.monotonic() - t0 < 20, "a new connection waited for an idle one's keep-alive timeout"
    finally:
        for h in held:
            h.close()
        assert srv.stop() == 0


def test_keep_alive_limits_are_configurable(model_dir):
    import http.client
    srv = Server("--keep-alive-max-requests", "3", "--keep-alive-timeout", "1", model=model_dir)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        closes = []
        for _ in range(3):
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            closes.append(r.will_close)
        assert closes == [False, False, True]  # the third request is the connection's last
        # An idle connection is closed by the server after the keep-alive timeout (1 s here).
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            chunk = s.recv(65536)
            assert chunk, first
            first += chunk
        assert first.startswith(b"HTTP/1.1 200")
        assert s.recv(65536) == b""  # EOF: closed while idle (the recv timeout is far longer)
        s.close()
    finally:
        srv.stop()
    for flag, value in (("--keep-alive-max-requests", "0"), ("--keep-alive-timeout", "0")):
        import subprocess
        from conftest import flashseek_bin
        p = subprocess.run([flashseek_bin(), "serve", "--model", model_dir, "--port", "0", flag, value],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and flag in p.stderr, (flag, p.returncode, p.stderr[-500:])


def test_out_of_range_flags_are_refused_naming_the_flag(model_dir):
    """A port past 65535 would be truncated to 16 bits by the socket layer and bind another port while the log says
    the one asked for; it, a negative port, an empty batch, a negative or NaN prefill hold and one as long as the
    request timeout (held requests would expire) are refused before anything is bound."""
    import subprocess
    from conftest import flashseek_bin
    for flag, value, more in (("--port", "70000", []), ("--port", "-1", []), ("--max-num-seqs", "0", []),
                              ("--prefill-hold-ms", "-1", []), ("--prefill-hold-ms", "nan", []),
                              ("--prefill-hold-ms", "2000", ["--request-timeout", "2"])):
        args = [flashseek_bin(), "serve", "--model", model_dir, flag, value] + more
        if flag != "--port":
            args += ["--port", "0"]
        p = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and flag in p.stderr and value in p.stderr, (flag, value, p.returncode, p.stderr[-500:])
        assert "listening" not in p.stderr, p.stderr[-500:]
