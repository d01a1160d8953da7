// Added-token matching; see added_tokens.h.
#include "tokenizer/added_tokens.h"

namespace flashseek::tokenizer {

void LiteralMatcher::add(std::string_view content, TokenId id) {
    if (content.empty()) return;
    std::int32_t node = 0;
    for (const char ch : content) {
        const auto c = static_cast<unsigned char>(ch);
        std::int32_t child = -1;
        for (const auto& [label, target] : nodes_[static_cast<std::size_t>(node)].edges)
            if (label == c) child = target;
        if (child < 0) {
            child = static_cast<std::int32_t>(nodes_.size());
            nodes_[static_cast<std::size_t>(node)].edges.emplace_back(c, child);
            nodes_.emplace_back();
        }
        node = child;
    }
    // HF builds the matcher from the token list in order; with duplicate contents the first one wins.
    if (nodes_[static_cast<std::size_t>(node)].token < 0) nodes_[static_cast<std::size_t>(node)].token = id;
    first_byte_[static_cast<unsigned char>(content[0])] = true;
}

std::size_t LiteralMatcher::longest_at(std::string_view text, std::size_t pos, TokenId* id) const {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) return 0;
    std::size_t best = 0;
    std::int32_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::int32_t child = -1;
        for (const auto& [label, target] : nodes_[static_cast<std::size_t>(node)].edges)
            if (label == c) child = target;
        if (child < 0) break;
        node = child;
        if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
            best = i + 1 - pos;
            *id = nodes_[static_cast<std::size_t>(node)].token;
        }
    }
    return best;
}

void AddedTokenSplitter::add(const AddedToken& token) {
    (token.normalized ? normalized_ : raw_).add(token.content, token.id);
}

namespace {
void split_with(const LiteralMatcher& m, std::string_view text, std::uint32_t begin, std::uint32_t end,
                std::vector<TextOrToken>& out) {
    if (m.empty()) {
        if (end > begin) out.push_back({begin, end, -1});
        return;
    }
    const std::string_view view = text.substr(0, end);
    std::uint32_t gap_start = begin;
    std::size_t i = begin;
    while (i < end) {
        TokenId id = -1;
        const std::size_t len = m.longest_at(view, i, &id);
        if (len == 0) {
            ++i;
            continue;
        }
        if (i > gap_start) out.push_back({gap_start, static_cast<std::uint32_t>(i), -1});
        out.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + len), id});
        i += len;
        gap_start = static_cast<std::uint32_t>(i);
    }
    if (end > gap_start) out.push_back({gap_start, end, -1});
}
}  // namespace

void AddedTokenSplitter::split(std::string_view text, std::vector<TextOrToken>& out) const {
    out.clear();
    std::vector<TextOrToken> first;
    split_with(raw_, text, 0, static_cast<std::uint32_t>(text.size()), first);
    for (const auto& part : first) {
        if (part.id >= 0) out.push_back(part);
        else split_with(normalized_, text, part.begin, part.end, out);
    }
}

}  // namespace flashseek::tokenizer
