// Byte-level BPE model: vocabulary keyed by raw bytes, merges in a flat rank table, and the merge loop of HF
// `tokenizers` (lowest rank first, leftmost on ties) with a per-thread word cache.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace flashseek::tokenizer {

// GPT-2 byte ↔ unicode alphabet used by ByteLevel vocabularies ("Ġ" = space, "Ċ" = newline).
std::uint32_t byte_to_unicode(std::uint8_t b);
// Maps a vocabulary string back to raw bytes; false if some character is outside the byte alphabet.
bool byte_level_to_bytes(std::string_view token, std::string* bytes);

struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
public:
    // vocab: byte-level strings → id; merges: pairs of byte-level strings in rank order. `where` names the JSON key.
    BpeModel(const std::vector<std::pair<std::string, TokenId>>& vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
             const std::string& where);

    // Appends the ids of one pre-tokenized piece (raw bytes).
    void encode_piece(std::string_view bytes, std::vector<TokenId>& out) const;

    // The merge loop itself, without cache; `heap_threshold` selects the O(n log n) heap variant for words of at least
    // that many symbols (exposed so tests can check both variants agree).
    void merge_word(std::string_view bytes, std::vector<TokenId>& out, std::size_t heap_threshold) const;

    const std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>& vocab_by_bytes() const {
        return by_bytes_;
    }

private:
    struct MergeEntry {
        std::uint64_t key = ~0ULL;  // (left << 32) | right; ~0 marks an empty slot
        std::int32_t rank = 0;
        TokenId merged = 0;
    };
    const MergeEntry* find_merge(TokenId left, TokenId right) const;
    void merge_small(std::vector<TokenId>& symbols) const;
    void merge_heap(std::vector<TokenId>& symbols) const;

    std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> by_bytes_;
    TokenId byte_ids_[256];
    std::vector<MergeEntry> merge_table_;
    std::uint64_t merge_mask_ = 0;
    bool ignore_merges_ = false;
    std::uint64_t instance_id_ = 0;  // keys the per-thread cache so that two models never share entries
};

}  // namespace flashseek::tokenizer
