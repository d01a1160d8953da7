// The hand-written DeepSeek splitter against PCRE2 running the same three regexes, on random strings drawn from a
// pool of characters of every relevant class (fresh seed per run, printed on failure). PCRE2 10.42 follows Unicode 14
// and treats U+0085 as non-space, unlike HF (Unicode 16, White_Space); pool characters on which PCRE2's \p classes
// disagree with our tables are left out here; HF itself is the oracle for them in test_hf_identity.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tokenizer/deepseek_splitter.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace flashseek {
namespace {

using namespace tokenizer;

const nlohmann::json& v4_pretokenizer_json() {
    static const nlohmann::json j = nlohmann::json::parse(test::read_text(test::v4_tokenizer_path()))["pre_tokenizer"];
    return j;
}

// Whether PCRE2 (UCP) puts cp in the same \p{L} \p{M} \p{N} \p{P} \p{S} \s classes as our generated tables.
bool pcre2_agrees(std::uint32_t cp) {
    static const char* const classes[] = {"^\\p{L}$", "^\\p{M}$", "^\\p{N}$", "^\\p{P}$", "^\\p{S}$", "^\\s$"};
    static const std::uint8_t flags[] = {unicode::kLetter, unicode::kMark,   unicode::kNumber,
                                         unicode::kPunct,  unicode::kSymbol, unicode::kWhiteSpace};
    std::string s;
    utf8::append(s, cp);
    for (int k = 0; k < 6; ++k) {
        int err;
        PCRE2_SIZE off;
        pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(classes[k]), PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
        const bool m = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >= 0;
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (m != ((unicode::flags(cp) & flags[k]) != 0)) return false;
    }
    return true;
}

std::vector<std::uint32_t> character_pool() {
    std::vector<std::uint32_t> pool;
    for (std::uint32_t c = 0x09; c <= 0x7E; ++c) pool.push_back(c);  // all ASCII classes incl. \t \n \v \f \r
    for (std::uint32_t c : {0x85u, 0xA0u, 0xADu, 0xB2u, 0xBDu, 0xD7u, 0xE9u, 0x0301u, 0x0308u, 0x0410u, 0x0451u,
                            0x0627u, 0x064Bu, 0x0660u, 0x0915u, 0x093Fu, 0x094Du, 0x0966u, 0x0E01u, 0x0E31u, 0x0E48u,
                            0x1100u, 0x1680u, 0x2000u, 0x200Bu, 0x200Du, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x20ACu,
                            0x2160u, 0x2460u, 0x3000u, 0x3001u, 0x3002u, 0x3007u, 0x3040u, 0x3041u, 0x3099u, 0x309Bu,
                            0x309Fu, 0x30A0u, 0x30A2u, 0x30FBu, 0x30FCu, 0x30FFu, 0x4E00u, 0x4E2Du, 0x9FA5u, 0x9FA6u,
                            0xAC00u, 0xE000u, 0xFE0Fu, 0xFF01u, 0xFF10u, 0xFF5Cu, 0x1F600u, 0x1F3FDu, 0x1F1EBu,
                            0x1D7D9u, 0x20000u, 0xE0041u, 0x10FFFDu})
        pool.push_back(c);
    std::vector<std::uint32_t> kept;
    for (auto c : pool)
        if (pcre2_agrees(c)) kept.push_back(c);
    return kept;
}

TEST(DeepSeekSplitter, RecognisesTheThreePatternsOfTheV4File) {
    const auto pt = PreTokenizer::from_json(v4_pretokenizer_json(), "pre_tokenizer");
    EXPECT_TRUE(pt.uses_hand_written_splitter());
    const auto& list = v4_pretokenizer_json()["pretokenizers"];
    EXPECT_EQ(list[0]["pattern"]["Regex"].get<std::string>(), kDeepSeekDigitsPattern);
    EXPECT_EQ(list[1]["pattern"]["Regex"].get<std::string>(), kDeepSeekCjkPattern);
    EXPECT_EQ(list[2]["pattern"]["Regex"].get<std::string>(), kDeepSeekMainPattern);
}

TEST(DeepSeekSplitter, MatchesPcre2OnRandomStrings) {
    const auto pool = character_pool();
    ASSERT_GT(pool.size(), 150u);
    const auto fast = PreTokenizer::from_json(v4_pretokenizer_json(), "pre_tokenizer");
    const auto oracle = PreTokenizer::from_json_pcre2_only(v4_pretokenizer_json(), "pre_tokenizer");
    ASSERT_FALSE(oracle.uses_hand_written_splitter());
    const std::uint64_t seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    std::vector<Piece> a, b;
    for (int iter = 0; iter < 20000; ++iter) {
        std::string s;
        const int len = static_cast<int>(rng() % 24) + 1;
        for (int k = 0; k < len; ++k) {
            // Runs of one character make digit groups, whitespace runs and letter runs likely.
            const std::uint32_t c = pool[rng() % pool.size()];
            const int repeat = rng() % 4 == 0 ? static_cast<int>(rng() % 5) + 1 : 1;
            for (int r = 0; r < repeat; ++r) utf8::append(s, c);
        }
        fast.split(s, a);
        oracle.split(s, b);
        const bool same = a.size() == b.size() &&
                          std::equal(a.begin(), a.end(), b.begin(), [](const Piece& x, const Piece& y) {
                              return x.begin == y.begin && x.end == y.end;
                          });
        if (!same) {
            auto show = [&](const std::vector<Piece>& v) {
                nlohmann::json j = nlohmann::json::array();
                for (const auto& p : v) j.push_back(s.substr(p.begin, p.end - p.begin));
                return j.dump();
            };
            FAIL() << "seed " << seed << " iteration " << iter << " input " << nlohmann::json(s).dump()
                   << "\n hand-written: " << show(a) << "\n pcre2:        " << show(b);
        }
    }
}

TEST(PreTokenizer, SplitBehaviorsAndInvertFollowHf) {
    auto split = [](const char* behavior, bool invert, const std::string& text) {
        nlohmann::json j = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
        const auto pt = PreTokenizer::from_json(j, "t");
        std::vector<Piece> pieces;
        pt.split(text, pieces);
        std::vector<std::string> out;
        for (const auto& p : pieces) out.push_back(text.substr(p.begin, p.end - p.begin));
        return out;
    };
    using V = std::vector<std::string>;
    // Expected values are those of HF's documented examples for "the-final--countdown".
    EXPECT_EQ(split("Removed", false, "the-final--countdown"), (V{"the", "final", "countdown"}));
    EXPECT_EQ(split("Isolated", false, "the-final--countdown"), (V{"the", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(split("MergedWithPrevious", false, "the-final--countdown"), (V{"the-", "final-", "-", "countdown"}));
    EXPECT_EQ(split("MergedWithNext", false, "the-final--countdown"), (V{"the", "-final", "-", "-countdown"}));
    EXPECT_EQ(split("Contiguous", false, "the-final--countdown"), (V{"the", "-", "final", "--", "countdown"}));
    EXPECT_EQ(split("Removed", true, "the-final--countdown"), (V{"-", "-", "-"}));
}

TEST(PreTokenizer, UnknownTypesAndBadRegexesGiveClearErrors) {
    auto expect_error = [](const nlohmann::json& j, const std::string& needle) {
        try {
            PreTokenizer::from_json(j, "tokenizer.json: pre_tokenizer");
            ADD_FAILURE() << "accepted " << j.dump();
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error({{"type", "Metaspace"}}, "unsupported pre-tokenizer type 'Metaspace'");
    expect_error({{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}}}}, "pretokenizers[0].type");
    expect_error({{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}, "invalid regex");
    expect_error({{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}}, "behavior");
    expect_error({{"type", "Split"}, {"pattern", 5}, {"behavior", "Isolated"}}, "pattern");
    expect_error({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "add_prefix_space");
    expect_error({{"kind", "Split"}}, "type");
}

}  // namespace
}  // namespace flashseek
