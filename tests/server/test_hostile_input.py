"""Hostile request bodies (serving.md §6.4 tests 6 and 12, issue 18): JSON nested 100,000 levels deep in every
route and in every kind of field (numbers, strings, booleans, objects, arrays, message parts, tool schemas, fields
the server ignores, the whole body, the fields of constrained decoding and sampling), huge numbers, duplicate keys,
invalid UTF-8 and giant strings. Hostile constraints (a schema nested, huge, recursive through $ref or with an
invalid pattern, enormous enums and choice lists, huge logit_bias maps, two constraints at once) get a 400 naming the
field, and a constraint whose compile runs past --grammar-compile-timeout a 400 while the server keeps serving (a
503 for others while the compiler is still busy with it). Each gets a clear 4xx (or that 503) with a short OpenAI
error body while a stream on the same server runs to completion, and the process stays up. None of these tests
needs a GPU."""
import json
import random
import threading

import pytest

from conftest import Server, http_request, post_json, sse_events

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
DEPTH = 100_000
MAX_DEPTH = 128  # protocol.h kMaxJsonDepth

# Every POST route and a minimal valid body for it (the hostile value is put into a copy).
ROUTES = {
    CHAT: {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    CMPL: {"model": "tiny", "prompt": "hi", "max_tokens": 2},
    "/tokenize": {"model": "tiny", "prompt": "hi"},
    "/detokenize": {"model": "tiny", "tokens": [100, 200]},
    "/v1/responses": {"model": "tiny", "input": "hi", "max_output_tokens": 2},
}

MARK = b'"@@DEEP@@"'


def deep_value(kind, depth=DEPTH):
    """Raw JSON text of a value nested `depth` levels: arrays, objects, or both alternating."""
    if kind == "array":
        return b"[" * depth + b"1" + b"]" * depth
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    half = depth // 2
    return (b'{"a":[' * half) + b"0" + (b"]}" * half)


def with_deep(base, path, kind, depth=DEPTH):
    """`base` as JSON text with the value at `path` (keys and list indices) replaced by the deep value."""
    body = json.loads(json.dumps(base))
    node = body
    for i, k in enumerate(path[:-1]):
        if isinstance(k, str) and k not in node:
            node[k] = {}
        if isinstance(path[i + 1], int) and not isinstance(node[k], list):
            node[k] = [node[k]]  # e.g. a string prompt becomes a list of prompts
        node = node[k]
    if isinstance(path[-1], int):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = "@@DEEP@@"
    return json.dumps(body).encode().replace(MARK, deep_value(kind, depth))


# Where the deep value goes: fields of every kind, on the routes that have them; ignored fields on all.
FIELD_PATHS = {
    CHAT: [("seed",), ("temperature",), ("max_tokens",), ("model",), ("stream",), ("stop",),
           ("chat_template_kwargs",), ("response_format",), ("logit_bias",), ("tools",), ("messages",),
           ("messages", 0), ("messages", 0, "content"), ("messages", 0, "role"), ("tool_choice",),
           ("tools_deep_schema",), ("user",), ("metadata",), ("x_unknown_field",),
           ("structured_outputs",), ("structured_outputs", "json"), ("guided_json",), ("guided_choice",),
           ("response_format", "json_schema", "schema"), ("tools", 0, "function", "parameters")],
    CMPL: [("prompt",), ("prompt", 1), ("seed",), ("logprobs",), ("echo",), ("stop_token_ids",), ("suffix",),
           ("user",), ("x_unknown_field",), ("logit_bias",), ("structured_outputs",), ("structured_outputs", "json"),
           ("guided_json",), ("guided_choice",), ("guided_regex",), ("prompt_logprobs",), ("min_tokens",)],
    "/tokenize": [("prompt",), ("messages",), ("x_unknown_field",)],
    "/detokenize": [("tokens",), ("tokens", 1), ("x_unknown_field",)],
    "/v1/responses": [("input",), ("input", 0), ("instructions",), ("tools",), ("text",), ("reasoning",),
                      ("metadata",), ("max_output_tokens",), ("x_unknown_field",), ("text", "format", "schema"),
                      ("tool_choice",)],
}


def hostile_bodies():
    for route, base in ROUTES.items():
        for path in FIELD_PATHS[route]:
            for kind in ("array", "object", "mixed"):
                if path == ("tools_deep_schema",):
                    b = dict(base, tools=[{"type": "function", "function": {"name": "f", "parameters": {
                        "type": "object", "properties": {"p": "@@DEEP@@"}}}}])
                    body = json.dumps(b).encode().replace(MARK, deep_value(kind))
                else:
                    body = with_deep(base, path, kind)
                yield route, ".".join(map(str, path)) + f"/{kind}", body
        # The whole body is the deep value.
        yield route, "body/array", deep_value("array")
        yield route, "body/object", deep_value("object")


def check_4xx(status, text, where, code=None):
    assert 400 <= status < 500, (where, status, text[:300])
    assert len(text) < 2048, (where, len(text))  # the error never echoes the hostile value
    err = json.loads(text)["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"], err
    if code:
        assert err["code"] == code, (where, err)
    return err


def test_deep_nesting_everywhere_while_a_stream_completes(server):
    result = {}

    def long_stream():
        result["events"] = sse_events(server, CMPL, {"model": "tiny", "prompt": "keep going", "max_tokens": 160,
                                                     "ignore_eos": True, "stream": True})
    t = threading.Thread(target=long_stream)
    t.start()
    count = 0
    for route, where, body in hostile_bodies():
        s, text, _ = http_request("POST", server.url(route), body)
        err = check_4xx(s, text, f"{route} {where}", code="json_too_deep")
        assert str(MAX_DEPTH) in err["message"] and err["param"] == "body", err
        count += 1
    t.join(300)
    assert not t.is_alive()
    events = result["events"]
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert sum(len(e["choices"][0]["text"]) > 0 for e in events[:-1] if e["choices"]) > 0
    assert server.proc.poll() is None, server.logs()[-2000:]
    assert http_request("GET", server.url("/health"))[0] == 200
    print(f"{count} deeply nested bodies refused while one stream completed")
    server.wait_idle_and_audit()


def test_depth_limit_boundary(server):
    # The body object is level 1, so a field value may nest MAX_DEPTH - 1 levels.
    for kind in ("array", "object"):
        ok = with_deep(ROUTES["/tokenize"], ("x_extra",), kind, MAX_DEPTH - 1)
        s, text, _ = http_request("POST", server.url("/tokenize"), ok)
        assert s == 200, (kind, text[:300])
        too_deep = with_deep(ROUTES["/tokenize"], ("x_extra",), kind, MAX_DEPTH)
        s, text, _ = http_request("POST", server.url("/tokenize"), too_deep)
        check_4xx(s, text, kind, code="json_too_deep")


HUGE_NUMBERS = [b"1e400", b"-1e400", b"123456789012345678901234567890", b"-123456789012345678901234567890",
                b"1" * 5000, b"0." + b"0" * 5000 + b"1", b"1e-400", b"18446744073709551616", b"-9223372036854775809"]


@pytest.mark.parametrize("field", ["seed", "max_tokens", "temperature", "top_k", "n", "top_logprobs"])
def test_huge_numbers_get_4xx(server, field):
    for num in HUGE_NUMBERS:
        body = json.dumps(dict(ROUTES[CHAT], logprobs=True)).encode()[:-1] + b', "' + field.encode() + b'": ' + num + b"}"
        s, text, _ = http_request("POST", server.url(CHAT), body)
        if field in ("temperature", "top_k", "top_logprobs") and num in (b"1e-400", b"0." + b"0" * 5000 + b"1"):
            assert s == 200, text[:300]  # rounds to 0.0, a valid value here (an integral float counts as integer)
            continue
        check_4xx(s, text, f"{field}={num[:20]}")
    # Token-id lists too.
    for route, key in ((CMPL, "prompt"), ("/detokenize", "tokens")):
        for num in HUGE_NUMBERS:
            body = json.dumps(dict(ROUTES[route], **{key: [1, "@"]})).encode().replace(b'"@"', num)
            s, text, _ = http_request("POST", server.url(route), body)
            check_4xx(s, text, f"{route} {num[:20]}")


def test_duplicate_keys_get_400_on_every_route(server):
    for route, base in ROUTES.items():
        text = json.dumps(base)
        top = text[:-1] + ', "model": "tiny"}'
        s, body, _ = http_request("POST", server.url(route), top.encode())
        err = check_4xx(s, body, route)
        assert err["param"] == "model", err
        nested = text[:-1] + ', "x_meta": {"k": 1, "k": 2}}'
        s, body, _ = http_request("POST", server.url(route), nested.encode())
        err = check_4xx(s, body, route)
        assert err["param"] == "k", err


INVALID_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"a\x80b"]


def test_invalid_utf8_in_every_string_field(server):
    fields = {CHAT: ["model", "user", ("messages", 0, "content"), ("messages", 0, "role"), "stop"],
              CMPL: ["model", "prompt", "user", "stop"],
              "/tokenize": ["prompt"],
              "/detokenize": ["model"],
              "/v1/responses": ["input", "instructions", "model"]}
    for route, names in fields.items():
        for name in names:
            path = name if isinstance(name, tuple) else (name,)
            for bad in INVALID_UTF8:
                body = _with_raw_string(ROUTES[route], path, bad)
                s, text, _ = http_request("POST", server.url(route), body)
                err = check_4xx(s, text, f"{route} {path} {bad!r}")
                assert "UTF-8" in err["message"] or "utf-8" in err["message"].lower(), err
    # Escaped lone surrogates are invalid UTF-8 once decoded.
    s, text, _ = http_request("POST", server.url(CMPL), b'{"model":"tiny","prompt":"a\\udc00b","max_tokens":1}')
    check_4xx(s, text, "lone surrogate")


def _with_raw_string(base, path, raw):
    body = json.loads(json.dumps(base))
    node = body
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = "@@RAW@@"
    return json.dumps(body).encode().replace(b'"@@RAW@@"', b'"x' + raw + b'y"')


def test_giant_strings_get_clear_4xx(server):
    rng = random.Random()
    giant = "".join(rng.choice("abcdefgh ") for _ in range(3 << 20))  # 3 MiB, under the 8 MiB body limit
    cases = [
        (CHAT, dict(ROUTES[CHAT], model=giant), 404, "model"),
        (CHAT, dict(ROUTES[CHAT], stop=[giant]), 400, "stop"),
        (CHAT, dict(ROUTES[CHAT], messages=[{"role": giant, "content": "x"}]), 400, None),
        (CMPL, dict(ROUTES[CMPL], suffix=giant), 400, "suffix"),
        (CMPL, dict(ROUTES[CMPL], prompt=giant), 400, "prompt"),
        (CHAT, dict(ROUTES[CHAT], messages=[{"role": "user", "content": giant}]), 400, "messages"),
        ("/detokenize", dict(ROUTES["/detokenize"], model=giant), 404, "model"),
        ("/v1/responses", dict(ROUTES["/v1/responses"], input=giant), 400, "input"),
    ]
    for route, body, status, param in cases:
        s, text, _ = http_request("POST", server.url(route), body, timeout=300)
        err = check_4xx(s, text, route)
        assert s == status, (route, s, err)
        if param:
            assert err["param"] == param, err
    # A giant key name, and one huge duplicated key.
    key = "k" * (1 << 20)
    raw = ('{"model":"tiny","prompt":"hi","max_tokens":1,"' + key + '":1,"' + key + '":2}').encode()
    s, text, _ = http_request("POST", server.url(CMPL), raw)
    check_4xx(s, text, "giant duplicate key")
    assert server.proc.poll() is None
    server.wait_idle_and_audit()


def schema_body(route, schema):
    """A body of `route` constrained by the JSON schema `schema` (each route's own spelling)."""
    if route == CHAT:
        return dict(ROUTES[CHAT], response_format={"type": "json_schema", "json_schema": {"name": "n",
                                                                                          "schema": schema}})
    if route == CMPL:
        return dict(ROUTES[CMPL], guided_json=schema)
    return dict(ROUTES["/v1/responses"], text={"format": {"type": "json_schema", "name": "n", "schema": schema}})


SCHEMA_PARAM = {CHAT: "response_format", CMPL: "guided_json", "/v1/responses": "text.format"}


def test_hostile_constraints_get_400_naming_the_field(server):
    rng = random.Random()
    result = {}

    def long_stream():
        result["events"] = sse_events(server, CHAT, dict(ROUTES[CHAT], max_tokens=120, ignore_eos=True, stream=True))
    t = threading.Thread(target=long_stream)
    t.start()
    huge_enum = {"enum": [f"v{i}-{rng.randrange(10**6)}" for i in range(100_000)]}
    self_ref = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    dangling_ref = {"$ref": "#/$defs/missing"}
    bad_pattern = {"type": "object", "properties": {"p": {"type": "string", "pattern": "(unclosed[a-"}}}
    deep_text = "[" * 30_000 + "]" * 30_000  # a schema as JSON text: nested past the bound, small as a body
    cases = []
    for route, param in SCHEMA_PARAM.items():
        cases += [(route, schema_body(route, huge_enum), param, "at most"),
                  (route, schema_body(route, self_ref), param, "cannot be used for constrained decoding"),
                  (route, schema_body(route, dangling_ref), param, "cannot be used for constrained decoding"),
                  (route, schema_body(route, bad_pattern), param, "cannot be used for constrained decoding")]
    choices = [f"c{i}" for i in range(2000)]
    bias = {str(i * 50 + rng.randrange(50)): rng.randrange(-100, 101) for i in range(2000)}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    cases += [
        (CMPL, dict(ROUTES[CMPL], guided_json=deep_text), "guided_json", "levels deep"),
        (CMPL, dict(ROUTES[CMPL], structured_outputs={"regex": "(a|"}), "structured_outputs",
         "cannot be used for constrained decoding"),
        (CMPL, dict(ROUTES[CMPL], guided_grammar="root ::= ( root"), "guided_grammar",
         "cannot be used for constrained decoding"),
        (CMPL, dict(ROUTES[CMPL], guided_choice=choices), "guided_choice", "at most"),
        (CHAT, dict(ROUTES[CHAT], structured_outputs={"choice": choices}), "structured_outputs.choice", "at most"),
        (CHAT, dict(ROUTES[CHAT], logit_bias=bias), "logit_bias", "at most"),
        (CMPL, dict(ROUTES[CMPL], logit_bias=bias), "logit_bias", "at most"),
        (CHAT, dict(ROUTES[CHAT], response_format={"type": "json_object"}, guided_regex="a+"), "guided_regex",
         "conflicts"),
        (CHAT, dict(ROUTES[CHAT], tools=tools, tool_choice="required", guided_choice=["a", "b"]), "guided_choice",
         "conflicts"),
        (CHAT, dict(ROUTES[CHAT], structured_outputs={"regex": "a", "choice": ["a"]}), "structured_outputs",
         "only one"),
    ]
    for route, body, param, says in cases:
        s, text, _ = http_request("POST", server.url(route), body, timeout=300)
        err = check_4xx(s, text, f"{route} {param}")
        assert s == 400 and err["param"] == param and says in err["message"], (route, param, s, err)
        assert ".cc:" not in err["message"], err  # the engine's source positions are not the client's business
    t.join(300)
    assert not t.is_alive()
    assert result["events"][-1] == "[DONE]"
    assert result["events"][-2]["choices"][0]["finish_reason"] == "length"
    assert server.proc.poll() is None, server.logs()[-2000:]
    server.wait_idle_and_audit()


def test_grammar_with_no_output_fails_alone_with_a_400(server):
    """A grammar xgrammar compiles but whose language is empty (`root ::= root "a"`), or that reaches a dead end
    after a first token, leaves the next-token mask empty. The sampler threw for the whole batched step, so that
    request got a 500 "generation failed" and so did every other request in the same step (found by the
    hostile-client audit). Now only that request ends, with a 400 naming its constraint field, and a request running
    beside it finishes with the same text as alone."""
    solo_body = dict(ROUTES[CMPL], max_tokens=200, temperature=0, ignore_eos=True)
    s, solo, _ = post_json(server.url(CMPL), solo_body, timeout=300)
    assert s == 200, solo
    result = {}

    def beside():
        result["answer"] = post_json(server.url(CMPL), solo_body, timeout=300)
    t = threading.Thread(target=beside)
    t.start()
    empty, dead_end = 'root ::= root "a"', 'root ::= "a" x\nx ::= x "b"'
    cases = [(CMPL, dict(ROUTES[CMPL], guided_grammar=empty), "guided_grammar"),
             (CMPL, dict(ROUTES[CMPL], structured_outputs={"grammar": dead_end}), "structured_outputs"),
             (CHAT, dict(ROUTES[CHAT], structured_outputs={"grammar": empty}), "structured_outputs"),
             ("/v1/responses", dict(ROUTES["/v1/responses"], guided_grammar=dead_end), "guided_grammar")]
    for _ in range(3):
        for route, body, param in cases:
            s, text, _ = http_request("POST", server.url(route), body, timeout=300)
            err = check_4xx(s, text, f"{route} {param}")
            assert s == 400 and err["param"] == param and "allows no next token" in err["message"], (route, s, err)
    # Streamed: the stream ends with an error event naming the field, then [DONE].
    events = sse_events(server, CMPL, dict(ROUTES[CMPL], guided_grammar=empty, stream=True))
    assert events[-1] == "[DONE]" and events[-2]["error"]["param"] == "guided_grammar", events
    t.join(300)
    s, together, _ = result["answer"]
    assert s == 200, together
    assert together["choices"][0]["text"] == solo["choices"][0]["text"]
    assert server.proc.poll() is None, server.logs()[-2000:]
    server.wait_idle_and_audit()


def slow_schema(tag, alternatives=150):
    """A small schema whose compile takes seconds: xgrammar computes a token mask for every state of every counted
    repetition (docs/serving.md, "Constrained decoding")."""
    return {"anyOf": [{"type": "string", "pattern": f"{tag}{i}[a-z]{{3,30}}"} for i in range(alternatives)]}


def test_compile_past_the_time_limit_is_a_400_and_the_server_keeps_serving():
    srv = Server("--grammar-compile-timeout", "0.2", "--grammar-compile-queue-wait", "0.2")
    try:
        tag = "p%d" % random.randrange(10**6)
        s, text, _ = http_request("POST", srv.url(CMPL), dict(ROUTES[CMPL], guided_json=slow_schema(tag)))
        err = check_4xx(s, text, "slow compile")
        assert s == 400 and err["param"] == "guided_json" and "did not compile within" in err["message"], err
        # The same constraint again is refused at once (it is remembered), not compiled a second time.
        s, text, _ = http_request("POST", srv.url(CMPL), dict(ROUTES[CMPL], guided_json=slow_schema(tag)))
        err = check_4xx(s, text, "slow compile again")
        assert s == 400 and "tried before" in err["message"], err
        # Another constraint while the abandoned compile still runs: the compiler is busy, a 503 with Retry-After
        # (or, on a machine fast enough to have finished it, a second overrun: 400). Never a hang.
        s, text, headers = http_request("POST", srv.url(CMPL), dict(ROUTES[CMPL], guided_json=slow_schema("q" + tag)))
        err = json.loads(text)["error"]
        assert (s, err["code"]) == (503, "grammar_compiler_busy") or (s == 400 and "did not compile" in err["message"]), \
            (s, err)
        print(f"another constraint while the abandoned compile runs: {s}")
        if s == 503:
            assert {k.lower(): v for k, v in headers.items()}.get("retry-after"), headers
        # Requests without constraints are not held up by the compile.
        s, text, _ = http_request("POST", srv.url(CMPL), dict(ROUTES[CMPL], max_tokens=4))
        assert s == 200, text[:300]
        assert http_request("GET", srv.url("/health"))[0] == 200
    finally:
        # SIGTERM while a compile may still run: the server ends cleanly anyway (cmd_serve.cpp, _Exit).
        assert srv.stop() == 0, srv.logs()[-2000:]
