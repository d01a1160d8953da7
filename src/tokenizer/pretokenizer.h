// The pre-tokenizer of a tokenizer.json: a Sequence of Split (regex or literal, any HF behavior, invert) and
// ByteLevel stages that cuts text into pieces (byte ranges) which BPE then encodes independently. The three DeepSeek
// Split regexes are recognised and run by hand-written matchers (deepseek_splitter.h); any other regex runs on PCRE2.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace flashseek::tokenizer {

struct Piece {
    std::uint32_t begin = 0;
    std::uint32_t end = 0;
};

// Finds the non-overlapping leftmost matches of one pattern inside text[begin, end), in order.
class Matcher {
public:
    virtual ~Matcher() = default;
    virtual void find(std::string_view text, std::uint32_t begin, std::uint32_t end, std::vector<Piece>& out) const = 0;
};

// PCRE2 (UTF + UCP) matcher for arbitrary Split regexes; also the test oracle for the hand-written splitter.
std::unique_ptr<Matcher> make_pcre2_matcher(const std::string& pattern, const std::string& where);

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class PreTokenizer {
public:
    // `where` names the JSON location for error messages (e.g. "tokenizer.json: pre_tokenizer").
    static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);
    // Pre-tokenizer that uses PCRE2 even for the DeepSeek patterns (test oracle).
    static PreTokenizer from_json_pcre2_only(const nlohmann::json& j, const std::string& where);

    // Appends the pieces of text (valid UTF-8) to `out` (cleared first).
    void split(std::string_view text, std::vector<Piece>& out) const;
    bool uses_hand_written_splitter() const;

    struct Stage {
        std::shared_ptr<const Matcher> matcher;
        SplitBehavior behavior = SplitBehavior::isolated;
        bool invert = false;
        bool hand_written = false;
    };

private:
    std::vector<Stage> stages_;
};

}  // namespace flashseek::tokenizer
