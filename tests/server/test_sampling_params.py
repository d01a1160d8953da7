"""Sampling parameters end to end on the CPU backend (the exact semantics are unit-tested on the host sampler,
tests/backend/test_sampling.cpp): logit_bias, min_tokens, repetition / frequency / presence penalties and min_p
change what is generated in the documented way, and out-of-range values are 400s naming the field."""
import random

import pytest

from conftest import post_json

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"


def complete(server, **kw):
    body = dict({"model": "tiny", "prompt": [5000, 6000, 7000, 8000], "max_tokens": 12, "temperature": 0,
                 "ignore_eos": True, "logprobs": 0}, **kw)
    s, j, _ = post_json(server.url(CMPL), body)
    assert s == 200, j
    return j["choices"][0]


def token_text(server, token_id):
    s, j, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": [token_id], "max_tokens": 0, "echo": True,
                                          "logprobs": 0})
    assert s == 200, j
    return j["choices"][0]["logprobs"]["tokens"][0]


def greedy_prompt_and_first_id(server):
    """A prompt whose greedy first token has a text that /tokenize maps back to exactly that one token."""
    rng = random.Random()
    for _ in range(20):
        prompt = [rng.randrange(1000, 100000) for _ in range(4)]
        first = complete(server, prompt=prompt, max_tokens=1)["logprobs"]["tokens"][0]
        if "\ufffd" in first:
            # A partial UTF-8 token is reported lossily: U+FFFD tokenizes to U+FFFD's own token, not to it, and
            # the partial token greedy takes once that one is banned reads the same U+FFFD.
            continue
        s, j, _ = post_json(server.url("/tokenize"), {"model": "tiny", "prompt": first})
        if s == 200 and j["count"] == 1 and token_text(server, j["tokens"][0]) == first:
            return prompt, j["tokens"][0], first
    pytest.fail("no prompt with a round-trippable first token in 20 tries")


def test_logit_bias_forces_and_forbids(server):
    prompt, first_id, first_text = greedy_prompt_and_first_id(server)
    banned = complete(server, prompt=prompt, logit_bias={str(first_id): -100})
    assert banned["logprobs"]["tokens"][0] != first_text
    target = random.randrange(1000, 100000)
    forced = complete(server, prompt=prompt, logit_bias={str(target): 100})
    assert forced["logprobs"]["tokens"] == [token_text(server, target)] * 12
    # Reported logprobs stay the model's (the raw distribution), not the biased one's (which would be ~0).
    assert all(lp < -1 for lp in forced["logprobs"]["token_logprobs"])


def test_min_tokens_holds_back_stop_ids(server):
    prompt, first_id, first_text = greedy_prompt_and_first_id(server)
    stopped = complete(server, prompt=prompt, max_tokens=8, stop_token_ids=[first_id])
    assert stopped["finish_reason"] == "stop" and stopped["logprobs"]["tokens"] == [first_text]
    held = complete(server, prompt=prompt, max_tokens=8, stop_token_ids=[first_id], min_tokens=5)
    assert len(held["logprobs"]["tokens"]) >= 5
    assert first_text not in held["logprobs"]["tokens"][:5]


def test_repetition_penalty_avoids_prompt_and_output_tokens(server):
    prompt = [random.randrange(1000, 100000) for _ in range(6)]
    s, ptoks, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": prompt, "max_tokens": 0, "echo": True,
                                              "logprobs": 0})
    prompt_texts = set(ptoks["choices"][0]["logprobs"]["tokens"])
    out = complete(server, prompt=prompt, max_tokens=16, repetition_penalty=100.0)["logprobs"]["tokens"]
    texts = [t for t in out if "\ufffd" not in t]  # partial UTF-8 pieces share a display text
    assert len(set(texts)) == len(texts), out
    assert not prompt_texts & set(texts), out


def test_presence_and_frequency_penalties_avoid_repeats(server):
    out = complete(server, max_tokens=16, presence_penalty=2.0, frequency_penalty=2.0)["logprobs"]["tokens"]
    texts = [t for t in out if "\ufffd" not in t]
    assert len(set(texts)) == len(texts), out


def test_min_p_one_is_greedy(server):
    greedy = complete(server, max_tokens=10)["text"]
    for seed in (1, 2, 3):
        assert complete(server, max_tokens=10, temperature=1.5, seed=seed, min_p=1.0)["text"] == greedy


def test_sampling_fields_on_chat(server):
    s, j, _ = post_json(server.url(CHAT), {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 6, "temperature": 0.8, "seed": 3, "min_p": 0.1,
                                          "presence_penalty": 0.5, "frequency_penalty": -0.5,
                                          "repetition_penalty": 1.2, "logit_bias": {"100": 5, "200": -5},
                                          "min_tokens": 2})
    assert s == 200, j
    assert j["usage"]["completion_tokens"] >= 2


@pytest.mark.parametrize("field,value", [
    ("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0), ("repetition_penalty", -1),
    ("min_p", 1.5), ("min_p", -0.1), ("logit_bias", {"abc": 1}), ("logit_bias", {"5": 101}),
    ("logit_bias", {"5": "x"}), ("logit_bias", {"999999999": 1}), ("min_tokens", -1), ("min_tokens", 50),
])
def test_out_of_range_is_400(server, field, value):
    s, j, _ = post_json(server.url(CMPL), {"model": "tiny", "prompt": "hi", "max_tokens": 8, field: value})
    assert s == 400 and j["error"]["param"] == field, j
