// The Responses API builder on forced model text (no model): DeepSeek-V4 output with reasoning, content and a DSML
// tool-call block, cut into random pieces (fresh seed per run), becomes reasoning, message and function_call items;
// the streamed event sequence is well formed (event name = data type, consecutive sequence numbers, items added
// before their deltas and done after them) and ends with the same output as the non-streamed response object.
#include <gtest/gtest.h>

#include <random>

#include "server/request_entry.h"
#include "server/responses_builder.h"
#include "v4_tokenizer.h"

using namespace flashseek;
using namespace flashseek::server;
using ojson = nlohmann::ordered_json;

namespace {

PreparedGeneration prepare(const std::string& body) {
    const ProtocolLimits limits = test_support::tiny_limits(false);
    return prepare_generation(Route::Responses, body, EntryContext{limits, test_support::v4_tokenizer(), 2048});
}

// The text cut at random points, one event (one pretend token) per piece; the last one finishes.
std::vector<runtime::OutputEvent> events_of(const std::string& text, const std::string& finish_reason,
                                            std::mt19937_64& rng) {
    std::vector<runtime::OutputEvent> out;
    for (size_t pos = 0; pos < text.size();) {
        const size_t len = std::min(text.size() - pos, size_t(1 + rng() % 7));
        runtime::OutputEvent ev;
        ev.text = text.substr(pos, len);
        ev.tokens.push_back(runtime::TokenOut{int32_t(rng() % 1000), -1.f, {}});
        out.push_back(std::move(ev));
        pos += len;
    }
    out.back().finished = true;
    out.back().finish_reason = finish_reason;
    out.back().completion_tokens = int64_t(out.size());
    return out;
}

std::vector<ojson> parse_sse(const std::string& text) {
    std::vector<ojson> events;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t end = text.find("\n\n", pos);
        EXPECT_NE(end, std::string::npos);
        const std::string block = text.substr(pos, end - pos);
        pos = end + 2;
        const size_t nl = block.find('\n');
        EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
        EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
        ojson data = ojson::parse(block.substr(nl + 7));
        EXPECT_EQ(data["type"], block.substr(7, nl - 7));
        events.push_back(std::move(data));
    }
    return events;
}

const std::string kToolCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>";

}  // namespace

TEST(ResponsesBuilder, ForcedTextBecomesReasoningMessageAndFunctionCall) {
    const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const PreparedGeneration g = prepare(R"({"input": "Weather in Paris?", "reasoning": {"effort": "high"},
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]})");
    const std::string text = "I should call the tool.</think>Let me check." + kToolCall;

    ResponsesBuilder whole(g.request, *g.responses, "resp_abc", 1700000000, 12);
    whole.absorb(events_of(text, "stop", rng));
    EXPECT_FALSE(whole.failure());
    const ojson r = whole.final_json();
    EXPECT_EQ(r["status"], "completed");
    ASSERT_EQ(r["output"].size(), 3u) << r.dump(1);
    EXPECT_EQ(r["output"][0]["type"], "reasoning");
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "I should call the tool.");
    EXPECT_EQ(r["output"][1]["type"], "message");
    EXPECT_EQ(r["output"][1]["content"][0]["text"], "Let me check.");
    const ojson& call = r["output"][2];
    EXPECT_EQ(call["type"], "function_call");
    EXPECT_EQ(call["name"], "get_weather");
    EXPECT_EQ(ojson::parse(call["arguments"].get<std::string>()), (ojson{{"city", "Paris"}, {"days", 3}}));
    EXPECT_EQ(call["call_id"], "call_abc_0");
    EXPECT_EQ(r["usage"]["input_tokens"], 12);
    EXPECT_GT(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
    EXPECT_EQ(r["store"], false);

    // Streamed from differently cut pieces: a well-formed sequence ending with the same output.
    ResponsesBuilder streamed(g.request, *g.responses, "resp_abc", 1700000000, 12);
    std::string sse = streamed.first_chunks();
    for (const auto& ev : events_of(text, "stop", rng)) sse += streamed.stream({ev});
    sse += streamed.last_chunks();
    const std::vector<ojson> events = parse_sse(sse);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events[0]["type"], "response.created");
    EXPECT_EQ(events[1]["type"], "response.in_progress");
    EXPECT_EQ(events.back()["type"], "response.completed");
    std::string reasoning, content, args;
    int open_index = -1, done_items = 0;
    for (size_t i = 0; i < events.size(); ++i) {
        const ojson& e = events[i];
        EXPECT_EQ(e["sequence_number"], i);
        const std::string type = e["type"];
        if (type == "response.output_item.added") {
            EXPECT_EQ(open_index, -1);
            EXPECT_EQ(e["output_index"], done_items);
            open_index = e["output_index"];
        } else if (type == "response.output_item.done") {
            EXPECT_EQ(e["output_index"], open_index);
            open_index = -1;
            ++done_items;
        } else if (e.contains("output_index")) {
            EXPECT_EQ(e["output_index"], open_index) << type;
        }
        if (type == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
        if (type == "response.output_text.delta") content += e["delta"].get<std::string>();
        if (type == "response.function_call_arguments.delta") args += e["delta"].get<std::string>();
    }
    EXPECT_EQ(done_items, 3);
    EXPECT_EQ(reasoning, "I should call the tool.");
    EXPECT_EQ(content, "Let me check.");
    EXPECT_EQ(args, call["arguments"]);
    EXPECT_EQ(events.back()["response"]["output"], r["output"]);
}

TEST(ResponsesBuilder, LengthIsIncompleteAndErrorsFail) {
    std::mt19937_64 rng(std::random_device{}());
    const PreparedGeneration g = prepare(R"({"input": "hi", "max_output_tokens": 3})");
    ResponsesBuilder cut(g.request, *g.responses, "resp_x", 1, 2);
    cut.absorb(events_of("partial answer", "length", rng));
    const ojson r = cut.final_json();
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(r["output"][0]["status"], "incomplete");
    EXPECT_FALSE(r.contains("output_text"));  // the SDK computes output_text; the server does not send it

    ResponsesBuilder failed(g.request, *g.responses, "resp_y", 1, 2);
    std::string sse = failed.first_chunks();
    sse += failed.stream(events_of("x", "error", rng));
    sse += failed.last_chunks();
    const std::vector<ojson> events = parse_sse(sse);
    EXPECT_EQ(events.back()["type"], "response.failed");
    EXPECT_EQ(events.back()["response"]["error"]["code"], "server_error");
    ASSERT_TRUE(failed.failure());
    EXPECT_EQ(failed.failure()->status, 500);
}
