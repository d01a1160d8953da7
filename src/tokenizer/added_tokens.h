// Literal matching of added tokens in text, as HF's AddedVocabulary does: leftmost-longest matches, first of the
// tokens with "normalized": false over the whole text, then of the "normalized": true tokens over the gaps left
// (with the empty DeepSeek normalizer the text is unchanged between the two passes).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace flashseek::tokenizer {

class LiteralMatcher {
public:
    void add(std::string_view content, TokenId id);
    bool empty() const { return nodes_.size() <= 1; }
    // Longest token starting exactly at text[pos]; returns its length (0 if none) and sets *id.
    std::size_t longest_at(std::string_view text, std::size_t pos, TokenId* id) const;

private:
    struct Node {
        std::vector<std::pair<unsigned char, std::int32_t>> edges;
        TokenId token = -1;
    };
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
};

// A span of the input: either an added token (id >= 0) or text to pre-tokenize (id == -1).
struct TextOrToken {
    std::uint32_t begin = 0, end = 0;
    TokenId id = -1;
};

class AddedTokenSplitter {
public:
    void add(const AddedToken& token);
    void split(std::string_view text, std::vector<TextOrToken>& out) const;

private:
    LiteralMatcher raw_;         // "normalized": false
    LiteralMatcher normalized_;  // "normalized": true
};

}  // namespace flashseek::tokenizer
