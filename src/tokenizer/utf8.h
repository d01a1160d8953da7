// Small UTF-8 toolkit: strict decoding (rejects overlongs, surrogates, > U+10FFFF), validation, the lossy U+FFFD
// substitution of Rust's String::from_utf8_lossy (which HF decode uses), and the "how many bytes of a trailing
// incomplete sequence" question the streaming detokenizer asks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashseek::tokenizer::utf8 {

// Length of the valid sequence starting at s[i] (1..4), or 0 if the bytes there are not a complete valid sequence.
// On success *cp receives the code point.
std::size_t decode_one(std::string_view s, std::size_t i, std::uint32_t* cp);

// Length of the longest prefix of s[i..] that is a valid *prefix* of some UTF-8 sequence (used by from_utf8_lossy's
// "maximal subpart" rule): 1 for an invalid lead byte, up to 3 for a truncated sequence.
std::size_t maximal_subpart(std::string_view s, std::size_t i);

void append(std::string& out, std::uint32_t cp);

// Number of bytes at the end of `s` that form an incomplete-but-still-possibly-valid sequence (0..3).
std::size_t incomplete_tail(std::string_view s);

}  // namespace flashseek::tokenizer::utf8
