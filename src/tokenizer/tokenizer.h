// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, producing exactly the ids of HF `tokenizers`.
// Two entry points on purpose: encode() never produces added/control tokens (for user, tool and document text), while
// encode_with_specials() matches added tokens literally like HF does (for template text written by the chat encoder).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashseek::tokenizer {

using TokenId = std::int32_t;

// One entry of tokenizer.json "added_tokens".
struct AddedToken {
    TokenId id = -1;
    std::string content;
    bool special = false;     // HF "special": skipped by decode(skip_special=true)
    bool normalized = false;  // HF "normalized": matched after the normalizer (the DeepSeek normalizer is empty)
};

class Tokenizer {
public:
    // Loads a tokenizer.json. If a tokenizer_config.json sits next to it, bos/eos come from there; otherwise from the
    // DeepSeek names <｜begin▁of▁sentence｜> / <｜end▁of▁sentence｜> when present. Throws flashseek::Error naming the
    // file and the JSON key on any malformed or unsupported content.
    static Tokenizer load(const std::string& tokenizer_json_path);
    // Same, from the text of a tokenizer.json (e.g. embedded in the binary); `origin` is used in error messages.
    static Tokenizer from_json_text(std::string_view json_text, const std::string& origin,
                                    std::string_view tokenizer_config_json = {});

    // Text → ids without any added-token matching: text that looks like a control token is encoded as plain text.
    // Throws flashseek::Error on invalid UTF-8 (naming the byte offset).
    std::vector<TokenId> encode(std::string_view text) const;
    // Text → ids with added tokens matched literally, identical to HF `Tokenizer.encode(text, add_special_tokens=False)`.
    std::vector<TokenId> encode_with_specials(std::string_view text) const;

    // Splits text on added tokens exactly as encode_with_specials does (HF AddedVocabulary semantics): spans with
    // id >= 0 are added tokens, spans with id == -1 are text to be encoded with encode().
    struct AddedSpan {
        std::size_t begin = 0, end = 0;
        TokenId id = -1;
    };
    std::vector<AddedSpan> split_added(std::string_view text) const;

    // Ids → text (ByteLevel decoder; invalid UTF-8 from partial tokens becomes U+FFFD as in HF). Control tokens are
    // kept unless skip_special (HF "special" tokens only, as in HF). Throws on ids outside [0, vocab_size()).
    std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
    // The raw bytes one token contributes to decoded text (may be a partial UTF-8 sequence).
    const std::string& token_bytes(TokenId id) const;

    std::optional<TokenId> token_to_id(std::string_view token) const;  // vocab string or added-token content
    std::string id_to_token(TokenId id) const;                          // as spelled in tokenizer.json; throws if unknown
    std::size_t vocab_size() const;                                     // max id + 1 (model vocab + added tokens)
    TokenId bos_id() const;                                             // throws if the tokenizer has none
    TokenId eos_id() const;                                             // throws if the tokenizer has none
    bool is_added(TokenId id) const;                                    // listed in added_tokens
    bool is_special(TokenId id) const;                                  // added token with "special": true
    const std::vector<AddedToken>& added_tokens() const;
    // Id of an added token by exact content; throws flashseek::Error naming it if the tokenizer lacks it.
    TokenId require_added(std::string_view content) const;

    struct Impl;

private:
    std::shared_ptr<const Impl> impl_;
};

// Streaming detokenizer: feed generated ids one at a time, get the newly completed text. Never emits half a UTF-8
// code point; bytes that can never become valid UTF-8 are emitted as U+FFFD (same substitution as decode()).
class IncrementalDecoder {
public:
    explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);
    std::string push(TokenId id);
    std::string flush();  // end of stream: pending incomplete bytes become U+FFFD
    std::size_t pending_bytes() const { return pending_.size(); }

private:
    Tokenizer tokenizer_;  // a shared handle: the decoder stays valid even if the caller's Tokenizer goes away
    bool skip_special_;
    std::string pending_;
};

// UTF-8 helpers shared by the tokenizer and the chat code.
// Index of the first invalid byte, or std::nullopt when `text` is valid UTF-8 (no surrogates, no overlongs).
std::optional<std::size_t> find_invalid_utf8(std::string_view text);
// Replaces invalid sequences by U+FFFD exactly like Rust's String::from_utf8_lossy (what HF decode uses).
std::string utf8_lossy(std::string_view bytes);

}  // namespace flashseek::tokenizer
