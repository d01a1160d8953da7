// Byte-level BPE encoding; see bpe.h. The merge order reproduces HF tokenizers' Word::merge_all: the pair with the
// lowest merge rank is merged first, the leftmost one when several pairs share that rank.
#include "tokenizer/bpe.h"

#include <atomic>
#include <queue>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace flashseek::tokenizer {

namespace {

struct ByteAlphabet {
    std::uint32_t to_unicode[256];
    std::unordered_map<std::uint32_t, std::uint8_t> to_byte;
    ByteAlphabet() {
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_unicode[b] = printable ? static_cast<std::uint32_t>(b) : static_cast<std::uint32_t>(256 + extra++);
            to_byte[to_unicode[b]] = static_cast<std::uint8_t>(b);
        }
    }
};
const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

std::uint64_t hash_key(std::uint64_t key) { return (key * 0x9E3779B97F4A7C15ULL) >> 17; }

std::atomic<std::uint64_t> next_instance_id{1};

constexpr std::size_t kCacheMaxWordBytes = 256;
constexpr std::size_t kCacheMaxEntries = 1 << 17;

struct WordCache {
    std::uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> map;
};

}  // namespace

std::uint32_t byte_to_unicode(std::uint8_t b) { return alphabet().to_unicode[b]; }

bool byte_level_to_bytes(std::string_view token, std::string* bytes) {
    bytes->clear();
    const auto& a = alphabet();
    std::size_t i = 0;
    while (i < token.size()) {
        std::uint32_t cp;
        const std::size_t len = utf8::decode_one(token, i, &cp);
        if (len == 0) return false;
        const auto it = a.to_byte.find(cp);
        if (it == a.to_byte.end()) return false;
        bytes->push_back(static_cast<char>(it->second));
        i += len;
    }
    return true;
}

BpeModel::BpeModel(const std::vector<std::pair<std::string, TokenId>>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   const std::string& where)
    : ignore_merges_(ignore_merges), instance_id_(next_instance_id.fetch_add(1)) {
    std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> by_string;
    by_string.reserve(vocab.size());
    by_bytes_.reserve(vocab.size());
    std::string bytes;
    for (const auto& [token, id] : vocab) {
        by_string.emplace(token, id);
        // Tokens outside the byte alphabet (e.g. "<｜begin▁of▁sentence｜>" listed in the vocab) can never come out of
        // the byte-level merges, so they are simply not reachable through by_bytes_.
        if (byte_level_to_bytes(token, &bytes)) by_bytes_.emplace(bytes, id);
    }
    for (int b = 0; b < 256; ++b) {
        std::string s;
        utf8::append(s, byte_to_unicode(static_cast<std::uint8_t>(b)));
        const auto it = by_string.find(s);
        FS_CHECK(it != by_string.end(), "{}.vocab: no token for byte 0x{:02X} ('{}'); a byte-level BPE needs all 256",
                 where, b, s);
        byte_ids_[b] = it->second;
    }
    std::size_t capacity = 16;
    while (capacity < merges.size() * 2) capacity <<= 1;
    merge_table_.assign(capacity, MergeEntry{});
    merge_mask_ = capacity - 1;
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [left, right] = merges[rank];
        const auto l = by_string.find(left);
        const auto r = by_string.find(right);
        const auto m = by_string.find(left + right);
        FS_CHECK(l != by_string.end(), "{}.merges[{}]: token '{}' is not in the vocab", where, rank, left);
        FS_CHECK(r != by_string.end(), "{}.merges[{}]: token '{}' is not in the vocab", where, rank, right);
        FS_CHECK(m != by_string.end(), "{}.merges[{}]: merged token '{}' is not in the vocab", where, rank,
                 left + right);
        const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l->second)) << 32) |
                                  static_cast<std::uint32_t>(r->second);
        std::uint64_t slot = hash_key(key) & merge_mask_;
        while (merge_table_[slot].key != ~0ULL && merge_table_[slot].key != key) slot = (slot + 1) & merge_mask_;
        if (merge_table_[slot].key == key) continue;  // duplicate pair: HF keeps the first (lowest) rank
        merge_table_[slot] = {key, static_cast<std::int32_t>(rank), m->second};
    }
}

const BpeModel::MergeEntry* BpeModel::find_merge(TokenId left, TokenId right) const {
    const std::uint64_t key =
        (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
    std::uint64_t slot = hash_key(key) & merge_mask_;
    while (true) {
        const MergeEntry& e = merge_table_[slot];
        if (e.key == key) return &e;
        if (e.key == ~0ULL) return nullptr;
        slot = (slot + 1) & merge_mask_;
    }
}

void BpeModel::merge_small(std::vector<TokenId>& symbols) const {
    // ranks[k] is the rank of the pair (symbols[k], symbols[k+1]), or INT32_MAX when it cannot merge.
    constexpr std::int32_t kNone = INT32_MAX;
    std::vector<std::int32_t> ranks(symbols.size(), kNone);
    std::vector<TokenId> merged(symbols.size(), 0);
    auto update = [&](std::size_t k) {
        if (k + 1 >= symbols.size()) return;
        const MergeEntry* e = find_merge(symbols[k], symbols[k + 1]);
        ranks[k] = e ? e->rank : kNone;
        merged[k] = e ? e->merged : 0;
    };
    for (std::size_t k = 0; k + 1 < symbols.size(); ++k) update(k);
    while (symbols.size() > 1) {
        std::size_t best = 0;
        std::int32_t best_rank = kNone;
        for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
            if (ranks[k] < best_rank) best_rank = ranks[k], best = k;
        }
        if (best_rank == kNone) break;
        symbols[best] = merged[best];
        symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        ranks[best] = kNone;
        update(best);
        if (best > 0) update(best - 1);
    }
}

void BpeModel::merge_heap(std::vector<TokenId>& symbols) const {
    // Linked list over the initial symbol positions plus a min-heap of (rank, position) candidates, as in HF.
    const std::size_t n = symbols.size();
    std::vector<std::int64_t> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (std::size_t k = 0; k < n; ++k) {
        prev[k] = static_cast<std::int64_t>(k) - 1;
        next[k] = k + 1 < n ? static_cast<std::int64_t>(k + 1) : -1;
    }
    struct Candidate {
        std::int32_t rank;
        std::size_t pos;
        TokenId merged;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto push = [&](std::size_t k) {
        if (next[k] < 0) return;
        if (const MergeEntry* e = find_merge(symbols[k], symbols[static_cast<std::size_t>(next[k])]))
            heap.push({e->rank, k, e->merged});
    };
    for (std::size_t k = 0; k + 1 < n; ++k) push(k);
    while (!heap.empty()) {
        const Candidate top = heap.top();
        heap.pop();
        if (!alive[top.pos] || next[top.pos] < 0) continue;
        const auto right = static_cast<std::size_t>(next[top.pos]);
        const MergeEntry* e = find_merge(symbols[top.pos], symbols[right]);
        if (!e || e->merged != top.merged || e->rank != top.rank) continue;  // stale entry
        symbols[top.pos] = top.merged;
        alive[right] = false;
        next[top.pos] = next[right];
        if (next[right] >= 0) prev[static_cast<std::size_t>(next[right])] = static_cast<std::int64_t>(top.pos);
        push(top.pos);
        if (prev[top.pos] >= 0) push(static_cast<std::size_t>(prev[top.pos]));
    }
    std::vector<TokenId> out;
    for (std::int64_t k = 0; k >= 0; k = next[static_cast<std::size_t>(k)]) out.push_back(symbols[static_cast<std::size_t>(k)]);
    symbols.swap(out);
}

void BpeModel::merge_word(std::string_view bytes, std::vector<TokenId>& out, std::size_t heap_threshold) const {
    if (bytes.empty()) return;
    if (ignore_merges_) {
        if (const auto it = by_bytes_.find(bytes); it != by_bytes_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    std::vector<TokenId> symbols(bytes.size());
    for (std::size_t k = 0; k < bytes.size(); ++k) symbols[k] = byte_ids_[static_cast<std::uint8_t>(bytes[k])];
    if (symbols.size() >= heap_threshold) merge_heap(symbols);
    else merge_small(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<TokenId>& out) const {
    constexpr std::size_t kHeapThreshold = 48;
    if (bytes.size() == 1) {
        out.push_back(byte_ids_[static_cast<std::uint8_t>(bytes[0])]);
        return;
    }
    if (bytes.size() > kCacheMaxWordBytes) {
        merge_word(bytes, out, kHeapThreshold);
        return;
    }
    thread_local WordCache cache;
    if (cache.owner != instance_id_) {
        cache.map.clear();
        cache.owner = instance_id_;
    }
    if (const auto it = cache.map.find(bytes); it != cache.map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
    }
    std::vector<TokenId> ids;
    merge_word(bytes, ids, kHeapThreshold);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache.map.size() >= kCacheMaxEntries) cache.map.clear();
    cache.map.emplace(std::string(bytes), std::move(ids));
}

}  // namespace flashseek::tokenizer
