// The request entry without a socket: every file of the fuzz corpus (seeds and past findings, fuzz_corpus/) goes
// through the same checks the libFuzzer target applies (request_entry_check.h), findings keep their expected
// answer, and /detokenize and /tokenize agree with the tokenizer. Constrained-decoding fields: hostile values too
// large for the fuzzer's inputs get a 400 naming the field, and a schema keeps the client's key order. Random token
// ids use a fresh seed per run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "request_entry_check.h"
#include "v4_tokenizer.h"

using namespace flashseek;
using namespace flashseek::server;
using json = nlohmann::json;

namespace {

using test_support::v4_tokenizer;

ProtocolLimits fuzz_limits() { return test_support::tiny_limits(true); }

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST(RequestEntryCorpus, EveryInputKeepsTheEntryProperties) {
    const ProtocolLimits limits = fuzz_limits();
    const EntryContext ctx{limits, v4_tokenizer(), 2048};
    const std::filesystem::path dir = std::filesystem::path(FLASHSEEK_SOURCE_DIR) / "tests/server/fuzz_corpus";
    size_t files = 0, accepted = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        SCOPED_TRACE(name);
        const std::string input = read_file(entry.path());
        fuzzing::EntryOutcome outcome;
        try {
            outcome = fuzzing::check_request_entry(input, ctx, [](const char* what) { ADD_FAILURE() << what; });
        } catch (const std::exception& e) {
            ADD_FAILURE() << "exception other than ApiError: " << e.what();
        }
        ++files;
        accepted += outcome.status == 200;
        // Seeds named "seed-<route>-..." for valid requests must stay valid; hostile ones must be refused.
        const bool valid_seed = name.rfind("seed-chat-", 0) == 0 || name.rfind("seed-cmpl-", 0) == 0 ||
                                name.rfind("seed-resp-", 0) == 0 || name.rfind("seed-tokenize-", 0) == 0 ||
                                name == "seed-detokenize";
        if (valid_seed) {
            EXPECT_EQ(outcome.status, 200) << outcome.code << " " << outcome.param;
        }
        if (name.rfind("seed-deep-", 0) == 0) {
            EXPECT_EQ(outcome.code, "json_too_deep");
        }
        if (name.rfind("hostile-", 0) == 0) {
            EXPECT_EQ(outcome.status, 400) << outcome.code << " " << outcome.param;
        }
    }
    EXPECT_GE(files, 20u);
    EXPECT_GE(accepted, 10u);
}

TEST(RequestEntry, DetokenizeInvertsTokenize) {
    const ProtocolLimits limits = fuzz_limits();
    const EntryContext ctx{limits, v4_tokenizer(), 2048};
    const uint64_t seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::string alphabet[] = {"a", "b", " ", "é", "中", "😀", "\n", "7"};
    for (int trial = 0; trial < 50; ++trial) {
        std::string text;
        for (int i = 0, n = 1 + int(rng() % 30); i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
        const json tok = answer_tokenize(json{{"prompt", text}}.dump(), ctx);
        EXPECT_EQ(tok["count"], tok["tokens"].size());
        const json detok = answer_detokenize(json{{"tokens", tok["tokens"]}}.dump(), ctx);
        EXPECT_EQ(detok["prompt"], text);
    }
    std::vector<int32_t> ids;
    for (int i = 0; i < 20; ++i) ids.push_back(int32_t(rng() % v4_tokenizer().vocab_size()));
    EXPECT_EQ(answer_detokenize(json{{"tokens", ids}}.dump(), ctx)["prompt"],
              tokenizer::utf8_lossy(v4_tokenizer().decode(ids)));
    for (const char* bad : {R"({"tokens": [-1]})", R"({"tokens": [1.5]})", R"({"tokens": "abc"})", R"({})",
                            R"({"tokens": [129280000]})", R"({"tokens": [1], "model": "other"})"}) {
        try {
            answer_detokenize(bad, ctx);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const ApiError& e) {
            EXPECT_TRUE(e.param == "tokens" || e.param == "model") << bad << " " << e.param;
        }
    }
}

TEST(RequestEntry, ResponsesAndChatRenderTheSamePrompt) {
    const ProtocolLimits limits = fuzz_limits();
    const EntryContext ctx{limits, v4_tokenizer(), 2048};
    const PreparedGeneration chat = prepare_generation(Route::ChatCompletions, R"({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "reasoning_content": "look it up",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"P\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18"}],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
        "max_tokens": 7})", ctx);
    const PreparedGeneration resp = prepare_generation(Route::Responses, R"({"instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "look it up"}]},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\": \"P\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "18"}],
        "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
        "max_output_tokens": 7})", ctx);
    EXPECT_EQ(chat.prompts, resp.prompts);
    EXPECT_EQ(resp.max_new_tokens, std::vector<int64_t>{7});
    ASSERT_TRUE(resp.responses);
    EXPECT_EQ(resp.responses->echo["instructions"], "Be brief.");
    EXPECT_EQ(resp.responses->echo["store"], false);
    EXPECT_EQ(resp.responses->echo["tools"][0]["name"], "w");
}

namespace {

// The ApiError a body gets from prepare_generation (status 200 and an empty param when it is accepted).
ApiError entry_error(Route route, const std::string& body, const EntryContext& ctx) {
    try {
        (void)prepare_generation(route, body, ctx);
    } catch (const ApiError& e) {
        return e;
    }
    return ApiError(200, "accepted", "");
}

}  // namespace

TEST(RequestEntry, HostileConstraintFieldsGetA400NamingTheField) {
    const ProtocolLimits limits = fuzz_limits();
    const EntryContext ctx{limits, v4_tokenizer(), 2048};
    const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
    const std::string big(kMaxConstraintBytes + 1, 'a');
    json many_choices = json::array();
    for (size_t i = 0; i < 40; ++i) many_choices.push_back(std::to_string(i) + std::string(kMaxConstraintBytes / 32, 'c'));
    json huge_enum = json::array();
    for (int i = 0; i < 100000; ++i) huge_enum.push_back(fmt::format("v{}", i));
    json forced_tools = json::array();
    for (int i = 0; i < 8; ++i) {
        json tool = json::parse(R"({"type": "function", "function": {"parameters": {"type": "object"}}})");
        tool["function"]["name"] = fmt::format("f{}", i);
        tool["function"]["parameters"]["description"] = std::string(5000, 'd');
        forced_tools.push_back(std::move(tool));
    }
    // A schema as JSON text, nested far past the bound (and small enough that the nesting is what is refused).
    const std::string deep_text = std::string(30000, '[') + std::string(30000, ']');

    struct Case {
        Route route;
        json body;
        std::string param;
        std::string says;
    };
    // A body from (field, value) pairs: nlohmann's brace initialisation cannot nest inside the aggregate below.
    auto body = [](std::vector<std::pair<std::string, json>> fields) {
        json b = json::object();
        for (auto& [k, v] : fields) b[k] = std::move(v);
        return b;
    };
    json huge_enum_schema = json::object();
    huge_enum_schema["enum"] = huge_enum;
    // More logit_bias entries than the bound, each a valid token id with a valid bias.
    std::mt19937 rng{std::random_device{}()};
    json big_bias = json::object();
    for (size_t id = 0; big_bias.size() <= limits.max_logit_bias; ++id)
        big_bias[std::to_string(id * 7 + rng() % 7)] = int(rng() % 201) - 100;
    json rf_huge = body({{"type", "json_schema"}, {"json_schema", body({{"schema", huge_enum_schema}})}});
    json rf_bad_strict = body({{"type", "json_schema"}, {"json_schema", body({{"schema", json::object()}, {"strict", "yes"}})}});
    json text_huge = body({{"format", body({{"type", "json_schema"}, {"name", "n"}, {"schema", huge_enum_schema}})}});
    const std::vector<Case> cases = {
        {Route::Completions, body({{"prompt", "x"}, {"guided_json", deep_text}}), "guided_json", "levels deep"},
        {Route::Completions, body({{"prompt", "x"}, {"structured_outputs", body({{"json", huge_enum_schema.dump()}})}}),
         "structured_outputs.json", "at most"},
        {Route::ChatCompletions, body({{"messages", msgs}, {"response_format", rf_huge}}), "response_format", "at most"},
        {Route::Completions, body({{"prompt", "x"}, {"guided_regex", big}}), "guided_regex", "at most"},
        {Route::Completions, body({{"prompt", "x"}, {"structured_outputs", body({{"grammar", big}})}}),
         "structured_outputs.grammar", "at most"},
        {Route::Completions, body({{"prompt", "x"}, {"guided_choice", many_choices}}), "guided_choice", "at most"},
        {Route::ChatCompletions, body({{"messages", msgs}, {"tools", forced_tools}, {"tool_choice", "required"}}),
         "tools", "at most"},
        {Route::Responses, body({{"input", "x"}, {"text", text_huge}}), "text.format", "at most"},
        {Route::ChatCompletions, body({{"messages", msgs}, {"response_format", rf_bad_strict}}), "response_format",
         "boolean"},
        {Route::ChatCompletions, body({{"messages", msgs}, {"logit_bias", body({{"129280", 1}})}}), "logit_bias",
         "token id"},
        {Route::ChatCompletions, body({{"messages", msgs}, {"logit_bias", body({{"5", 101}})}}), "logit_bias",
         "[-100, 100]"},
        {Route::ChatCompletions, body({{"messages", msgs}, {"logit_bias", big_bias}}), "logit_bias", "at most"},
        {Route::Completions, body({{"prompt", "x"}, {"min_tokens", 5}, {"max_tokens", 2}}), "min_tokens",
         "must not exceed"},
    };
    for (const Case& c : cases) {
        const std::string body = c.body.dump();
        SCOPED_TRACE(body.substr(0, 200));
        const ApiError e = entry_error(c.route, body, ctx);
        EXPECT_EQ(e.status, 400) << e.what();
        EXPECT_EQ(e.param, c.param) << e.what();
        EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
        EXPECT_LT(error_body(e).size(), 2048u);
    }
    // Right at the bound a regex is accepted (whether it compiles is the grammar engine's call, after the entry).
    const json at_bound = body({{"prompt", "x"}, {"guided_regex", std::string(kMaxConstraintBytes, 'a')}});
    EXPECT_EQ(entry_error(Route::Completions, at_bound.dump(), ctx).status, 200);
}

// The bounds are the server's options (ProtocolLimits, flags of `flashseek serve`), not constants.
TEST(RequestEntry, ConstraintAndLogitBiasBoundsFollowTheLimits) {
    ProtocolLimits limits = fuzz_limits();
    std::mt19937 rng{std::random_device{}()};
    limits.max_constraint_bytes = 40 + rng() % 200;
    limits.max_constraint_choices = 2 + rng() % 5;
    limits.max_logit_bias = 1 + rng() % 5;
    const EntryContext ctx{limits, v4_tokenizer(), 2048};
    auto regex_body = [](size_t bytes) { return json{{"prompt", "x"}, {"guided_regex", std::string(bytes, 'a')}}; };
    EXPECT_EQ(entry_error(Route::Completions, regex_body(limits.max_constraint_bytes).dump(), ctx).status, 200);
    ApiError e = entry_error(Route::Completions, regex_body(limits.max_constraint_bytes + 1).dump(), ctx);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "guided_regex");
    EXPECT_NE(std::string(e.what()).find(fmt::format("at most {}", limits.max_constraint_bytes)), std::string::npos)
        << e.what();

    auto choice_body = [](size_t n) {
        json choices = json::array();
        for (size_t i = 0; i < n; ++i) choices.push_back(fmt::format("c{}", i));
        return json{{"prompt", "x"}, {"guided_choice", choices}};
    };
    EXPECT_EQ(entry_error(Route::Completions, choice_body(limits.max_constraint_choices).dump(), ctx).status, 200);
    e = entry_error(Route::Completions, choice_body(limits.max_constraint_choices + 1).dump(), ctx);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "guided_choice");

    auto bias_body = [&](size_t n) {
        json bias = json::object();
        for (size_t i = 0; i < n; ++i) bias[std::to_string(i * 100 + rng() % 100)] = int(rng() % 201) - 100;
        return json{{"prompt", "x"}, {"logit_bias", bias}};
    };
    EXPECT_EQ(entry_error(Route::Completions, bias_body(limits.max_logit_bias).dump(), ctx).status, 200);
    e = entry_error(Route::Completions, bias_body(limits.max_logit_bias + 1).dump(), ctx);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "logit_bias");
    EXPECT_NE(std::string(e.what()).find(fmt::format("at most {}", limits.max_logit_bias)), std::string::npos)
        << e.what();
}

TEST(RequestEntry, ConstraintSchemaKeepsTheClientsKeyOrder) {
    const ProtocolLimits limits = fuzz_limits();
    const EntryContext ctx{limits, v4_tokenizer(), 2048};
    // Property order is the order the grammar imposes: it must be the client's, not sorted.
    const std::string schema = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}},"required":["zeta","alpha"]})";
    const PreparedGeneration chat = prepare_generation(
        Route::ChatCompletions,
        R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":)" +
            schema + "}}}",
        ctx);
    EXPECT_EQ(chat.request.constraint.kind, OutputConstraint::Kind::Json);
    EXPECT_EQ(chat.request.constraint.json_schema, schema);
    const PreparedGeneration cmpl =
        prepare_generation(Route::Completions, R"({"prompt":"x","guided_json":)" + json(schema).dump() + "}", ctx);
    EXPECT_EQ(cmpl.request.constraint.json_schema, schema);
    EXPECT_EQ(cmpl.request.constraint.param, "guided_json");
    const PreparedGeneration resp = prepare_generation(
        Route::Responses, R"({"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":)" + schema + "}}}",
        ctx);
    EXPECT_EQ(resp.request.constraint.json_schema, schema);
    EXPECT_EQ(resp.request.constraint.param, "text.format");
}
