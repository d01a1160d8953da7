// UTF-8 decoding and the lossy substitution rule; see utf8.h.
#include "tokenizer/utf8.h"

#include "tokenizer/tokenizer.h"

namespace flashseek::tokenizer::utf8 {

namespace {
// Valid range of the second byte for each lead byte (Unicode Table 3-7); other continuation bytes are 80..BF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
    return b >= 0x80 && b <= 0xBF;
}
std::size_t sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}
}  // namespace

std::size_t decode_one(std::string_view s, std::size_t i, std::uint32_t* cp) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const std::size_t len = sequence_length(lead);
    if (len == 0 || i + len > s.size()) return 0;
    if (len == 1) {
        *cp = lead;
        return 1;
    }
    if (!second_byte_ok(lead, static_cast<unsigned char>(s[i + 1]))) return 0;
    std::uint32_t value = lead & (0xFF >> (len + 1));
    for (std::size_t k = 1; k < len; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if ((b & 0xC0) != 0x80) return 0;
        value = (value << 6) | (b & 0x3F);
    }
    *cp = value;
    return len;
}

std::size_t maximal_subpart(std::string_view s, std::size_t i) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const std::size_t len = sequence_length(lead);
    if (len <= 1) return 1;
    std::size_t k = 1;
    for (; k < len && i + k < s.size(); ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        const bool ok = k == 1 ? second_byte_ok(lead, b) : (b & 0xC0) == 0x80;
        if (!ok) break;
    }
    return k;
}

void append(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::size_t incomplete_tail(std::string_view s) {
    // Look back at most 3 bytes for a lead byte whose sequence is cut off by the end of the string.
    const std::size_t n = s.size();
    for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
        const std::size_t start = n - back;
        const auto b = static_cast<unsigned char>(s[start]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        const std::size_t len = sequence_length(b);
        if (len <= back) return 0;  // complete (or invalid) sequence: nothing to hold back
        return maximal_subpart(s, start) == back ? back : 0;
    }
    return 0;
}

}  // namespace flashseek::tokenizer::utf8

namespace flashseek::tokenizer {

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
    std::size_t i = 0;
    const std::size_t n = text.size();
    while (i < n) {
        // ASCII fast path, 8 bytes at a time.
        while (i + 8 <= n) {
            std::uint64_t word;
            __builtin_memcpy(&word, text.data() + i, 8);
            if (word & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        std::uint32_t cp;
        const std::size_t len = utf8::decode_one(text, i, &cp);
        if (len == 0) return i;
        i += len;
    }
    return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    std::size_t i = 0;
    while (i < bytes.size()) {
        std::uint32_t cp;
        const std::size_t len = utf8::decode_one(bytes, i, &cp);
        if (len > 0) {
            out.append(bytes.data() + i, len);
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            i += utf8::maximal_subpart(bytes, i);
        }
    }
    return out;
}

}  // namespace flashseek::tokenizer
