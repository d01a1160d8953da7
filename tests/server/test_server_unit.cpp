// Unit tests of the server pieces that need no model: stop-string matching over random splits of streamed text,
// strict JSON parsing (duplicate keys at any depth), request validation naming the parameter, context checks, and
// the Prometheus text format (cumulative buckets, +Inf, sum and count). Random inputs use a fresh seed per run.
#include <gtest/gtest.h>

#include <random>

#include "server/load_progress.h"
#include "runtime/metrics.h"
#include "server/protocol.h"
#include "runtime/stop_matcher.h"

using namespace flashseek::server;
using namespace flashseek::runtime;
using json = nlohmann::json;

namespace {
uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

// What a client must see: after each streamed piece, if the text so far contains a stop string, the output is the
// text before the earliest one found (the first stop to complete wins, as in vLLM's per-token check).
std::string reference_cut(const std::string& text, const std::vector<size_t>& piece_ends,
                          const std::vector<std::string>& stops, bool* matched) {
    for (size_t end : piece_ends) {
        const std::string so_far = text.substr(0, end);
        size_t cut = std::string::npos;
        for (const auto& s : stops) cut = std::min(cut, so_far.find(s));
        if (cut != std::string::npos) {
            *matched = true;
            return text.substr(0, cut);
        }
    }
    *matched = false;
    return text;
}

ProtocolLimits limits() {
    ProtocolLimits l;
    l.model_name = "m";
    l.vocab_size = 1000;
    return l;
}

void expect_param(const std::function<void()>& f, const std::string& param, int status = 400) {
    try {
        f();
        ADD_FAILURE() << "expected ApiError for " << param;
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param, param) << e.what();
        EXPECT_EQ(e.status, status) << e.what();
    }
}
}  // namespace

TEST(StopMatcher, RandomSplitsMatchWholeTextSearch) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::string alphabet = "abcab ";
    for (int trial = 0; trial < 2000; ++trial) {
        std::string text;
        for (int i = 0, n = int(rng() % 40); i < n; ++i) text += alphabet[rng() % alphabet.size()];
        std::vector<std::string> stops;
        for (int k = 0, n = 1 + int(rng() % 3); k < n; ++k) {
            std::string s;
            for (int i = 0, m = 1 + int(rng() % 4); i < m; ++i) s += alphabet[rng() % alphabet.size()];
            stops.push_back(s);
        }
        StopMatcher m(stops);
        std::string out;
        std::vector<size_t> ends;
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t len = 1 + rng() % 5;
            out += m.push(std::string_view(text).substr(pos, len));
            pos = std::min(text.size(), pos + len);
            ends.push_back(pos);
        }
        out += m.flush();
        bool matched = false;
        ASSERT_EQ(out, reference_cut(text, ends, stops, &matched)) << "text '" << text << "'";
        ASSERT_EQ(m.matched(), matched);
    }
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefixes) {
    StopMatcher m({"STOP"});
    EXPECT_EQ(m.push("hello ST"), "hello ");
    EXPECT_EQ(m.push("AR"), "STAR");
    EXPECT_EQ(m.push("xS"), "x");
    EXPECT_EQ(m.push("TOP and more"), "");
    EXPECT_TRUE(m.matched());
    EXPECT_EQ(m.push("later"), "");
}

TEST(Protocol, StrictJson) {
    expect_param([] { parse_json_body(R"({"a": 1, "a": 2})"); }, "a");
    expect_param([] { parse_json_body(R"({"m": [{"x": 1, "y": {"z": 1, "z": 2}}]})"); }, "z");
    EXPECT_NO_THROW(parse_json_body(R"({"m": [{"x": 1}, {"x": 2}]})"));  // same key in sibling objects is fine
    expect_param([] { parse_json_body("[1]"); }, "body");
    expect_param([] { parse_json_body(""); }, "body");
    expect_param([] { parse_json_body("{\"a\": \"\xff\"}"); }, "body");
}

// Random mixes of arrays and objects at a random depth: accepted up to kMaxJsonDepth levels, refused above it with
// code json_too_deep, and refused without building the deep value (a million levels return as fast as a thousand).
TEST(Protocol, NestingDepthIsBoundedWhileParsing) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto nested = [&](int levels) {
        std::string open, closers;
        for (int i = 0; i < levels; ++i) {
            if (rng() % 2) {
                open += rng() % 2 ? "[1, " : "[";
                closers += ']';
            } else {
                open += "{\"k" + std::to_string(rng() % 100) + "\": ";
                closers += '}';
            }
        }
        return open + "0" + std::string(closers.rbegin(), closers.rend());
    };
    for (int trial = 0; trial < 200; ++trial) {
        const int levels = 1 + int(rng() % (2 * kMaxJsonDepth));
        const std::string body = "{\"prompt\": \"x\", \"extra\": " + nested(levels) + "}";
        if (levels + 1 <= kMaxJsonDepth) {
            EXPECT_NO_THROW(parse_json_body(body)) << levels;
        } else {
            try {
                parse_json_body(body);
                ADD_FAILURE() << "accepted " << levels + 1 << " levels";
            } catch (const ApiError& e) {
                EXPECT_EQ(e.code, "json_too_deep");
                EXPECT_EQ(e.param, "body");
            }
        }
    }
    const std::string deep = "{\"a\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
    expect_param([&] { parse_json_body(deep); }, "body");
    expect_param([&] { parse_json_body(std::string(1000000, '{')); }, "body");
}

// Error messages quote scalars (clipped) and only the type of containers and strings.
TEST(Protocol, ErrorMessagesNeverEchoLargeValues) {
    EXPECT_EQ(describe_value(json::parse("[[1]]")), "array");
    EXPECT_EQ(describe_value(json::parse(R"({"a": 1})")), "object");
    EXPECT_EQ(describe_value(json("a string")), "string");
    EXPECT_EQ(describe_value(json(1.5)), "1.5");
    const std::string giant(1 << 20, 'x');
    for (const std::string& body : {"{\"prompt\": \"" + giant, "{\"model\": \"" + giant + "\", \"prompt\": \"x\"}",
                                    "{\"" + giant + "\": 1, \"" + giant + "\": 2}"}) {
        try {
            parse_completion_request(parse_json_body(body), limits());
            ADD_FAILURE() << "accepted";
        } catch (const ApiError& e) {
            EXPECT_LT(error_body(e).size(), 1024u) << e.what();
        }
    }
}

TEST(Protocol, CompletionValidation) {
    const auto L = limits();
    auto parse = [&](const char* text) { return parse_completion_request(parse_json_body(text), L); };
    const ParsedRequest ok = parse(R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "seed": 7, "n": 2,
                                       "temperature": 0.5, "stop": ["x"], "logprobs": 3})");
    EXPECT_EQ(ok.prompt_tokens.at(0), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(*ok.max_tokens, 5);
    EXPECT_EQ(*ok.seed, 7u);
    EXPECT_EQ(ok.n, 2);
    EXPECT_EQ(ok.top_logprobs, 3);
    expect_param([&] { parse(R"({"prompt": [1000]})"); }, "prompt");
    expect_param([&] { parse(R"({"prompt": "x", "model": "other"})"); }, "model", 404);
    expect_param([&] { parse(R"({"prompt": "x", "max_tokens": 9223372036854775808})"); }, "max_tokens");
    expect_param([&] { parse(R"({"prompt": "x", "n": 2, "temperature": 0})"); }, "n");
    expect_param([&] { parse(R"({"prompt": "x", "top_p": 0})"); }, "top_p");
    expect_param([&] { parse(R"({"prompt": "x", "stream_options": {"include_usage": true}})"); }, "stream_options");
}

TEST(Protocol, ContextCheckNamesBothNumbers) {
    ParsedRequest r;
    r.endpoint = Endpoint::Completion;
    EXPECT_EQ(resolve_max_tokens(r, 10, 100), 90);
    r.max_tokens = 90;
    EXPECT_EQ(resolve_max_tokens(r, 10, 100), 90);
    r.max_tokens = 91;
    try {
        resolve_max_tokens(r, 10, 100);
        FAIL();
    } catch (const ApiError& e) {
        const std::string m = e.what();
        EXPECT_EQ(e.code, "context_length_exceeded");
        EXPECT_NE(m.find("100"), std::string::npos);
        EXPECT_NE(m.find("101"), std::string::npos);
        EXPECT_NE(m.find("91"), std::string::npos);
    }
    r.max_tokens = INT64_MAX;
    EXPECT_THROW(resolve_max_tokens(r, 10, 100), ApiError);
    r.max_tokens.reset();
    EXPECT_THROW(resolve_max_tokens(r, 100, 100), ApiError);
}

TEST(Metrics, PrometheusHistogramIsCumulative) {
    Metrics m("model \"x\"");
    m.on_first_token(0.003);
    m.on_first_token(0.05);
    m.on_first_token(1e6);
    m.on_request_finished("stop", 10, 5, 1.0, 0.1, 0.2, 0.15);
    MetricsSnapshotInput in;
    in.running = 3;
    in.state_total_blocks = 10;
    in.state_used_blocks = 4;
    const std::string t = m.render(in);
    EXPECT_NE(t.find("flashseek:num_requests_running{model_name=\"model \\\"x\\\"\"} 3"), std::string::npos) << t;
    EXPECT_NE(t.find("flashseek:kv_cache_usage_perc{model_name=\"model \\\"x\\\"\"} 0.4"), std::string::npos);
    EXPECT_NE(t.find("flashseek:time_to_first_token_seconds_bucket{model_name=\"model \\\"x\\\"\",le=\"0.005\"} 1"),
              std::string::npos);
    EXPECT_NE(t.find("flashseek:time_to_first_token_seconds_bucket{model_name=\"model \\\"x\\\"\",le=\"0.06\"} 2"),
              std::string::npos);
    EXPECT_NE(t.find("le=\"+Inf\"} 3"), std::string::npos);
    EXPECT_NE(t.find("flashseek:time_to_first_token_seconds_count{model_name=\"model \\\"x\\\"\"} 3"), std::string::npos);
    EXPECT_NE(t.find("flashseek:request_success_total{model_name=\"model \\\"x\\\"\",finished_reason=\"stop\"} 1"),
              std::string::npos);
    EXPECT_NE(t.find("# TYPE flashseek:e2e_request_latency_seconds histogram"), std::string::npos);
}

TEST(Metrics, GraphPassCountersOnlyForBackendsWithGraphs) {
    Metrics m("m");
    MetricsSnapshotInput in;
    EXPECT_EQ(m.render(in).find("cuda_graph_passes_total"), std::string::npos) << "a backend without graphs";
    in.graph_passes = flashseek::GraphCounts{3, 2, 41, 1};  // first, captured, replayed, eager
    const std::string t = m.render(in);
    EXPECT_NE(t.find("# TYPE flashseek:cuda_graph_passes_total counter"), std::string::npos) << t;
    for (const char* line : {"flashseek:cuda_graph_passes_total{model_name=\"m\",how=\"first\"} 3",
                             "flashseek:cuda_graph_passes_total{model_name=\"m\",how=\"captured\"} 2",
                             "flashseek:cuda_graph_passes_total{model_name=\"m\",how=\"replayed\"} 41",
                             "flashseek:cuda_graph_passes_total{model_name=\"m\",how=\"eager\"} 1"})
        EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
}

TEST(LoadProgress, LogLinesPerDecileAndCancellation) {
    bool cancel = false;
    LoadProgress p([&] { return cancel; }, /*tty=*/false);
    testing::internal::CaptureStderr();
    for (size_t done = 0; done <= 1000; done += 50) EXPECT_TRUE(p(done, 1000));
    const std::string log = testing::internal::GetCapturedStderr();
    size_t lines = 0;
    for (char c : log) lines += c == '\n';
    EXPECT_EQ(lines, 11u) << log;  // 0%, 10%, ..., 100%
    EXPECT_NE(log.find("GB/s"), std::string::npos);
    cancel = true;
    EXPECT_FALSE(p(10, 1000));  // Ctrl-C during loading: the loader is told to stop
}

// Tool schemas must reach the chat encoder in the client's key order (the official encoder renders Python dicts in
// insertion order); the sorted nlohmann::json body alone would reorder them.
TEST(Protocol, ChatToolSchemasKeepClientKeyOrder) {
    const std::string raw = R"({"model":"flashseek","messages":[{"role":"user","content":"hi"}],
        "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",
        "properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}}}}]})";
    const ProtocolLimits limits;
    const ParsedRequest ordered = parse_chat_request(parse_json_body(raw), limits, raw);
    const std::string text = flashseek::chat::prompt_text(flashseek::chat::render_prompt(ordered.chat));
    ASSERT_NE(text.find("zeta"), std::string::npos) << text;
    EXPECT_LT(text.find("zeta"), text.find("alpha")) << text;
    const ParsedRequest sorted = parse_chat_request(parse_json_body(raw), limits);
    const std::string sorted_text = flashseek::chat::prompt_text(flashseek::chat::render_prompt(sorted.chat));
    EXPECT_GT(sorted_text.find("zeta"), sorted_text.find("alpha"));
}

TEST(Protocol, SamplingAdjustmentsAndPromptSide) {
    const auto L = limits();
    auto parse = [&](const char* text) { return parse_completion_request(parse_json_body(text), L); };
    const ParsedRequest r = parse(R"({"prompt": [1, 2], "max_tokens": 0, "echo": true, "min_p": 0.25,
        "presence_penalty": -1.5, "frequency_penalty": 2, "repetition_penalty": 1.3, "logit_bias": {"7": -100,
        "999": 42.5}, "prompt_logprobs": 4})");
    EXPECT_TRUE(r.echo);
    EXPECT_EQ(*r.max_tokens, 0);
    EXPECT_FLOAT_EQ(r.min_p, 0.25f);
    EXPECT_FLOAT_EQ(r.presence_penalty, -1.5f);
    EXPECT_FLOAT_EQ(r.frequency_penalty, 2.f);
    EXPECT_FLOAT_EQ(r.repetition_penalty, 1.3f);
    EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, -100.f}, {999, 42.5f}}));
    EXPECT_EQ(r.prompt_logprobs, 4);
    expect_param([&] { parse(R"({"prompt": "x", "max_tokens": 0})"); }, "max_tokens");  // 0 needs echo
    expect_param([&] { parse(R"({"prompt": "x", "logit_bias": {"1000": 1}})"); }, "logit_bias");
    expect_param([&] { parse(R"({"prompt": "x", "logit_bias": {"-1": 1}})"); }, "logit_bias");
    expect_param([&] { parse(R"({"prompt": "x", "logit_bias": {"1": -100.5}})"); }, "logit_bias");
    expect_param([&] { parse(R"({"prompt": "x", "min_tokens": 9, "max_tokens": 8})"); }, "min_tokens");
    expect_param([&] { parse(R"({"prompt": "x", "prompt_logprobs": 21})"); }, "prompt_logprobs");
}

TEST(Protocol, ConstraintSources) {
    const auto L = limits();
    auto chat = [&](const std::string& extra) {
        return parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "x"}])" + extra + "}"),
                                  L);
    };
    using Kind = OutputConstraint::Kind;
    EXPECT_EQ(chat("").constraint.kind, Kind::None);
    EXPECT_EQ(chat(R"(, "response_format": {"type": "text"})").constraint.kind, Kind::None);
    const ParsedRequest js = chat(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "a",
        "schema": {"type": "integer"}, "strict": true}})");
    EXPECT_EQ(js.constraint.kind, Kind::Json);
    EXPECT_EQ(json::parse(js.constraint.json_schema), json::parse(R"({"type": "integer"})"));
    EXPECT_EQ(chat(R"(, "structured_outputs": {"regex": "a+"})").constraint.pattern, "a+");
    EXPECT_EQ(chat(R"(, "guided_choice": ["a", "b"])").constraint.choices, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(chat(R"(, "guided_json": "{\"type\": \"boolean\"}")").constraint.kind, Kind::Json);
    EXPECT_EQ(chat(R"(, "structured_outputs": {"grammar": "root ::= \"x\"", "disable_fallback": true})")
                  .constraint.kind, Kind::Grammar);
    const std::string tools = R"(, "tools": [{"type": "function", "function": {"name": "f"}},
                                            {"type": "function", "function": {"name": "g"}}])";
    const ParsedRequest req = chat(tools + R"(, "tool_choice": "required", "parallel_tool_calls": false)");
    EXPECT_EQ(req.constraint.kind, Kind::ToolCalls);
    EXPECT_EQ(req.constraint.tools.size(), 2u);
    EXPECT_FALSE(req.constraint.parallel_tool_calls);
    const ParsedRequest named = chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})");
    ASSERT_EQ(named.constraint.tools.size(), 1u);
    EXPECT_EQ(named.constraint.tools[0]["function"]["name"], "g");
    EXPECT_EQ(chat(tools + R"(, "tool_choice": "auto")").constraint.kind, Kind::None);
    expect_param([&] { chat(tools + R"(, "tool_choice": {"function": {"name": "h"}})"); }, "tool_choice");
    expect_param([&] { chat(R"(, "response_format": {"type": "json_schema", "json_schema": {}})"); },
                 "response_format");
    expect_param([&] { chat(R"(, "guided_regex": "a", "guided_json": {})"); }, "guided_regex");
    expect_param([&] { chat(R"(, "structured_outputs": {"choice": [1]})"); }, "structured_outputs.choice");
    expect_param([&] { chat(R"(, "structured_outputs": {"regex": "a", "choice": ["a"]})"); }, "structured_outputs");
    expect_param([&] { chat(R"(, "structured_outputs": {"whatever": 1})"); }, "structured_outputs");
    expect_param([&] { chat(R"(, "guided_json": 5)"); }, "guided_json");
}
