// BPE merge variants, decoding (lossy U+FFFD like HF), the streaming detokenizer, and malformed tokenizer.json files.
#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_support.h"
#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

namespace flashseek {
namespace {

using tokenizer::IncrementalDecoder;
using tokenizer::TokenId;
using tokenizer::Tokenizer;

// A tiny byte-level tokenizer.json: bytes + a few merges, so the merge order matters and is easy to reason about.
nlohmann::json tiny_tokenizer_json() {
    nlohmann::json vocab = nlohmann::json::object();
    TokenId next = 0;
    for (int b = 0; b < 256; ++b) {
        std::string s;
        tokenizer::utf8::append(s, tokenizer::byte_to_unicode(static_cast<std::uint8_t>(b)));
        vocab[s] = next++;
    }
    for (const char* t : {"ab", "bc", "abc", "aa", "aaaa", "ĠĠ"}) vocab[t] = next++;
    return {{"version", "1.0"},
            {"added_tokens", {{{"id", 300}, {"content", "<ctl>"}, {"special", true}, {"normalized", false}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"},
              {"vocab", vocab},
              {"merges", {"b c", "a b", "ab c", "a a", "aa aa", "Ġ Ġ"}}}}};
}

Tokenizer tiny() { return Tokenizer::from_json_text(tiny_tokenizer_json().dump(), "tiny.json"); }

TEST(Bpe, MergeOrderIsLowestRankFirst) {
    const auto tok = tiny();
    // "abc": (b,c) has rank 0 so it merges before (a,b); "ab"+"c" is never formed, and "abc" needs "ab c".
    const auto ids = tok.encode("abc");
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(tok.id_to_token(ids[0]), "a");
    EXPECT_EQ(tok.id_to_token(ids[1]), "bc");
    EXPECT_EQ(tok.decode(tok.encode("aaaaa")), "aaaaa");
    EXPECT_EQ(tok.encode("aaaaa").size(), 2u);  // aaaa + a (leftmost first)
    EXPECT_EQ(tok.encode_with_specials("x<ctl>y"), (std::vector<TokenId>{tok.token_to_id("x").value(), 300,
                                                                         tok.token_to_id("y").value()}));
    EXPECT_EQ(tok.decode(std::vector<TokenId>{300}), "<ctl>");
    EXPECT_EQ(tok.decode(std::vector<TokenId>{300}, /*skip_special=*/true), "");
}

TEST(Bpe, HeapAndScanVariantsAgree) {
    const auto& tok = test::v4();
    (void)tok;
    // Rebuild the V4 BPE model directly to reach merge_word with both thresholds.
    const auto j = nlohmann::json::parse(test::read_text(test::v4_tokenizer_path()));
    std::vector<std::pair<std::string, TokenId>> vocab;
    for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it)
        vocab.emplace_back(it.key(), it.value().get<TokenId>());
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& m : j["model"]["merges"]) {
        const auto s = m.get<std::string>();
        merges.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
    }
    const tokenizer::BpeModel model(vocab, merges, false, "model");
    const std::uint64_t seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    const std::vector<std::string> atoms = {"a", "b", "e", "th", "in", " ", "  ", "\n", "é", "中", "😀", "ing", "0"};
    for (int iter = 0; iter < 3000; ++iter) {
        std::string word;
        const int n = static_cast<int>(rng() % 40) + 1;
        for (int k = 0; k < n; ++k) word += atoms[rng() % atoms.size()];
        std::vector<TokenId> scan, heap;
        model.merge_word(word, scan, 1u << 30);
        model.merge_word(word, heap, 2);
        ASSERT_EQ(scan, heap) << "seed " << seed << " word " << nlohmann::json(word).dump();
    }
}

TEST(Decode, PartialTokensBecomeReplacementCharactersLikeHf) {
    const auto& tok = test::v4();
    // "中" is E4 B8 AD; its bytes come out of three byte-level tokens when encoded one byte at a time.
    std::vector<TokenId> bytes;
    for (unsigned char c : std::string("中")) {
        std::string s;
        tokenizer::utf8::append(s, tokenizer::byte_to_unicode(c));
        bytes.push_back(tok.token_to_id(s).value());
    }
    EXPECT_EQ(tok.decode(bytes), "中");
    EXPECT_EQ(tok.decode(std::vector<TokenId>{bytes[0], bytes[1]}), "\xEF\xBF\xBD");  // one U+FFFD for E4 B8
    EXPECT_EQ(tok.decode(std::vector<TokenId>{bytes[1]}), "\xEF\xBF\xBD");
    EXPECT_EQ(tokenizer::utf8_lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");
    EXPECT_EQ(tokenizer::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3 x FFFD
    EXPECT_EQ(tokenizer::utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_THROW(tok.decode(std::vector<TokenId>{-1}), Error);
    EXPECT_THROW(tok.decode(std::vector<TokenId>{129280}), Error);
}

TEST(Decode, IncrementalDecoderNeverSplitsACodePointAndMatchesDecode) {
    const auto& tok = test::v4();
    const std::uint64_t seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    const std::vector<std::string> samples = {"中文测试，混合 English 😀👩‍👩‍👧 ok", "Привет, мир!", "नमस्ते दुनिया",
                                              "e\u0301\u0302 ﷽ 𝟙𝟚"};
    for (int iter = 0; iter < 300; ++iter) {
        std::vector<TokenId> ids;
        if (iter % 2 == 0) {
            ids = tok.encode(samples[rng() % samples.size()]);
        } else {  // random ids, including partial byte tokens and control tokens
            const int n = static_cast<int>(rng() % 30) + 1;
            for (int k = 0; k < n; ++k) ids.push_back(static_cast<TokenId>(rng() % tok.vocab_size()));
        }
        for (const bool skip : {false, true}) {
            IncrementalDecoder dec(tok, skip);
            std::string streamed;
            for (const TokenId id : ids) {
                const std::string piece = dec.push(id);
                ASSERT_FALSE(tokenizer::find_invalid_utf8(piece).has_value()) << "seed " << seed;
                streamed += piece;
            }
            streamed += dec.flush();
            ASSERT_EQ(streamed, tok.decode(ids, skip)) << "seed " << seed << " iteration " << iter;
        }
    }
    IncrementalDecoder dec(tok);
    const auto ids = tok.encode("😀");
    std::string out;
    for (std::size_t k = 0; k + 1 < ids.size(); ++k) EXPECT_EQ(dec.push(ids[k]), "");
    EXPECT_EQ(dec.push(ids.back()), "😀");
}

TEST(Encode, ConcurrentCallsFromManyThreadsAgreeWithOneThread) {
    // The word cache and scratch buffers are per thread; a shared Tokenizer must give identical ids everywhere.
    const auto& tok = test::v4();
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i)
        texts.push_back("Sample " + std::to_string(i * 7919) + " 中文テキスト Привет 😀 e\u0301  \r\n code(x) + y_" + std::to_string(i));
    std::vector<std::vector<TokenId>> expected;
    for (const auto& t : texts) expected.push_back(tok.encode(t));
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int th = 0; th < 4; ++th)
        threads.emplace_back([&, th] {
            for (int rep = 0; rep < 20; ++rep)
                for (std::size_t i = 0; i < texts.size(); ++i) {
                    const std::size_t k = (i + static_cast<std::size_t>(th) * 13) % texts.size();
                    if (tok.encode(texts[k]) != expected[k]) ++mismatches;
                }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

TEST(LoadErrors, MalformedTokenizerJsonNamesTheKey) {
    auto expect_error = [](const std::string& text, const std::string& needle) {
        try {
            Tokenizer::from_json_text(text, "bad.json");
            ADD_FAILURE() << "accepted: " << text.substr(0, 200);
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
        }
    };
    auto mutate = [](auto fn) {
        auto j = tiny_tokenizer_json();
        fn(j);
        return j.dump();
    };
    expect_error("{not json", "not valid JSON");
    expect_error("[]", "top level");
    expect_error(mutate([](auto& j) { j.erase("model"); }), "missing key 'model'");
    expect_error(mutate([](auto& j) { j["model"]["type"] = "WordPiece"; }), "model.type");
    expect_error(mutate([](auto& j) { j["model"]["vocab"] = 3; }), "model.vocab");
    expect_error(mutate([](auto& j) { j["model"]["vocab"]["a"] = -5; }), "vocab[\"a\"]");
    expect_error(mutate([](auto& j) { j["model"]["merges"].push_back("x"); }), "merges[6]");
    expect_error(mutate([](auto& j) { j["model"]["merges"].push_back("zz q"); }), "not in the vocab");
    expect_error(mutate([](auto& j) { j["model"]["vocab"].erase("a"); }), "byte 0x61");
    expect_error(mutate([](auto& j) { j["model"]["byte_fallback"] = true; }), "byte_fallback");
    expect_error(mutate([](auto& j) { j["added_tokens"][0]["id"] = "x"; }), "added_tokens[0].id");
    expect_error(mutate([](auto& j) { j["added_tokens"][0]["content"] = ""; }), "added_tokens[0].content");
    expect_error(mutate([](auto& j) { j["added_tokens"][0]["lstrip"] = true; }), "lstrip");
    expect_error(mutate([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }), "unsupported normalizer 'NFC'");
    expect_error(mutate([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }), "decoder");
    expect_error(mutate([](auto& j) { j["pre_tokenizer"] = {{"type", "Bert"}}; }), "pre-tokenizer type 'Bert'");
    EXPECT_THROW(Tokenizer::load("/nonexistent/tokenizer.json"), Error);
}

TEST(LoadErrors, TruncatedAndCorruptedFilesNeverCrash) {
    const std::string good = tiny_tokenizer_json().dump();
    const std::uint64_t seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    int rejected = 0;
    for (int iter = 0; iter < 300; ++iter) {
        std::string s = good;
        if (iter % 2) s.resize(rng() % s.size());
        else
            for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng() % 256);
        try {
            const auto t = Tokenizer::from_json_text(s, "corrupt.json");
            (void)t.encode("abc aa");
        } catch (const Error&) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 100) << "seed " << seed;
}

}  // namespace
}  // namespace flashseek
