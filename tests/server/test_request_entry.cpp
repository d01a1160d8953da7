// The request entry without a socket: every file of the fuzz corpus (seeds and past findings, fuzz_corpus/) goes
// through the same checks the libFuzzer target applies (request_entry_check.h), findings keep their expected
// answer, and /detokenize and /tokenize agree with the tokenizer. Random token ids use a fresh seed per run.
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
