// Hand-written matchers for the three Split regexes of the DeepSeek-V3/V4 pre-tokenizer (docs/model.md §4.1):
//   1. \p{N}{1,3}
//   2. [一-龥぀-ゟ゠-ヿ]+
//   3. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
//      \s*[\r\n]+|\s+(?!\S)|\s+
// They reproduce the backtracking regex semantics exactly (leftmost-first alternation, lookahead limited to the piece)
// over the generated Unicode tables, and are checked against PCRE2 and HF tokenizers in tests/tokenizer.
#pragma once
#include <memory>
#include <string>

#include "tokenizer/pretokenizer.h"

namespace flashseek::tokenizer {

extern const char* const kDeepSeekDigitsPattern;
extern const char* const kDeepSeekCjkPattern;
extern const char* const kDeepSeekMainPattern;

// Returns the hand-written matcher for one of the three patterns above (compared character for character), or null.
std::unique_ptr<Matcher> make_deepseek_matcher(const std::string& pattern);

}  // namespace flashseek::tokenizer
