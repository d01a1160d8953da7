"""Constrained decoding on the CPU backend with the tiny random model, whose unconstrained text is garbage: every
output must still be valid. A suite of >= 30 JSON schemas (nested objects, arrays, enums, required fields,
patterns, number bounds, $ref, anyOf/oneOf) through response_format json_schema, structured_outputs and guided_json,
validated with `jsonschema`; json_object, regex, choice and EBNF grammar; tool_choice "required" and a named
function, streamed and not, always giving a well-formed call of a declared tool whose arguments validate against
its parameters. The schemas bound every string, array and number, so a complete value always fits the token budget;
an unbounded one cut by max_tokens ends with finish_reason "length" (the documented behaviour)."""
import concurrent.futures
import json
import random
import re

import jsonschema
import pytest

from conftest import Server, post_json, sse_events

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
MSG = [{"role": "user", "content": "Answer in JSON."}]
BUDGET = 1500

S = lambda n: {"type": "string", "maxLength": n}
I = lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": hi}


def obj(props, required=None, extra=False):
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


SCHEMAS = [
    obj({"name": S(12)}),
    obj({"age": I(0, 120)}),
    obj({"ok": {"type": "boolean"}}),
    obj({"color": {"type": "string", "enum": ["red", "green", "blue"]}}),
    obj({"person": obj({"name": S(10), "age": I(0, 99)})}),
    obj({"digits": {"type": "array", "items": I(1, 9), "maxItems": 4}}),
    obj({"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3}}),
    obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}}),
    obj({"kind": {"const": "point"}, "x": I(-5, 5)}),
    obj({"nothing": {"type": "null"}}),
    obj({"v": {"anyOf": [I(0, 9), S(3)]}}),
    obj({"p": {"type": "number", "minimum": 0, "maximum": 1}}),
    obj({"t": I(-50, -10)}),
    obj({"e": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}}),
    obj({"a": S(4), "b": I(0, 3), "c": {"type": "boolean"}}, required=["a"]),
    obj({"l1": obj({"l2": obj({"l3": obj({"leaf": I(0, 9)})})})}),
    obj({"items": {"type": "array", "maxItems": 2,
                   "items": obj({"id": I(1, 99), "tag": {"enum": ["new", "old"]}})}}),
    obj({"m": {"enum": [1, "two", None, True]}}),
    obj({"s": {"type": "string", "minLength": 2, "maxLength": 5}}),
    obj({"answer": {"type": "string", "pattern": "^(yes|no|maybe)$"}}),
    obj({"pin": {"type": "string", "pattern": "^[0-9]{4}$"}}),
    obj({"f1": S(3), "f2": I(0, 9), "f3": {"type": "boolean"}, "f4": {"enum": ["x", "y"]}, "f5": {"type": "null"}}),
    obj({"grid": {"type": "array", "maxItems": 2, "items": {"type": "array", "maxItems": 2, "items": I(0, 1)}}}),
    obj({"level": {"type": "integer", "enum": [1, 2, 3]}}),
    {"type": "array", "items": S(4), "maxItems": 3},
    {"enum": ["alpha", "beta"]},
    I(100, 200),
    {"type": "boolean"},
    obj({"shape": {"oneOf": [obj({"kind": {"const": "circle"}, "r": I(1, 9)}),
                             obj({"kind": {"const": "square"}, "side": I(1, 9)})]}}),
    {"$defs": {"pt": obj({"x": I(0, 9), "y": I(0, 9)})}, **obj({"a": {"$ref": "#/$defs/pt"},
                                                              "b": {"$ref": "#/$defs/pt"}})},
    obj({"email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"}}),
    obj({"temp": {"type": "number", "minimum": -10.5, "maximum": 40}}),
    obj({"ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}, "label": S(6)}),
    obj({"opt": obj({"x": I(0, 9), "y": S(3)}, required=[])}),
]


@pytest.fixture(scope="module")
def srv(model_dir):
    s = Server("--max-num-seqs", "16", "--enable-debug-hooks", model=model_dir)
    yield s
    s.stop()


def chat_json(srv, schema, seed, how):
    body = {"model": "tiny", "messages": MSG, "max_tokens": BUDGET, "temperature": 1.0, "seed": seed}
    if how == "response_format":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema,
                                                                           "strict": True}}
        s, j, _ = post_json(srv.url(CHAT), body, timeout=600)
        return s, j, (j["choices"][0]["message"]["content"] if s == 200 else None)
    if how == "guided_json":
        body["guided_json"] = schema
        s, j, _ = post_json(srv.url(CHAT), body, timeout=600)
        return s, j, (j["choices"][0]["message"]["content"] if s == 200 else None)
    body = {"model": "tiny", "prompt": "JSON:", "max_tokens": BUDGET, "temperature": 1.0, "seed": seed,
            "structured_outputs": {"json": schema}}
    s, j, _ = post_json(srv.url(CMPL), body, timeout=600)
    return s, j, (j["choices"][0]["text"] if s == 200 else None)


def test_every_schema_output_is_valid(srv):
    rng = random.Random()
    ways = ["response_format", "structured_outputs", "guided_json"]
    jobs = [(i, schema, rng.getrandbits(32), ways[i % 3]) for i, schema in enumerate(SCHEMAS)]
    assert len(jobs) >= 30

    def run(job):
        i, schema, seed, how = job
        return job, chat_json(srv, schema, seed, how)

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(run, jobs))
    for (i, schema, seed, how), (status, body, text) in results:
        where = f"schema {i} via {how}, seed {seed}: {text!r}"
        assert status == 200, (where, body)
        assert body["choices"][0]["finish_reason"] == "stop", where
        jsonschema.validate(json.loads(text), schema)


def test_streamed_json_equals_its_schema(srv):
    schema = SCHEMAS[16]
    body = {"model": "tiny", "messages": MSG, "max_tokens": BUDGET, "temperature": 1.0,
            "seed": random.getrandbits(32), "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    events = sse_events(srv, CHAT, body, timeout=600)
    text = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in e["choices"])
    jsonschema.validate(json.loads(text), schema)
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_json_object_regex_choice_and_grammar(srv):
    rng = random.Random()
    s, j, _ = post_json(srv.url(CHAT), {"model": "tiny", "messages": MSG, "max_tokens": 60, "temperature": 1.0,
                                       "seed": rng.getrandbits(32), "response_format": {"type": "json_object"}},
                        timeout=600)
    assert s == 200, j
    # A free JSON object may run past any budget with a random model; complete ones must parse as objects.
    if j["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(j["choices"][0]["message"]["content"]), dict)
    for _ in range(3):
        s, j, _ = post_json(srv.url(CMPL), {"model": "tiny", "prompt": "Date:", "max_tokens": 40, "temperature": 1.0,
                                           "seed": rng.getrandbits(32),
                                           "structured_outputs": {"regex": "20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"}})
        assert s == 200, j
        assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]", j["choices"][0]["text"]), j
        choices = ["Paris", "Berlin", "Rome"]
        s, j, _ = post_json(srv.url(CHAT), {"model": "tiny", "messages": MSG, "max_tokens": 20, "temperature": 1.0,
                                           "seed": rng.getrandbits(32), "guided_choice": choices})
        assert s == 200 and j["choices"][0]["message"]["content"] in choices, j
        grammar = 'root ::= "(" num " " op " " num ")"\nnum ::= [1-9] [0-9]?\nop ::= "+" | "-" | "*"'
        s, j, _ = post_json(srv.url(CMPL), {"model": "tiny", "prompt": "Expr:", "max_tokens": 30, "temperature": 1.0,
                                           "seed": rng.getrandbits(32), "structured_outputs": {"grammar": grammar}})
        assert s == 200, j
        assert re.fullmatch(r"\([1-9][0-9]? [-+*] [1-9][0-9]?\)", j["choices"][0]["text"]), j


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": obj({"city": S(16), "unit": {"enum": ["C", "F"]}},
                                                        required=["city"])}},
    {"type": "function", "function": {"name": "add", "parameters": obj({"a": I(0, 100), "b": I(0, 100)})}},
    {"type": "function", "function": {"name": "ping"}},
]
PARAMS = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in TOOLS}


def check_calls(calls, names):
    assert calls, "no tool call"
    for c in calls:
        assert c["type"] == "function" and c["function"]["name"] in names, c
        jsonschema.validate(json.loads(c["function"]["arguments"]), PARAMS[c["function"]["name"]])


def tool_request(seed, tool_choice, stream=False, parallel=True):
    return {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
            "tool_choice": tool_choice, "max_tokens": BUDGET, "temperature": 1.0, "seed": seed, "stream": stream,
            "parallel_tool_calls": parallel}


def streamed_calls(srv, body):
    events = sse_events(srv, CHAT, body, timeout=600)
    calls, reasons = [], []
    for e in events[:-1]:
        for c in e["choices"]:
            calls += c["delta"].get("tool_calls") or []
            if c["finish_reason"]:
                reasons.append(c["finish_reason"])
    return calls, reasons


def test_tool_choice_required_always_calls_a_declared_tool(srv):
    rng = random.Random()
    seeds = [rng.getrandbits(32) for _ in range(12)]

    def run(i):
        seed = seeds[i]
        if i % 2:
            calls, reasons = streamed_calls(srv, tool_request(seed, "required", stream=True, parallel=i % 4 == 1))
            return seed, calls, reasons[-1], i % 4 == 1
        s, j, _ = post_json(srv.url(CHAT), tool_request(seed, "required", parallel=i % 4 == 0), timeout=600)
        assert s == 200, j
        msg = j["choices"][0]["message"]
        return seed, msg.get("tool_calls"), j["choices"][0]["finish_reason"], i % 4 == 0

    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        for seed, calls, reason, parallel in ex.map(run, range(len(seeds))):
            check_calls(calls, {"get_weather", "add", "ping"})
            assert reason == "tool_calls", seed
            if not parallel:
                assert len(calls) == 1, (seed, calls)


def test_named_function_is_the_one_called(srv):
    rng = random.Random()
    for stream in (False, True):
        body = tool_request(rng.getrandbits(32), {"type": "function", "function": {"name": "add"}}, stream=stream)
        if stream:
            calls, reasons = streamed_calls(srv, body)
        else:
            s, j, _ = post_json(srv.url(CHAT), body, timeout=600)
            assert s == 200, j
            calls = j["choices"][0]["message"]["tool_calls"]
        check_calls(calls, {"add"})
        assert len(calls) == 1


def test_budget_ending_mid_json_is_length(srv):
    schema = obj({"essay": {"type": "string"}})  # unbounded: a random model rarely closes the string
    s, j, _ = post_json(srv.url(CHAT), {"model": "tiny", "messages": MSG, "max_tokens": 4, "temperature": 1.0,
                                       "response_format": {"type": "json_schema",
                                                           "json_schema": {"name": "e", "schema": schema}}})
    assert s == 200, j
    assert j["choices"][0]["finish_reason"] == "length"
    assert j["choices"][0]["message"]["content"].startswith('{')


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "frobnicate"}}}},
     "response_format"),
    ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs"),
    ({"structured_outputs": {"grammar": "root ::= missing_rule"}}, "structured_outputs"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"structured_outputs": {"json": {"type": "object"}, "regex": "a"}}, "structured_outputs"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs"),
    ({"guided_json": "not json"}, "guided_json"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
])
def test_bad_constraints_are_400(srv, body, param):
    s, j, _ = post_json(srv.url(CHAT), dict({"model": "tiny", "messages": MSG, "max_tokens": 4}, **body))
    assert s == 400, j
    assert j["error"]["param"] == param, j
