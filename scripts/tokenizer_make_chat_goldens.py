#!/usr/bin/env python3
"""Writes tests/data/tokenizer/chat_golden.jsonl: DeepSeek-V4 chat requests, the prompt text rendered by the
official encoder (encoding_dsv4.encode_messages, passed with --encoding since the project does not ship it) and the
ids HF tokenizers gives for that prompt. Each request is in the OpenAI form that flashseek's ChatRequest::from_json
reads; `official` holds the arguments given to the official encoder.

Usage: python3 scripts/tokenizer_make_chat_goldens.py --encoding /path/to/encoding_dsv4.py
"""
import argparse
import copy
import importlib.util
import json
import os

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "城市名"},
                                                           "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
                          "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web; returns \"results\"\n",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                          "filters": {"type": "object"}}}}}
CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})}},
    {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": json.dumps(
        {"query": "東京 天気 \"quoted\"\nline", "filters": {"lang": ["ja", "en"], "safe": True, "score": 0.25, "n": None}})}},
]


def case(name, messages, thinking=False, effort=None, drop=True, top_tools=None, note=""):
    request = {"messages": messages}
    if thinking:
        request["thinking"] = {"type": "enabled"}
    if effort:
        request["reasoning_effort"] = effort
    if not drop:
        request["drop_thinking"] = False
    official_messages = copy.deepcopy(messages)
    if top_tools:
        request["tools"] = top_tools
        if official_messages and official_messages[0]["role"] == "system":
            official_messages[0]["tools"] = top_tools
        else:
            official_messages.insert(0, {"role": "system", "content": "", "tools": top_tools})
    official_effort = {"max": "max", "xhigh": "max", "high": "high"}.get(effort)
    return {"name": name, "note": note, "request": request,
            "official": {"messages": official_messages, "thinking_mode": "thinking" if thinking else "chat",
                         "drop_thinking": drop, "reasoning_effort": official_effort}}


def cases():
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    return [
        case("official_test_output_2", [sys_msg, {"role": "user", "content": "Hello"},
             {"role": "assistant", "content": "Hi there! How can I help you?", "reasoning_content": "The user said hello."},
             {"role": "user", "content": "What is the capital of France?"},
             {"role": "assistant", "content": "The capital of France is Paris.",
              "reasoning_content": "The user asks about the capital of France. It is Paris."}], thinking=True,
             note="published golden encoding/tests/test_output_2.txt"),
        case("chat_system_user", [sys_msg, {"role": "user", "content": "What is 2+2?"}]),
        case("thinking_user_only", [{"role": "user", "content": "Explain  whitespace\r\n and 数字 12345."}], thinking=True),
        case("thinking_effort_max", [sys_msg, {"role": "user", "content": "Prove it."}], thinking=True, effort="max"),
        case("thinking_effort_high", [sys_msg, {"role": "user", "content": "Prove it."}], thinking=True, effort="high"),
        case("chat_effort_max_ignored", [{"role": "user", "content": "hi"}], effort="max"),
        case("chat_multi_turn", [sys_msg, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello! 😀"}, {"role": "user", "content": "Bye"}]),
        case("thinking_keep_reasoning", [{"role": "user", "content": "a"},
             {"role": "assistant", "content": "b", "reasoning_content": "thought 1"},
             {"role": "user", "content": "c"}], thinking=True, drop=False),
        case("thinking_drop_reasoning", [{"role": "user", "content": "a"},
             {"role": "assistant", "content": "b", "reasoning_content": "thought 1"},
             {"role": "user", "content": "c"}], thinking=True),
        case("tools_chat_round_trip", [sys_msg, {"role": "user", "content": "Weather in Paris, and search Tokyo?"},
             {"role": "assistant", "content": "Let me check.", "tool_calls": CALLS},
             {"role": "tool", "tool_call_id": "call_2", "content": "{\"results\": []}"},
             {"role": "tool", "tool_call_id": "call_1", "content": "18°C, cloudy"}], top_tools=[WEATHER, SEARCH],
             note="tool results given out of order are sorted by call order"),
        case("tools_thinking_keeps_reasoning", [sys_msg, {"role": "user", "content": "Weather?"},
             {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": CALLS[:1]},
             {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
             {"role": "assistant", "content": "Sunny.", "reasoning_content": "Got it."},
             {"role": "user", "content": "Thanks"}], thinking=True, top_tools=[WEATHER]),
        case("tools_without_system", [{"role": "user", "content": "Weather?"}], top_tools=[WEATHER],
             note="top-level tools with no system message: an empty system message carries them"),
        case("developer_with_tools_thinking", [sys_msg,
             {"role": "developer", "content": "Use tools wisely.", "tools": [SEARCH]},
             {"role": "user", "content": "Find news"}], thinking=True),
        case("developer_dropped_before_last_user", [{"role": "developer", "content": "dev note"},
             {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
             {"role": "user", "content": "q2"}], thinking=True),
        case("latest_reminder", [sys_msg, {"role": "user", "content": "What day is it?"},
             {"role": "latest_reminder", "content": "Today is 2026-11-30."}], thinking=True),
        case("task_action", [{"role": "user", "content": "Latest news?", "task": "action"}], thinking=True),
        case("task_query_chat", [{"role": "user", "content": "Latest news?", "task": "query"}]),
        case("task_title_on_assistant", [{"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello!", "task": "title"},
             {"role": "assistant", "content": "Greeting"}], thinking=True),
        case("response_format", [{"role": "system", "content": "Answer in JSON.",
             "response_format": {"type": "json_object", "schema": {"a": 1.5, "b": [1e-7, 1e16, 100.0]}}},
             {"role": "user", "content": "go"}]),
        case("assistant_prefix_wo_eos", [{"role": "user", "content": "Write a poem"},
             {"role": "assistant", "content": "Roses are", "wo_eos": True}]),
        case("consecutive_users_merged", [{"role": "user", "content": "part one"},
             {"role": "user", "content": "part two"}], thinking=True),
        case("tool_then_user_merged", [sys_msg, {"role": "user", "content": "q"},
             {"role": "assistant", "content": None, "tool_calls": CALLS[:1]},
             {"role": "tool", "tool_call_id": "call_1", "content": "r"},
             {"role": "user", "content": "and now?"}], top_tools=[WEATHER]),
        case("non_json_arguments", [{"role": "user", "content": "x"},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
              "function": {"name": "raw", "arguments": "not json {"}}]}]),
        case("empty_and_unicode_content", [{"role": "system", "content": ""},
             {"role": "user", "content": "नमस्ते 👩‍👩‍👧 e\u0301 مرحبا\n\n\t"}], thinking=True),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--encoding", required=True, help="path to the official encoding_dsv4.py")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "assets/tokenizer/deepseek-v4/tokenizer.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/tokenizer/chat_golden.jsonl"))
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("encoding_dsv4", args.encoding)
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    tok = Tokenizer.from_file(args.tokenizer)
    with open(args.out, "w", encoding="utf-8") as f:
        for c in cases():
            o = c["official"]
            prompt = enc.encode_messages(copy.deepcopy(o["messages"]), thinking_mode=o["thinking_mode"],
                                         drop_thinking=o["drop_thinking"], reasoning_effort=o["reasoning_effort"])
            ids = tok.encode(prompt, add_special_tokens=False).ids
            f.write(json.dumps({"name": c["name"], "note": c["note"], "request": c["request"], "prompt": prompt,
                                "ids": ids}, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
