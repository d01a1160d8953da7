"""/v1/responses (OpenAI Responses API, stateless) with the official `openai` client's `responses.create`, streamed
and not: the response object and its output items, the SSE event sequence, reasoning items (DeepSeek-V4 thinking),
function tools with a full round trip (model calls a tool → the client sends function_call_output → the model
answers), tool_choice required / a named function and text.format json_schema constraining the output (constrained
decoding, as on chat), max_output_tokens, and what is refused. A random model's text is arbitrary, so exact-output tests drive
the output through the server's test hook `debug_forced_tokens`. None of these tests needs a GPU."""
import json
import re

import jsonschema
import pytest

from conftest import forced, http_request, post_json

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city"]}}]
DSML = ("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")


def check_event_sequence(events):
    """The framing every Responses stream has: numbered events, created/in_progress first, one terminal event last,
    every item added before its deltas and done after them, items in output_index order."""
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types[:3]
    assert types[-1] in ("response.completed", "response.incomplete", "response.failed"), types[-1]
    assert sum(t in ("response.completed", "response.incomplete", "response.failed") for t in types) == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    open_items, done_items = {}, []
    for e in events[2:-1]:
        if e.type == "response.output_item.added":
            assert e.output_index == len(done_items) and not open_items, (e, open_items)
            open_items[e.output_index] = e.item
        elif e.type == "response.output_item.done":
            assert e.output_index in open_items
            open_items.pop(e.output_index)
            done_items.append(e.item)
        else:
            assert getattr(e, "output_index", None) in open_items, e
    assert not open_items
    final = events[-1].response
    assert [i.model_dump(exclude_none=True) for i in final.output] == \
        [i.model_dump(exclude_none=True) for i in done_items]
    return final


def test_create_non_stream(client):
    r = client.responses.create(model="tiny", input="Hello there", max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.store is False
    messages = [o for o in r.output if o.type == "message"]
    assert len(messages) <= 1
    text = "".join(p.text for m in messages for p in m.content)
    assert r.output_text == text
    assert r.usage.input_tokens > 3 and 1 <= r.usage.output_tokens <= 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"


def test_stream_matches_non_stream_and_chat(client):
    kw = dict(model="tiny", instructions="Be brief.", input="Count to five.", max_output_tokens=20, temperature=0)
    full = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    final = check_event_sequence(events)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == full.output_text == final.output_text
    done = [e.text for e in events if e.type == "response.output_text.done"]
    assert done == ([full.output_text] if full.output_text else [])
    assert final.usage.output_tokens == full.usage.output_tokens
    assert final.usage.input_tokens == full.usage.input_tokens
    # The same conversation through chat completions renders the same prompt and, greedy, the same text.
    chat = client.chat.completions.create(model="tiny", max_tokens=20, temperature=0,
                                          messages=[{"role": "system", "content": "Be brief."},
                                                    {"role": "user", "content": "Count to five."}])
    assert chat.usage.prompt_tokens == full.usage.input_tokens
    assert (chat.choices[0].message.content or "") == full.output_text


def test_reasoning_item_before_the_message(client, hf_tokenizer):
    out = forced(hf_tokenizer, "Let me think about it.</think>The answer is 4.")
    kw = dict(model="tiny", input="2+2?", max_output_tokens=64, temperature=0, reasoning={"effort": "high"},
              extra_body={"debug_forced_tokens": out})
    r = client.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "Let me think about it."
    assert r.output_text == "The answer is 4."
    assert r.status == "completed"
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    assert r.reasoning.effort == "high"
    events = list(client.responses.create(stream=True, **kw))
    final = check_event_sequence(events)
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert reasoning == "Let me think about it."
    assert [e.text for e in events if e.type == "response.reasoning_text.done"] == ["Let me think about it."]
    assert final.output_text == "The answer is 4."
    # Without reasoning the prompt is the non-thinking one: the same forced text is all content.
    plain = client.responses.create(model="tiny", input="2+2?", max_output_tokens=64, temperature=0,
                                    extra_body={"debug_forced_tokens": out})
    assert [o.type for o in plain.output] == ["message"]


def test_function_tool_round_trip(server, client, hf_tokenizer):
    question = [{"role": "user", "content": "What's the weather in Paris for 3 days?"}]
    r = client.responses.create(model="tiny", input=question, tools=TOOLS, max_output_tokens=200, temperature=0,
                                extra_body={"debug_forced_tokens": forced(hf_tokenizer, DSML)})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and r.status == "completed"
    call = calls[0]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris", "days": 3}
    assert call.call_id and call.status == "completed"
    assert r.tools[0].name == "get_weather"
    # Streaming gives the same call through the function_call_arguments events.
    events = list(client.responses.create(model="tiny", input=question, tools=TOOLS, max_output_tokens=200,
                                          temperature=0, stream=True,
                                          extra_body={"debug_forced_tokens": forced(hf_tokenizer, DSML)}))
    final = check_event_sequence(events)
    args_done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(args_done) == 1 and json.loads(args_done[0].arguments) == {"city": "Paris", "days": 3}
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == \
        args_done[0].arguments
    assert [o.type for o in final.output] == [o.type for o in r.output]
    # Round trip: the call and its output go back in; the model answers.
    answer = "It is 18 degrees in Paris."
    follow = question + [o.model_dump(exclude_none=True) for o in r.output] + [
        {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp_c": 18})}]
    r2 = client.responses.create(model="tiny", input=follow, tools=TOOLS, max_output_tokens=64, temperature=0,
                                 extra_body={"debug_forced_tokens": forced(hf_tokenizer, answer)})
    assert r2.output_text == answer and r2.status == "completed"
    assert r2.usage.input_tokens > r.usage.input_tokens
    # The tool result was rendered exactly as chat completions render the same turn.
    chat_msgs = question + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": json.dumps({"temp_c": 18})}]
    chat_tools = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]
    s, j, _ = post_json(server.url("/tokenize"), {"model": "tiny", "messages": chat_msgs, "tools": chat_tools})
    assert s == 200, j
    assert j["count"] == r2.usage.input_tokens


BOUNDED_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
                  "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days"],
                                 "properties": {"city": {"type": "string", "maxLength": 8},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 7}}}},
                 {"type": "function", "name": "ping", "parameters": {"type": "object", "properties": {}}}]


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_choice_calls_a_declared_tool(client, stream):
    """The random model's own text is garbage: tool_choice required / a named function constrain it to a call."""
    for seed, choice in ((1, "required"), (2, "required"), (3, {"type": "function", "name": "get_weather"})):
        kw = dict(model="tiny", input="Weather in Paris?", tools=BOUNDED_TOOLS, tool_choice=choice,
                  max_output_tokens=400, temperature=1, extra_body={"seed": seed})
        if stream:
            r = check_event_sequence(list(client.responses.create(stream=True, **kw)))
        else:
            r = client.responses.create(**kw)
        assert r.status == "completed", r
        calls = [o for o in r.output if o.type == "function_call"]
        assert calls, r.output
        for call in calls:
            args = json.loads(call.arguments)
            assert call.name in ("get_weather", "ping")
            if isinstance(choice, dict):
                assert call.name == "get_weather"
            if call.name == "get_weather":
                jsonschema.validate(args, BOUNDED_TOOLS[0]["parameters"])


def test_text_format_json_schema_constrains_the_output(client):
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "score"],
              "properties": {"name": {"type": "string", "maxLength": 10},
                             "score": {"type": "integer", "minimum": 0, "maximum": 9}}}
    for seed in range(3):
        kw = dict(model="tiny", input="Rate it, as JSON", max_output_tokens=400, temperature=1,
                  text={"format": {"type": "json_schema", "name": "rating", "schema": schema, "strict": True}},
                  extra_body={"seed": seed})
        r = client.responses.create(**kw)
        assert r.status == "completed", r
        jsonschema.validate(json.loads(r.output_text), schema)
        assert r.text.format.type == "json_schema"
        streamed = check_event_sequence(list(client.responses.create(stream=True, **kw)))
        assert streamed.output_text == r.output_text  # same seed, same constrained text


def test_max_output_tokens_gives_incomplete(client):
    kw = dict(model="tiny", input="Tell me a long story", max_output_tokens=3, temperature=0,
              extra_body={"ignore_eos": True})
    r = client.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    events = list(client.responses.create(stream=True, **kw))
    final = check_event_sequence(events)
    assert events[-1].type == "response.incomplete" and final.status == "incomplete"


REFUSED = [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"max_tokens": 5}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages"),
    ({"n": 2}, "n"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tool_choice": {"type": "function", "name": "not_declared"}, "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "banana"}}}}, "text.format"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format"),
    ({"input": []}, "input"),
    ({"input": 5}, "input"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0]"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0]"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 100000}, "max_output_tokens"),
    ({"metadata": {"k": 5}}, "metadata"),
    ({"temperature": 3}, "temperature"),
    ({"reasoning": {"effort": 5}}, "reasoning"),
    ({"model": "gpt-4o"}, "model"),
]


def test_refused_fields_name_the_parameter(server):
    for extra, param in REFUSED:
        body = dict({"model": "tiny", "input": "hi", "max_output_tokens": 4}, **extra)
        s, j, _ = post_json(server.url("/v1/responses"), body)
        assert 400 <= s < 500, (extra, s, j)
        assert j["error"]["param"] == param, (extra, j)


# Errors the chat rules raise after the translation: the message names the Responses field as the param does, not
# the chat field it was translated into (the hostile-client audit found 'max_tokens' and 'messages' in these
# messages, and param reasoning_effort for reasoning.effort).
RENAMED = [
    ({"max_output_tokens": 0}, "max_output_tokens", "max_tokens"),
    ({"max_output_tokens": 1.5}, "max_output_tokens", "max_tokens"),
    ({"max_output_tokens": 100000}, "max_output_tokens", "max_tokens"),
    ({"reasoning": {"effort": "ultra"}}, "reasoning.effort", "reasoning_effort"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input", "messages"),
    ({"tools": [{"type": "function", "name": ""}]}, "tools", "function"),
    ({"tools": [{"type": "function", "name": "f"}] * 2}, "tools", "function"),
]


def test_errors_after_translation_name_the_responses_field(server):
    for extra, param, chat_name in RENAMED:
        body = dict({"model": "tiny", "input": "hi", "max_output_tokens": 4}, **extra)
        s, j, _ = post_json(server.url("/v1/responses"), body)
        assert s == 400, (extra, s, j)
        message = j["error"]["message"]
        assert j["error"]["param"] == param and param in message, (extra, j)
        assert not re.search(rf"(?<![\w.]){re.escape(chat_name)}(?!\w)", message), (extra, message)


def test_stateless(server, client):
    r = client.responses.create(model="tiny", input="hi", max_output_tokens=2, store=True)
    assert r.store is False
    s, text, _ = http_request("GET", server.url(f"/v1/responses/{r.id}"))
    assert s == 404 and "not stored" in json.loads(text)["error"]["message"]
