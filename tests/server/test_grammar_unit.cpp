// Model-free tests of the constrained-decoding grammar (runtime/grammar.h) with the real DeepSeek-V4 tokenizer:
// random walks that pick uniformly among the tokens each mask allows must always end in a complete output that
// is valid (JSON of the schema, the regex, a choice, DSML tool calls that the chat output parser turns into calls of
// declared tools with JSON arguments); control tokens never appear inside constrained text; EOS is allowed exactly
// when the output is complete; what the engine cannot compile is a GrammarError. Fresh seeds per run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>
#include <thread>

#include "backend/backend.h"
#include "runtime/grammar.h"
#include "tokenizer/chat_encoding.h"

using namespace flashseek;
using runtime::ConstraintCompiler;
using runtime::OutputConstraint;
using json = nlohmann::json;

namespace {

constexpr int64_t kModelVocab = 129280;

const tokenizer::Tokenizer& tok() {
    static const tokenizer::Tokenizer t =
        tokenizer::Tokenizer::load(std::string(FLASHSEEK_SOURCE_DIR) + "/assets/tokenizer/deepseek-v4/tokenizer.json");
    return t;
}

const ConstraintCompiler& compiler() {
    static const ConstraintCompiler c(tok(), kModelVocab, tok().eos_id());
    return c;
}

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}(); }

bool allowed(const std::vector<uint32_t>& mask, int32_t t) { return (mask[size_t(t >> 5)] >> (t & 31)) & 1u; }

// Walks the grammar with uniformly random allowed tokens until it is complete; returns the ids before EOS.
std::vector<int32_t> random_walk(const OutputConstraint& c, std::mt19937_64& rng, int max_steps = 4000) {
    auto m = compiler().start(compiler().compile(c));
    std::vector<uint32_t> mask(size_t(token_mask_words(kModelVocab)));
    std::vector<int32_t> out;
    const int32_t eos = tok().eos_id();
    for (int step = 0; step < max_steps; ++step) {
        m->fill_allowed(mask.data(), kModelVocab);
        std::vector<int32_t> ids;
        for (int32_t t = 0; t < kModelVocab; ++t)
            if (allowed(mask, t)) ids.push_back(t);
        EXPECT_FALSE(ids.empty()) << "empty mask after " << out.size() << " tokens";
        if (ids.empty()) return out;
        for (int32_t t : ids)
            if (t != eos && tok().is_added(t)) {
                const std::string name = tok().id_to_token(t);
                EXPECT_TRUE(name == "｜DSML｜" || name == "</think>") << "control token " << name << " allowed";
            }
        const bool eos_allowed = std::find(ids.begin(), ids.end(), eos) != ids.end();
        if (eos_allowed) {
            EXPECT_EQ(ids, std::vector<int32_t>{eos}) << "EOS is allowed only alone, once the output is complete";
            EXPECT_TRUE(m->accept(eos));
            EXPECT_TRUE(m->complete());
            return out;
        }
        const int32_t pick = ids[size_t(rng() % ids.size())];
        EXPECT_TRUE(m->accept(pick));
        EXPECT_FALSE(m->complete());
        out.push_back(pick);
    }
    ADD_FAILURE() << "no complete output in " << max_steps << " tokens";
    return out;
}

OutputConstraint json_constraint(const json& schema) {
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::Json;
    c.json_schema = schema.dump();
    return c;
}

}  // namespace

TEST(Grammar, RandomWalksGiveSchemaValidJson) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const json schema = json::parse(R"({"type": "object", "additionalProperties": false,
        "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 3,
                       "maximum": 42}, "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
                       "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"}},
        "required": ["name", "age", "tags", "code"]})");
    for (int run = 0; run < 8; ++run) {
        const std::string text = tok().decode(random_walk(json_constraint(schema), rng));
        SCOPED_TRACE(text);
        const json v = json::parse(text);
        ASSERT_TRUE(v.is_object());
        EXPECT_EQ(v.size(), 4u);
        EXPECT_LE(v["name"].get<std::string>().size(), 6u * 4);  // 6 code points
        EXPECT_GE(v["age"].get<int>(), 3);
        EXPECT_LE(v["age"].get<int>(), 42);
        EXPECT_LE(v["tags"].size(), 3u);
        for (const auto& t : v["tags"]) EXPECT_TRUE(t == "x" || t == "y");
        EXPECT_TRUE(std::regex_match(v["code"].get<std::string>(), std::regex("[A-Z]{2}[0-9]")));
    }
}

TEST(Grammar, RegexChoiceAndReasoningPrefix) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    OutputConstraint re;
    re.kind = OutputConstraint::Kind::Regex;
    re.pattern = "(ab|cd)[0-9]{1,3}!";
    for (int run = 0; run < 5; ++run)
        EXPECT_TRUE(std::regex_match(tok().decode(random_walk(re, rng)), std::regex("(ab|cd)[0-9]{1,3}!")));
    OutputConstraint choice;
    choice.kind = OutputConstraint::Kind::Choice;
    choice.choices = {"yes", "no", "ünïcödé"};
    for (int run = 0; run < 5; ++run) {
        const std::string text = tok().decode(random_walk(choice, rng));
        EXPECT_TRUE(text == "yes" || text == "no" || text == "ünïcödé") << text;
    }
    // Thinking mode: free reasoning first; forcing </think> at once gives the constrained part right after it.
    choice.reasoning_first = true;
    auto m = compiler().start(compiler().compile(choice));
    EXPECT_TRUE(m->accept(*tok().token_to_id("</think>")));
    std::vector<uint32_t> mask(size_t(token_mask_words(kModelVocab)));
    m->fill_allowed(mask.data(), kModelVocab);
    EXPECT_TRUE(allowed(mask, tok().encode("yes")[0]));
    EXPECT_FALSE(allowed(mask, tok().eos_id()));
}

TEST(Grammar, ToolCallsParseAsCallsOfDeclaredTools) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::ToolCalls;
    c.tools = json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["C", "F"]},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "ping"}}])");
    for (bool parallel : {true, false}) {
        c.parallel_tool_calls = parallel;
        for (int run = 0; run < 6; ++run) {
            const std::string text = tok().decode(random_walk(c, rng));
            SCOPED_TRACE(text);
            const chat::ParsedMessage msg = chat::parse_completion(text, chat::ThinkingMode::chat);
            EXPECT_TRUE(msg.errors.empty()) << msg.errors.front();
            EXPECT_TRUE(msg.content.empty()) << msg.content;
            ASSERT_FALSE(msg.tool_calls.empty());
            if (!parallel) {
                EXPECT_EQ(msg.tool_calls.size(), 1u);
            }
            for (const auto& call : msg.tool_calls) {
                const json args = json::parse(call.arguments);
                ASSERT_TRUE(args.is_object());
                if (call.name == "get_weather") {
                    EXPECT_TRUE(args.contains("city") && args["city"].is_string());
                    EXPECT_TRUE(args.contains("days") && args["days"].is_number_integer());
                    EXPECT_TRUE(!args.contains("unit") || args["unit"] == "C" || args["unit"] == "F");
                } else {
                    EXPECT_EQ(call.name, "ping");
                    EXPECT_TRUE(args.empty());
                }
            }
        }
    }
}

TEST(Grammar, WhatCannotCompileIsAGrammarError) {
    OutputConstraint c = json_constraint(json::parse(R"({"type": "frobnicate"})"));
    try {
        compiler().compile(c);
        ADD_FAILURE() << "an unknown type compiled";
    } catch (const runtime::GrammarError& e) {
        // The engine's message, without its time stamp and source position.
        const std::string what = e.what();
        EXPECT_NE(what.find("frobnicate"), std::string::npos) << what;
        EXPECT_EQ(what.find(".cc:"), std::string::npos) << what;
        EXPECT_NE(what.front(), '[') << what;
    }
    c.kind = OutputConstraint::Kind::Regex;
    c.pattern = "(unclosed";
    EXPECT_THROW(compiler().compile(c), runtime::GrammarError);
    c.kind = OutputConstraint::Kind::Grammar;
    c.pattern = "root ::= undefined_rule";
    EXPECT_THROW(compiler().compile(c), runtime::GrammarError);
    c.kind = OutputConstraint::Kind::ToolCalls;
    c.tools = json::array();
    EXPECT_THROW(compiler().compile(c), runtime::GrammarError);
    // Hostile schemas the size bound lets through: each is a GrammarError, never a crash or a hang.
    for (const char* schema : {R"({"$ref": "#/$defs/missing"})",
                               R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
                               R"({"type": "string", "pattern": "(unclosed"})",
                               R"({"type": "string", "pattern": "[z-a]"})"}) {
        SCOPED_TRACE(schema);
        EXPECT_THROW(compiler().compile(json_constraint(json::parse(schema))), runtime::GrammarError);
    }
    // A recursive schema with content compiles (a linked list of integers).
    EXPECT_NO_THROW(compiler().compile(json_constraint(json::parse(
        R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
            "next": {"$ref": "#/$defs/node"}}, "required": ["v"]}}, "$ref": "#/$defs/node"})"))));
    // The same constraint compiles once: the second call returns the cached grammar.
    OutputConstraint ok = json_constraint(json::parse(R"({"type": "boolean"})"));
    EXPECT_EQ(compiler().compile(ok).get(), compiler().compile(ok).get());
}

// JSON forbids raw control characters (U+0000-U+001F) inside strings; xgrammar 0.2.9 admitted them in strings with
// minLength / maxLength (cmake/xgrammar.cmake fixes that). Inside an open string no allowed token may carry one
// before the string's closing quote, whatever bounds the string has.
TEST(Grammar, StringsNeverAllowRawControlCharacters) {
    const char* const schemas[] = {
        R"({"type": "string"})", R"({"type": "string", "maxLength": 6})", R"({"type": "string", "minLength": 2})",
        R"({"type": "string", "minLength": 1, "maxLength": 40})", R"({"type": "string", "pattern": "[^a]*"})",
        R"({"type": "object", "properties": {"k": {"type": "string", "maxLength": 3}}, "required": ["k"]})"};
    std::vector<uint32_t> mask(size_t(token_mask_words(kModelVocab)));
    for (const char* schema : schemas) {
        SCOPED_TRACE(schema);
        auto m = compiler().start(compiler().compile(json_constraint(json::parse(schema))));
        const std::string open = std::string(schema).find("object") != std::string::npos ? R"({"k": ")" : "\"";
        for (int32_t t : tok().encode(open)) ASSERT_TRUE(m->accept(t));
        m->fill_allowed(mask.data(), kModelVocab);
        int allowed_count = 0;
        for (int32_t t = 0; t < int32_t(tok().vocab_size()); ++t) {
            if (!allowed(mask, t) || tok().is_added(t)) continue;
            ++allowed_count;
            const std::string& bytes = tok().token_bytes(t);
            for (unsigned char b : bytes.substr(0, bytes.find('"')))
                EXPECT_GE(b, 0x20) << "token " << t << " puts byte " << int(b) << " inside a JSON string";
        }
        EXPECT_GT(allowed_count, 1000);  // the string's text is open: most tokens continue it
    }
}

// A constraint whose compile runs past the time limit is a GrammarError, and is refused at once when it comes again.
// The engine cannot be interrupted: the compile finishes on its own in the background.
TEST(Grammar, CompilePastTheTimeLimitIsRefused) {
    runtime::CompileLimits limits;
    limits.time_limit_s = 0.05;
    const ConstraintCompiler limited(tok(), kModelVocab, tok().eos_id(), limits);
    // Alternatives of counted repetitions: xgrammar computes a token mask for every repetition state, 120 x 30 of
    // them here (about 2 s on an idle core; far more than the limit on any machine).
    json alternatives = json::array();
    for (int i = 0; i < 120; ++i)
        alternatives.push_back({{"type", "string"}, {"pattern", fmt::format("p{}[a-z]{{3,30}}", i)}});
    const OutputConstraint slow = json_constraint(json{{"anyOf", alternatives}});
    try {
        limited.compile(slow);
        ADD_FAILURE() << "compiled within " << limits.time_limit_s << " s";
    } catch (const runtime::GrammarError& e) {
        EXPECT_NE(std::string(e.what()).find("did not compile within"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(limited.compiling());
    try {
        limited.compile(slow);
        ADD_FAILURE() << "an overrun constraint compiled when it came again";
    } catch (const runtime::GrammarError& e) {
        EXPECT_NE(std::string(e.what()).find("tried before"), std::string::npos) << e.what();
    }
    // Not left burning a core under the tests after this one.
    for (int i = 0; i < 60000 && limited.compiling(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(limited.compiling());
}
