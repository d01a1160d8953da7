// Pre-tokenizer pipeline from tokenizer.json (Sequence / Split / ByteLevel) and the PCRE2 matcher; see pretokenizer.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <algorithm>

#include "tokenizer/deepseek_splitter.h"
#include "util/error.h"

namespace flashseek::tokenizer {

namespace {

// The GPT-2 regex that ByteLevel(use_regex=true) applies.
const char* const kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class Pcre2Matcher final : public Matcher {
public:
    Pcre2Matcher(const std::string& pattern, const std::string& where) {
        int error_code = 0;
        PCRE2_SIZE error_offset = 0;
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error_code, &error_offset, nullptr);
        if (!code_) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error_code, message, sizeof(message));
            fail("{}: invalid regex at offset {}: {}", where, error_offset, reinterpret_cast<const char*>(message));
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
    }
    ~Pcre2Matcher() override { pcre2_code_free(code_); }
    Pcre2Matcher(const Pcre2Matcher&) = delete;
    Pcre2Matcher& operator=(const Pcre2Matcher&) = delete;

    void find(std::string_view text, std::uint32_t begin, std::uint32_t end, std::vector<Piece>& out) const override {
        // Match on the piece alone so that lookarounds cannot see past its ends (as HF does).
        const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
        const PCRE2_SIZE length = end - begin;
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
        PCRE2_SIZE pos = 0;
        while (pos <= length) {
            // The input was validated once by the caller.
            const int rc = pcre2_match(code_, subject, length, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                pcre2_match_data_free(md);
                fail("pre-tokenizer regex failed with PCRE2 error {}", rc);
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            if (ov[1] > ov[0]) {
                out.push_back({begin + static_cast<std::uint32_t>(ov[0]), begin + static_cast<std::uint32_t>(ov[1])});
                pos = ov[1];
            } else {  // empty match: step over one character
                pos = ov[1] + 1;
                while (pos < length && (subject[pos] & 0xC0) == 0x80) ++pos;
            }
        }
        pcre2_match_data_free(md);
    }

private:
    pcre2_code* code_ = nullptr;
};

std::string escape_literal(const std::string& s) {
    std::string out = "\\Q";
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s.compare(i, 2, "\\E") == 0) {
            out += "\\E\\\\E\\Q";
            ++i;
        } else {
            out += s[i];
        }
    }
    return out + "\\E";
}

SplitBehavior parse_behavior(const nlohmann::json& j, const std::string& where) {
    FS_CHECK(j.is_string(), "{}.behavior: expected a string", where);
    const auto s = j.get<std::string>();
    if (s == "Removed") return SplitBehavior::removed;
    if (s == "Isolated") return SplitBehavior::isolated;
    if (s == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
    if (s == "MergedWithNext") return SplitBehavior::merged_with_next;
    if (s == "Contiguous") return SplitBehavior::contiguous;
    fail("{}.behavior: unknown split behavior '{}'", where, s);
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    FS_CHECK(j[key].is_boolean(), "{}.{}: expected a boolean", where, key);
    return j[key].get<bool>();
}

void add_stages(const nlohmann::json& j, const std::string& where, bool pcre2_only,
                std::vector<PreTokenizer::Stage>& stages) {
    if (j.is_null()) return;
    FS_CHECK(j.is_object(), "{}: expected an object", where);
    FS_CHECK(j.contains("type") && j["type"].is_string(), "{}.type: missing or not a string", where);
    const auto type = j["type"].get<std::string>();
    if (type == "Sequence") {
        FS_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(),
                 "{}.pretokenizers: missing or not an array", where);
        for (std::size_t i = 0; i < j["pretokenizers"].size(); ++i)
            add_stages(j["pretokenizers"][i], fmt::format("{}.pretokenizers[{}]", where, i), pcre2_only, stages);
    } else if (type == "Split") {
        FS_CHECK(j.contains("pattern") && j["pattern"].is_object(), "{}.pattern: missing or not an object", where);
        const auto& p = j["pattern"];
        std::string regex;
        bool is_literal = false;
        if (p.contains("Regex") && p["Regex"].is_string()) {
            regex = p["Regex"].get<std::string>();
        } else if (p.contains("String") && p["String"].is_string()) {
            regex = escape_literal(p["String"].get<std::string>());
            is_literal = true;
        } else {
            fail("{}.pattern: expected {{\"Regex\": string}} or {{\"String\": string}}", where);
        }
        PreTokenizer::Stage stage;
        FS_CHECK(j.contains("behavior"), "{}.behavior: missing", where);
        stage.behavior = parse_behavior(j["behavior"], where);
        stage.invert = get_bool(j, "invert", false, where);
        if (!pcre2_only && !is_literal) {
            if (auto m = make_deepseek_matcher(regex)) {
                stage.matcher = std::move(m);
                stage.hand_written = true;
            }
        }
        if (!stage.matcher) stage.matcher = make_pcre2_matcher(regex, where + ".pattern");
        stages.push_back(std::move(stage));
    } else if (type == "ByteLevel") {
        // The byte-to-unicode mapping itself lives in the BPE vocabulary handling; only the options matter here.
        FS_CHECK(!get_bool(j, "add_prefix_space", false, where),
                 "{}.add_prefix_space: true is not supported (DeepSeek tokenizers use false)", where);
        if (get_bool(j, "use_regex", true, where)) {
            PreTokenizer::Stage stage;
            stage.matcher = make_pcre2_matcher(kGpt2Pattern, where + " (ByteLevel GPT-2 regex)");
            stage.behavior = SplitBehavior::isolated;
            stages.push_back(std::move(stage));
        }
    } else {
        fail("{}.type: unsupported pre-tokenizer type '{}' (supported: Sequence, Split, ByteLevel)", where, type);
    }
}

}  // namespace

std::unique_ptr<Matcher> make_pcre2_matcher(const std::string& pattern, const std::string& where) {
    return std::make_unique<Pcre2Matcher>(pattern, where);
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
    PreTokenizer p;
    add_stages(j, where, false, p.stages_);
    return p;
}

PreTokenizer PreTokenizer::from_json_pcre2_only(const nlohmann::json& j, const std::string& where) {
    PreTokenizer p;
    add_stages(j, where, true, p.stages_);
    return p;
}

bool PreTokenizer::uses_hand_written_splitter() const {
    for (const auto& s : stages_)
        if (s.hand_written) return true;
    return false;
}

namespace {

// One Split stage applied to one piece, following HF's NormalizedString::split: the matches and the gaps between
// them form an alternating list, `invert` flips which is which, and the behavior decides how they are kept.
void split_piece(const PreTokenizer::Stage& stage, std::string_view text, Piece piece, std::vector<Piece>& matches,
                 std::vector<Piece>& out) {
    matches.clear();
    stage.matcher->find(text, piece.begin, piece.end, matches);
    if (stage.behavior == SplitBehavior::isolated && !stage.invert) {  // the common case, without the generic list
        std::uint32_t prev = piece.begin;
        for (const auto& m : matches) {
            if (m.begin > prev) out.push_back({prev, m.begin});
            out.push_back(m);
            prev = m.end;
        }
        if (prev < piece.end) out.push_back({prev, piece.end});
        return;
    }
    struct Part {
        Piece span;
        bool is_match;
    };
    std::vector<Part> parts;
    std::uint32_t prev = piece.begin;
    for (const auto& m : matches) {
        if (m.begin > prev) parts.push_back({{prev, m.begin}, false});
        parts.push_back({m, true});
        prev = m.end;
    }
    if (prev < piece.end) parts.push_back({{prev, piece.end}, false});
    if (stage.invert)
        for (auto& p : parts) p.is_match = !p.is_match;

    std::vector<Piece> kept;
    switch (stage.behavior) {
        case SplitBehavior::isolated:
            for (const auto& p : parts) kept.push_back(p.span);
            break;
        case SplitBehavior::removed:
            for (const auto& p : parts)
                if (!p.is_match) kept.push_back(p.span);
            break;
        case SplitBehavior::merged_with_previous: {
            bool previous_match = false;
            for (const auto& p : parts) {
                if (p.is_match && !previous_match && !kept.empty()) kept.back().end = p.span.end;
                else kept.push_back(p.span);
                previous_match = p.is_match;
            }
            break;
        }
        case SplitBehavior::merged_with_next: {
            bool previous_match = false;
            for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
                if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->span.begin;
                else kept.push_back(it->span);
                previous_match = it->is_match;
            }
            std::reverse(kept.begin(), kept.end());
            break;
        }
        case SplitBehavior::contiguous: {
            bool previous_match = false;
            for (const auto& p : parts) {
                if (p.is_match == previous_match && !kept.empty()) kept.back().end = p.span.end;
                else kept.push_back(p.span);
                previous_match = p.is_match;
            }
            break;
        }
    }
    for (const auto& k : kept)
        if (k.end > k.begin) out.push_back(k);
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out) const {
    out.clear();
    if (text.empty()) return;
    out.push_back({0, static_cast<std::uint32_t>(text.size())});
    thread_local std::vector<Piece> next, matches;
    for (const auto& stage : stages_) {
        next.clear();
        for (const auto& piece : out) split_piece(stage, text, piece, matches, next);
        out.swap(next);
    }
}

}  // namespace flashseek::tokenizer
