"""Prompt-side outputs on the CPU backend: completions `echo` (prompt text and prompt token logprobs before the
completion's, first token null, also with max_tokens 0 and streamed) and vLLM's `prompt_logprobs` on both endpoints,
all computed in the prefill's own forward. Values must equal the log-softmax of `flashseek logits` on the same
tokens (<= 1e-4), whatever the prefill chunking and the batch."""
import json
import random

import jsonschema
import pytest

from conftest import Server, http_request, post_json, sse_events
from logits_reference import prompt_token_logprobs

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def chunked(model_dir):
    # Small prefill chunks: every prompt here spans several chunks, so scores cross chunk boundaries.
    s = Server("--prefill-chunk", "5", "--max-num-seqs", "8", model=model_dir)
    yield s
    s.stop()


def random_ids(rng, n):
    return [rng.randrange(100, 120000) for _ in range(n)]


def validate_against_openapi(server, body, schema_name):
    """The response body against the server's own /openapi.json schema (its $refs resolved in the document)."""
    s, text, _ = http_request("GET", server.url("/openapi.json"))
    assert s == 200
    doc = json.loads(text)
    schema = dict(doc["components"]["schemas"][schema_name])
    schema["components"] = doc["components"]
    jsonschema.Draft202012Validator(schema).validate(body)


def test_echo_with_max_tokens_zero_scores_the_prompt(chunked, model_dir):
    rng = random.Random()
    ids = random_ids(rng, rng.randrange(12, 30))
    s, j, _ = post_json(chunked.url(CMPL), {"model": "tiny", "prompt": ids, "max_tokens": 0, "echo": True,
                                           "logprobs": 2, "temperature": 0})
    assert s == 200, j
    ch = j["choices"][0]
    lp = ch["logprobs"]
    want = prompt_token_logprobs(model_dir, ids)
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    validate_against_openapi(chunked, j, "Completion")  # the document admits the first token's nulls
    for p in range(1, len(ids)):
        assert abs(lp["token_logprobs"][p] - want[p]) <= 1e-4, (p, lp["token_logprobs"][p], want[p])
        top = lp["top_logprobs"][p]
        assert 1 <= len(top) <= 2 and max(top.values()) >= lp["token_logprobs"][p] - 1e-6
    assert ch["finish_reason"] == "length"
    assert j["usage"]["completion_tokens"] == 0 and j["usage"]["prompt_tokens"] == len(ids)
    offsets = lp["text_offset"]
    assert offsets[0] == 0 and offsets == sorted(offsets)


def test_echo_text_prompt_and_completion(chunked, model_dir):
    prompt = "The quick brown fox jumps over the lazy dog. " * 3
    s, j, _ = post_json(chunked.url(CMPL), {"model": "tiny", "prompt": prompt, "max_tokens": 4, "echo": True,
                                           "logprobs": 1, "temperature": 0, "ignore_eos": True})
    assert s == 200, j
    ch = j["choices"][0]
    assert ch["text"].startswith(prompt)
    lp = ch["logprobs"]
    s2, tk, _ = post_json(chunked.url("/tokenize"), {"model": "tiny", "prompt": prompt})
    ids = tk["tokens"]
    assert len(lp["tokens"]) == len(ids) + 4
    want = prompt_token_logprobs(model_dir, ids)
    for p in range(1, len(ids)):
        assert abs(lp["token_logprobs"][p] - want[p]) <= 1e-4
    # The completion part matches a request without echo.
    s, plain, _ = post_json(chunked.url(CMPL), {"model": "tiny", "prompt": prompt, "max_tokens": 4, "logprobs": 1,
                                               "temperature": 0, "ignore_eos": True})
    assert ch["text"] == prompt + plain["choices"][0]["text"]
    assert lp["token_logprobs"][len(ids):] == plain["choices"][0]["logprobs"]["token_logprobs"]


def test_echo_streamed_equals_non_streamed(chunked):
    ids = random_ids(random.Random(), 17)
    body = {"model": "tiny", "prompt": ids, "max_tokens": 3, "echo": True, "logprobs": 1, "temperature": 0,
            "ignore_eos": True}
    s, whole, _ = post_json(chunked.url(CMPL), body)
    events = sse_events(chunked, CMPL, dict(body, stream=True))
    assert events[-1] == "[DONE]"
    text, token_logprobs = "", []
    for e in events[:-1]:
        for ch in e["choices"]:
            text += ch["text"]
            if ch["logprobs"]:
                token_logprobs += ch["logprobs"]["token_logprobs"]
    assert text == whole["choices"][0]["text"]
    assert token_logprobs == whole["choices"][0]["logprobs"]["token_logprobs"]


def test_prompt_logprobs_completions_and_chat(chunked, model_dir):
    ids = random_ids(random.Random(), 23)
    s, j, _ = post_json(chunked.url(CMPL), {"model": "tiny", "prompt": ids, "max_tokens": 2, "prompt_logprobs": 3,
                                           "temperature": 0})
    assert s == 200, j
    pl = j["choices"][0]["prompt_logprobs"]
    want = prompt_token_logprobs(model_dir, ids)
    assert len(pl) == len(ids) and pl[0] is None
    for p in range(1, len(ids)):
        entry = pl[p]
        assert str(ids[p]) in entry
        assert abs(entry[str(ids[p])]["logprob"] - want[p]) <= 1e-4
        # The scored token plus the top 3 (which may include it), with their ranks.
        ranks = sorted(v["rank"] for v in entry.values())
        if len(entry) == 3:
            assert ranks == [1, 2, 3] and entry[str(ids[p])]["rank"] <= 3
        else:
            assert len(entry) == 4 and ranks[:3] == [1, 2, 3] and entry[str(ids[p])]["rank"] > 3
    # Chat: beside the choices, for the rendered prompt.
    msgs = [{"role": "user", "content": "Name three colours."}]
    s, j, _ = post_json(chunked.url(CHAT), {"model": "tiny", "messages": msgs, "max_tokens": 2, "prompt_logprobs": 0})
    assert s == 200, j
    s, tk, _ = post_json(chunked.url("/tokenize"), {"model": "tiny", "messages": msgs})
    pl = j["prompt_logprobs"]
    assert len(pl) == tk["count"] and pl[0] is None
    want = prompt_token_logprobs(model_dir, tk["tokens"])
    for p in range(1, len(pl)):
        (key, value), = pl[p].items()
        assert int(key) == tk["tokens"][p] and abs(value["logprob"] - want[p]) <= 1e-4


def test_scores_do_not_depend_on_the_batch(chunked):
    """Concurrent scoring requests get exactly what each gets alone."""
    import concurrent.futures
    rng = random.Random()
    prompts = [random_ids(rng, rng.randrange(8, 25)) for _ in range(6)]
    body = lambda ids: {"model": "tiny", "prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0}
    alone = [post_json(chunked.url(CMPL), body(p))[1]["choices"][0]["logprobs"]["token_logprobs"] for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        together = list(ex.map(lambda p: post_json(chunked.url(CMPL), body(p))[1], prompts))
    for a, t in zip(alone, together):
        assert t["choices"][0]["logprobs"]["token_logprobs"] == a


def test_prompt_side_validation(chunked):
    for body, param in [({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
                        ({"prompt": "hi", "echo": "yes"}, "echo"),
                        ({"prompt": "hi", "prompt_logprobs": 21}, "prompt_logprobs"),
                        ({"prompt": "hi", "prompt_logprobs": -1}, "prompt_logprobs")]:
        s, j, _ = post_json(chunked.url(CMPL), dict({"model": "tiny"}, **body))
        assert s == 400 and j["error"]["param"] == param, (body, j)
    s, j, _ = post_json(chunked.url(CHAT), {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                           "max_tokens": 0})
    assert s == 400 and j["error"]["param"] == "max_tokens"
