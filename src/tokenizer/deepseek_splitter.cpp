// Hand-written matchers for the DeepSeek pre-tokenizer regexes; see deepseek_splitter.h for the patterns and why.
#include "tokenizer/deepseek_splitter.h"

#include <vector>

#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace flashseek::tokenizer {

const char* const kDeepSeekDigitsPattern = "\\p{N}{1,3}";
const char* const kDeepSeekCjkPattern = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
const char* const kDeepSeekMainPattern =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

namespace {

using unicode::kLetter;
using unicode::kMark;
using unicode::kNumber;
using unicode::kPunct;
using unicode::kSymbol;
using unicode::kWhiteSpace;

// Decodes text[begin, end) into code points with their flags and byte offsets (offsets has one extra entry = end).
// The text is valid UTF-8 (checked by the caller), so decoding cannot fail.
struct Decoded {
    std::vector<std::uint32_t> cps;
    std::vector<std::uint8_t> flags;
    std::vector<std::uint32_t> offsets;

    void decode(std::string_view text, std::uint32_t begin, std::uint32_t end) {
        cps.clear();
        flags.clear();
        offsets.clear();
        std::uint32_t i = begin;
        while (i < end) {
            std::uint32_t cp;
            const auto c = static_cast<unsigned char>(text[i]);
            std::size_t len = 1;
            if (c < 0x80) {
                cp = c;
            } else {
                len = utf8::decode_one(text, i, &cp);
                if (len == 0) {  // unreachable for validated input; treat the byte as an unassigned code point
                    cp = 0xFFFFFFFF;
                    len = 1;
                }
            }
            cps.push_back(cp);
            flags.push_back(unicode::flags(cp));
            offsets.push_back(i);
            i += static_cast<std::uint32_t>(len);
        }
        offsets.push_back(end);
    }
};

// ASCII flags for the fast path: avoids the table lookup for the common case.
std::uint8_t ascii_flags(unsigned char c) { return unicode::flags(c); }

class DigitsMatcher final : public Matcher {
public:
    void find(std::string_view text, std::uint32_t begin, std::uint32_t end, std::vector<Piece>& out) const override {
        std::uint32_t i = begin;
        std::uint32_t run_start = 0, run_chars = 0;
        bool in_run = false;
        while (i < end) {
            std::uint32_t cp;
            const auto c = static_cast<unsigned char>(text[i]);
            std::size_t len = 1;
            std::uint8_t f;
            if (c < 0x80) {
                f = ascii_flags(c);
            } else {
                len = utf8::decode_one(text, i, &cp);
                if (len == 0) len = 1, cp = 0xFFFFFFFF;
                f = unicode::flags(cp);
            }
            if (f & kNumber) {
                if (!in_run) in_run = true, run_start = i, run_chars = 0;
                ++run_chars;
                if (run_chars == 3) {
                    out.push_back({run_start, i + static_cast<std::uint32_t>(len)});
                    in_run = false;
                }
            } else if (in_run) {
                out.push_back({run_start, i});
                in_run = false;
            }
            i += static_cast<std::uint32_t>(len);
        }
        if (in_run) out.push_back({run_start, end});
    }
};

bool in_cjk_class(std::uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

class CjkMatcher final : public Matcher {
public:
    void find(std::string_view text, std::uint32_t begin, std::uint32_t end, std::vector<Piece>& out) const override {
        std::uint32_t i = begin;
        bool in_run = false;
        std::uint32_t run_start = 0;
        while (i < end) {
            const auto c = static_cast<unsigned char>(text[i]);
            std::uint32_t cp = c;
            std::size_t len = 1;
            if (c >= 0x80) {
                len = utf8::decode_one(text, i, &cp);
                if (len == 0) len = 1, cp = 0xFFFFFFFF;
            }
            if (c >= 0xE3 && in_cjk_class(cp)) {
                if (!in_run) in_run = true, run_start = i;
            } else if (in_run) {
                out.push_back({run_start, i});
                in_run = false;
            }
            i += static_cast<std::uint32_t>(len);
        }
        if (in_run) out.push_back({run_start, end});
    }
};

bool is_ascii_punct(std::uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}
bool is_ascii_letter(std::uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool is_crlf(std::uint32_t c) { return c == '\r' || c == '\n'; }

class MainMatcher final : public Matcher {
public:
    void find(std::string_view text, std::uint32_t begin, std::uint32_t end, std::vector<Piece>& out) const override {
        thread_local Decoded d;
        d.decode(text, begin, end);
        const std::size_t n = d.cps.size();
        const auto& cp = d.cps;
        const auto& fl = d.flags;
        std::size_t i = 0;
        while (i < n) {
            const std::size_t m = match_at(cp, fl, i, n);
            if (m > i) {
                out.push_back({d.offsets[i], d.offsets[m]});
                i = m;
            } else {
                ++i;  // no alternative matches here: the character joins the gap before the next match
            }
        }
    }

private:
    // End index of the match starting at i, or i if none of the alternatives matches.
    static std::size_t match_at(const std::vector<std::uint32_t>& cp, const std::vector<std::uint8_t>& fl,
                                std::size_t i, std::size_t n) {
        const std::uint32_t c = cp[i];
        const std::uint8_t f = fl[i];
        // 1. [!"#...~][A-Za-z]+
        if (is_ascii_punct(c) && i + 1 < n && is_ascii_letter(cp[i + 1])) {
            std::size_t j = i + 2;
            while (j < n && is_ascii_letter(cp[j])) ++j;
            return j;
        }
        // 2. [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+   (optional char first; backtracks to no optional char)
        if (!is_crlf(c) && !(f & (kLetter | kPunct | kSymbol)) && i + 1 < n && (fl[i + 1] & (kLetter | kMark))) {
            std::size_t j = i + 2;
            while (j < n && (fl[j] & (kLetter | kMark))) ++j;
            return j;
        }
        if (f & (kLetter | kMark)) {
            std::size_t j = i + 1;
            while (j < n && (fl[j] & (kLetter | kMark))) ++j;
            return j;
        }
        // 3.  ?[\p{P}\p{S}]+[\r\n]*
        {
            std::size_t j = i;
            if (c == ' ' && i + 1 < n && (fl[i + 1] & (kPunct | kSymbol))) j = i + 1;
            if (fl[j] & (kPunct | kSymbol)) {
                ++j;
                while (j < n && (fl[j] & (kPunct | kSymbol))) ++j;
                while (j < n && is_crlf(cp[j])) ++j;
                return j;
            }
        }
        if (!(f & kWhiteSpace)) return i;
        std::size_t q = i + 1;  // end of the whitespace run
        while (q < n && (fl[q] & kWhiteSpace)) ++q;
        // 4. \s*[\r\n]+  : ends right after the last CR/LF of the run
        for (std::size_t k = q; k > i; --k) {
            if (is_crlf(cp[k - 1])) return k;
        }
        // 5. \s+(?!\S)   : the whole run at the end of the piece, else all but its last character
        if (q == n) return q;
        if (q - i >= 2) return q - 1;
        // 6. \s+
        return q;
    }
};

}  // namespace

std::unique_ptr<Matcher> make_deepseek_matcher(const std::string& pattern) {
    if (pattern == kDeepSeekDigitsPattern) return std::make_unique<DigitsMatcher>();
    if (pattern == kDeepSeekCjkPattern) return std::make_unique<CjkMatcher>();
    if (pattern == kDeepSeekMainPattern) return std::make_unique<MainMatcher>();
    return nullptr;
}

}  // namespace flashseek::tokenizer
