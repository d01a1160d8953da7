// `flashseek tokenize | detokenize | chat-encode` end to end through the built binary.
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace flashseek {
namespace {

std::string run_cli(const std::string& args, const std::string& stdin_text, int* status) {
    const std::string dir = test::temp_dir("cli");
    test::write_text(dir + "/in", stdin_text);
    const auto r = test_support::run_command(
        std::string(FLASHSEEK_BINARY) + " " + args + " < '" + dir + "/in' 2>'" + dir + "/err'", /*with_stderr=*/false);
    *status = r.exit_code;
    return *status != 0 ? r.output + test::read_text(dir + "/err") : r.output;
}

TEST(Cli, TokenizeDetokenizeRoundTrip) {
    const std::string tok = " --tokenizer '" + test::v4_tokenizer_path() + "'";
    int status = 0;
    const std::string out = run_cli("tokenize" + tok,
                                    "{\"text\": \"Hello, world!\"}\n{\"text\": \"<think>x</think>\"}\n{\"text\": \"\"}\n",
                                    &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_EQ(out, "[19923,14,2058,3]\n[128821,90,128822]\n[]\n");
    const std::string back = run_cli("detokenize" + tok, "[19923,14,2058,3]\n[0,128821,90,128822,1]\n", &status);
    ASSERT_EQ(status, 0) << back;
    EXPECT_EQ(back, "{\"text\":\"Hello, world!\"}\n{\"text\":\"<｜begin▁of▁sentence｜><think>x</think><｜end▁of▁sentence｜>\"}\n");
    const std::string skipped = run_cli("detokenize --skip-special-tokens" + tok, "[0,128821,90,1]\n", &status);
    EXPECT_EQ(skipped, "{\"text\":\"<think>x\"}\n");
}

TEST(Cli, BadInputGivesAClearErrorAndNonZeroStatus) {
    const std::string tok = " --tokenizer '" + test::v4_tokenizer_path() + "'";
    int status = 0;
    std::string out = run_cli("tokenize" + tok, "{\"text\": \"ok\"}\n{\"txt\": 1}\n", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("stdin line 2"), std::string::npos) << out;
    out = run_cli("detokenize" + tok, "[1, 999999]\n", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("element 1"), std::string::npos) << out;
    out = run_cli("tokenize --tokenizer /nonexistent.json", "", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("/nonexistent.json"), std::string::npos) << out;
    out = run_cli("chat-encode" + tok, "{\"messages\": [{\"role\": 1}]}", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("messages[0].role"), std::string::npos) << out;
}

TEST(Cli, ChatEncodeMatchesGolden) {
    std::ifstream in(test::source_path("tests/data/tokenizer/chat_golden.jsonl"));
    std::string line;
    int checked = 0;
    while (std::getline(in, line) && checked < 6) {
        const auto c = nlohmann::ordered_json::parse(line);
        int status = 0;
        const std::string out =
            run_cli("chat-encode --tokenizer '" + test::v4_tokenizer_path() + "'", c["request"].dump(), &status);
        ASSERT_EQ(status, 0) << out;
        const auto j = nlohmann::json::parse(out);
        EXPECT_EQ(j["prompt"], c["prompt"]);
        EXPECT_EQ(j["ids"], c["ids"]);
        ++checked;
    }
    EXPECT_EQ(checked, 6);
}

}  // namespace
}  // namespace flashseek
