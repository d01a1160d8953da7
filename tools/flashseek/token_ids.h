// Parsing whitespace-separated token ids for the CLI (token files, --prompt-tokens); errors name the option/file
// and the position of the bad token.
#pragma once
#include <climits>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "util/error.h"

namespace flashseek::cli {

// `source` names where the ids come from in error messages, e.g. "--tokens (file 'a.txt')".
inline std::vector<int32_t> parse_token_ids(std::istream& in, const std::string& source) {
    std::vector<int32_t> ids;
    std::string word;
    while (in >> word) {
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(word, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        FS_CHECK(used == word.size() && used > 0, "{}: '{}' (token {}) is not an integer", source, word, ids.size());
        FS_CHECK(v >= 0 && v <= INT32_MAX, "{}: token id {} (token {}) is negative or too large", source, v,
                 ids.size());
        ids.push_back(int32_t(v));
    }
    FS_CHECK(!ids.empty(), "{}: no token ids given", source);
    return ids;
}

}  // namespace flashseek::cli
