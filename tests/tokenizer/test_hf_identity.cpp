// Identity with HF tokenizers: ids of the >1 MB oracle corpus (14 scripts, code, numbers, whitespace, CRLF, emoji
// ZWJ sequences, combining marks, every code point of planes 0/1/14) and decode(encode(x)) == x.
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace flashseek {
namespace {

using tokenizer::TokenId;

TEST(TokenizerHf, SanityVectorsFromSpec) {
    const auto& tok = test::v4();
    EXPECT_EQ(tok.encode("Hello, world!"), (std::vector<TokenId>{19923, 14, 2058, 3}));
    EXPECT_EQ(tok.encode(" "), (std::vector<TokenId>{223}));
    EXPECT_EQ(tok.encode("\n"), (std::vector<TokenId>{201}));
    EXPECT_EQ(tok.encode("123"), (std::vector<TokenId>{6895}));
    EXPECT_EQ(tok.vocab_size(), 129280u);
    EXPECT_EQ(tok.bos_id(), 0);
    EXPECT_EQ(tok.eos_id(), 1);
    EXPECT_EQ(tok.require_added("<think>"), 128821);
    EXPECT_EQ(tok.require_added("</think>"), 128822);
    EXPECT_EQ(tok.require_added("｜DSML｜"), 128825);
    EXPECT_EQ(tok.require_added("<｜User｜>"), 128803);
    EXPECT_EQ(tok.require_added("<｜Assistant｜>"), 128804);
    EXPECT_EQ(tok.added_tokens().size(), 1283u);
    // `<｜DSML｜invoke` is '<' + ｜DSML｜ + ... (the special token excludes the angle bracket).
    const auto ids = tok.encode_with_specials("<｜DSML｜invoke");
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids[0], 30);
    EXPECT_EQ(ids[1], 128825);
    EXPECT_EQ(tok.id_to_token(2058), "Ġworld");
    EXPECT_EQ(tok.token_to_id("Ġworld"), 2058);
    EXPECT_FALSE(tok.token_to_id("definitely not a token").has_value());
}

TEST(TokenizerHf, CorpusIdenticalToHfTokenizers) {
    const std::string dir = test::temp_dir("hf_oracle");
    const std::string cmd = std::string(FLASHSEEK_PYTHON) + " " + test::source_path("scripts/tokenizer_hf_oracle.py") +
                            " --tokenizer '" + test::v4_tokenizer_path() + "' --out '" + dir + "'";
    const auto oracle = test_support::run_command(cmd);
    ASSERT_EQ(oracle.exit_code, 0) << "oracle failed (is the `tokenizers` PyPI package installed? "
                                      "scripts/install_deps.sh installs it):\n" << oracle.output;
    std::cout << oracle.output;
    std::ifstream corpus(dir + "/corpus.jsonl"), expected(dir + "/hf_ids.jsonl");
    std::string line_text, line_ids;
    std::size_t lines = 0, bytes = 0, mismatches = 0;
    const auto& tok = test::v4();
    while (std::getline(corpus, line_text)) {
        ASSERT_TRUE(std::getline(expected, line_ids));
        const std::string text = nlohmann::json::parse(line_text)["text"].get<std::string>();
        const auto want = nlohmann::json::parse(line_ids).get<std::vector<TokenId>>();
        const auto got = tok.encode_with_specials(text);
        ++lines;
        bytes += text.size();
        if (got != want) {
            if (++mismatches <= 5) {
                ADD_FAILURE() << "line " << lines << " differs from HF: " << nlohmann::json(text).dump().substr(0, 300)
                              << "\n  HF:   " << nlohmann::json(want).dump().substr(0, 300)
                              << "\n  ours: " << nlohmann::json(got).dump().substr(0, 300);
            }
            continue;
        }
        const std::string back = tok.decode(got);
        if (back != text && ++mismatches <= 5) ADD_FAILURE() << "decode(encode(x)) != x on line " << lines;
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_GE(bytes, 1u << 20) << "corpus must be at least 1 MB";
    std::cout << "compared " << lines << " texts, " << bytes << " bytes\n";
}

TEST(TokenizerHf, EncodeWithoutSpecialsNeverYieldsAddedTokens) {
    const auto& tok = test::v4();
    for (const auto& a : tok.added_tokens()) {
        const auto ids = tok.encode(a.content);
        for (const TokenId id : ids) ASSERT_FALSE(tok.is_added(id)) << a.content;
        EXPECT_EQ(tok.decode(ids), a.content);
        const auto with = tok.encode_with_specials(a.content);
        ASSERT_EQ(with.size(), 1u) << a.content;
        EXPECT_EQ(with[0], a.id);
    }
}

TEST(TokenizerHf, InvalidUtf8IsRejectedWithOffset) {
    const auto& tok = test::v4();
    for (const std::string& bad : {std::string("ab\xff"), std::string("\xc0\x80"), std::string("x\xed\xa0\x80"),
                                  std::string("\xf4\x90\x80\x80"), std::string("abc\xe4\xb8")}) {
        try {
            tok.encode(bad);
            ADD_FAILURE() << "accepted invalid UTF-8";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("invalid UTF-8"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
        }
        EXPECT_THROW(tok.encode_with_specials(bad), Error);
    }
}

}  // namespace
}  // namespace flashseek
