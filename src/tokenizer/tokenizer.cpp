// Tokenizer: loads tokenizer.json (model BPE, added tokens, pre-tokenizer, ByteLevel decoder) and runs the HF
// pipeline: added-token split (only for encode_with_specials) → pre-tokenizer → byte-level BPE; decode reverses it.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace flashseek::tokenizer {

struct Tokenizer::Impl {
    std::string origin;
    std::unique_ptr<BpeModel> model;
    PreTokenizer pre_tokenizer;
    AddedTokenSplitter added_splitter;
    std::vector<AddedToken> added;
    std::vector<std::string> id_to_string;  // as spelled in tokenizer.json ("" for holes)
    std::vector<std::string> id_bytes;      // what each id contributes to decoded text
    std::vector<std::uint8_t> id_kind;      // 0 hole, 1 model token, 2 added, 3 added special
    std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> added_by_content;
    std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> model_by_string;
    TokenId bos = -1, eos = -1;

    void encode_text(std::string_view text, std::uint32_t begin, std::uint32_t end, std::vector<TokenId>& out) const {
        thread_local std::vector<Piece> pieces;
        const std::string_view part = text.substr(begin, end - begin);
        pre_tokenizer.split(part, pieces);
        for (const auto& p : pieces) model->encode_piece(part.substr(p.begin, p.end - p.begin), out);
    }
};

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    FS_CHECK(in.good(), "cannot open tokenizer file '{}'", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    FS_CHECK(!in.bad(), "error reading tokenizer file '{}'", path);
    return ss.str();
}

const nlohmann::json& require(const nlohmann::json& j, const char* key, const std::string& where) {
    FS_CHECK(j.is_object() && j.contains(key), "{}: missing key '{}'", where, key);
    return j[key];
}

bool optional_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    FS_CHECK(j[key].is_boolean(), "{}.{}: expected a boolean", where, key);
    return j[key].get<bool>();
}

void check_normalizer(const nlohmann::json& j, const std::string& where) {
    if (j.is_null()) return;
    FS_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "{}: expected an object with a 'type'",
             where);
    const auto type = j["type"].get<std::string>();
    if (type == "Sequence") {
        const auto& list = require(j, "normalizers", where);
        FS_CHECK(list.is_array(), "{}.normalizers: expected an array", where);
        for (std::size_t i = 0; i < list.size(); ++i) check_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i));
        return;
    }
    fail("{}.type: unsupported normalizer '{}' (only an empty normalizer is supported)", where, type);
}

void check_decoder(const nlohmann::json& j, const std::string& where) {
    FS_CHECK(!j.is_null(), "{}: missing decoder (ByteLevel required)", where);
    FS_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "{}: expected an object with a 'type'",
             where);
    const auto type = j["type"].get<std::string>();
    FS_CHECK(type == "ByteLevel", "{}.type: unsupported decoder '{}' (ByteLevel required)", where, type);
}

std::string token_content(const nlohmann::json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
    return {};
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& tokenizer_json_path) {
    const std::string text = read_file(tokenizer_json_path);
    std::string config;
    const auto config_path = std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(config_path)) config = read_file(config_path.string());
    return from_json_text(text, tokenizer_json_path, config);
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& origin,
                                    std::string_view tokenizer_config_json) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text.begin(), json_text.end());
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", origin, e.what());
    }
    FS_CHECK(j.is_object(), "{}: top level must be a JSON object", origin);
    auto impl = std::make_shared<Impl>();
    impl->origin = origin;

    // ---- model ----
    const std::string mwhere = origin + ": model";
    const auto& model = require(j, "model", origin);
    FS_CHECK(model.is_object(), "{}: expected an object", mwhere);
    if (model.contains("type")) {
        FS_CHECK(model["type"].is_string() && model["type"].get<std::string>() == "BPE",
                 "{}.type: unsupported model type {} (BPE required)", mwhere, model["type"].dump());
    }
    FS_CHECK(!model.contains("dropout") || model["dropout"].is_null() ||
                 (model["dropout"].is_number() && model["dropout"].get<double>() == 0.0),
             "{}.dropout: BPE dropout is not supported", mwhere);
    FS_CHECK(!optional_bool(model, "byte_fallback", false, mwhere), "{}.byte_fallback: true is not supported", mwhere);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        FS_CHECK(!model.contains(key) || model[key].is_null() || (model[key].is_string() && model[key].get<std::string>().empty()),
                 "{}.{}: not supported for byte-level BPE", mwhere, key);
    }
    const bool ignore_merges = optional_bool(model, "ignore_merges", false, mwhere);

    const auto& vocab_json = require(model, "vocab", mwhere);
    FS_CHECK(vocab_json.is_object(), "{}.vocab: expected an object of token → id", mwhere);
    std::vector<std::pair<std::string, TokenId>> vocab;
    vocab.reserve(vocab_json.size());
    TokenId max_id = -1;
    for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
        FS_CHECK(it.value().is_number_integer() && it.value().get<std::int64_t>() >= 0 &&
                     it.value().get<std::int64_t>() < (1 << 30),
                 "{}.vocab[\"{}\"]: id must be an integer in [0, 2^30)", mwhere, it.key());
        const auto id = static_cast<TokenId>(it.value().get<std::int64_t>());
        vocab.emplace_back(it.key(), id);
        max_id = std::max(max_id, id);
    }
    const auto& merges_json = require(model, "merges", mwhere);
    FS_CHECK(merges_json.is_array(), "{}.merges: expected an array", mwhere);
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_json.size());
    for (std::size_t i = 0; i < merges_json.size(); ++i) {
        const auto& m = merges_json[i];
        if (m.is_string()) {
            const auto s = m.get<std::string>();
            const auto space = s.find(' ');
            FS_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                         s.find(' ', space + 1) == std::string::npos,
                     "{}.merges[{}]: expected \"left right\", got \"{}\"", mwhere, i, s);
            merges.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        } else {
            fail("{}.merges[{}]: expected a string \"left right\" or a pair of strings", mwhere, i);
        }
    }
    impl->model = std::make_unique<BpeModel>(vocab, merges, ignore_merges, mwhere);

    // ---- added tokens ----
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
        const auto& list = j["added_tokens"];
        FS_CHECK(list.is_array(), "{}: added_tokens: expected an array", origin);
        for (std::size_t i = 0; i < list.size(); ++i) {
            const std::string where = fmt::format("{}: added_tokens[{}]", origin, i);
            const auto& t = list[i];
            FS_CHECK(t.is_object(), "{}: expected an object", where);
            const auto& id = require(t, "id", where);
            FS_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < (1 << 30),
                     "{}.id: expected an integer in [0, 2^30)", where);
            const auto& content = require(t, "content", where);
            FS_CHECK(content.is_string() && !content.get<std::string>().empty(), "{}.content: expected a non-empty string",
                     where);
            for (const char* key : {"lstrip", "rstrip", "single_word"})
                FS_CHECK(!optional_bool(t, key, false, where), "{}.{}: true is not supported", where, key);
            AddedToken a;
            a.id = static_cast<TokenId>(id.get<std::int64_t>());
            a.content = content.get<std::string>();
            FS_CHECK(!find_invalid_utf8(a.content), "{}.content: invalid UTF-8", where);
            a.special = optional_bool(t, "special", false, where);
            a.normalized = optional_bool(t, "normalized", !a.special, where);
            max_id = std::max(max_id, a.id);
            impl->added.push_back(a);
        }
    }

    // ---- pre-tokenizer, normalizer, decoder ----
    check_normalizer(j.contains("normalizer") ? j["normalizer"] : nlohmann::json(), origin + ": normalizer");
    check_decoder(j.contains("decoder") ? j["decoder"] : nlohmann::json(), origin + ": decoder");
    FS_CHECK(j.contains("pre_tokenizer"), "{}: missing key 'pre_tokenizer'", origin);
    impl->pre_tokenizer = PreTokenizer::from_json(j["pre_tokenizer"], origin + ": pre_tokenizer");

    // ---- id tables ----
    const auto n = static_cast<std::size_t>(max_id + 1);
    impl->id_to_string.assign(n, {});
    impl->id_bytes.assign(n, {});
    impl->id_kind.assign(n, 0);
    std::string bytes;
    for (const auto& [token, id] : vocab) {
        impl->id_to_string[static_cast<std::size_t>(id)] = token;
        impl->id_kind[static_cast<std::size_t>(id)] = 1;
        impl->model_by_string.emplace(token, id);
    }
    for (const auto& a : impl->added) {
        impl->id_to_string[static_cast<std::size_t>(a.id)] = a.content;
        impl->id_kind[static_cast<std::size_t>(a.id)] = a.special ? 3 : 2;
        impl->added_by_content.emplace(a.content, a.id);
        impl->added_splitter.add(a);
    }
    // HF's ByteLevel decoder maps a token through the byte alphabet when every character belongs to it, and otherwise
    // keeps the token's own UTF-8 (e.g. "<｜User｜>").
    for (std::size_t id = 0; id < n; ++id) {
        const std::string& s = impl->id_to_string[id];
        impl->id_bytes[id] = byte_level_to_bytes(s, &bytes) ? bytes : s;
    }

    // ---- bos / eos ----
    auto resolve = [&](const std::string& content) -> TokenId {
        if (content.empty()) return -1;
        if (auto it = impl->added_by_content.find(content); it != impl->added_by_content.end()) return it->second;
        if (auto it = impl->model_by_string.find(content); it != impl->model_by_string.end()) return it->second;
        return -1;
    };
    std::string bos_content = "<｜begin▁of▁sentence｜>", eos_content = "<｜end▁of▁sentence｜>";
    if (!tokenizer_config_json.empty()) {
        nlohmann::json cfg;
        try {
            cfg = nlohmann::json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end());
        } catch (const nlohmann::json::exception& e) {
            fail("{}: tokenizer_config.json is not valid JSON: {}", origin, e.what());
        }
        if (cfg.is_object() && cfg.contains("bos_token")) {
            bos_content = token_content(cfg["bos_token"]);
            FS_CHECK(cfg["bos_token"].is_null() || resolve(bos_content) >= 0,
                     "{}: tokenizer_config.json bos_token '{}' is not a token", origin, bos_content);
        }
        if (cfg.is_object() && cfg.contains("eos_token")) {
            eos_content = token_content(cfg["eos_token"]);
            FS_CHECK(cfg["eos_token"].is_null() || resolve(eos_content) >= 0,
                     "{}: tokenizer_config.json eos_token '{}' is not a token", origin, eos_content);
        }
    }
    impl->bos = resolve(bos_content);
    impl->eos = resolve(eos_content);

    Tokenizer t;
    t.impl_ = std::move(impl);
    return t;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
    FS_CHECK(text.size() < (1ULL << 32), "text too long to tokenize ({} bytes, limit 4 GiB)", text.size());
    if (const auto bad = find_invalid_utf8(text)) fail("invalid UTF-8 in text at byte offset {}", *bad);
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 4);
    impl_->encode_text(text, 0, static_cast<std::uint32_t>(text.size()), out);
    return out;
}

std::vector<TokenId> Tokenizer::encode_with_specials(std::string_view text) const {
    FS_CHECK(text.size() < (1ULL << 32), "text too long to tokenize ({} bytes, limit 4 GiB)", text.size());
    if (const auto bad = find_invalid_utf8(text)) fail("invalid UTF-8 in text at byte offset {}", *bad);
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 4);
    thread_local std::vector<TextOrToken> parts;
    impl_->added_splitter.split(text, parts);
    for (const auto& p : parts) {
        if (p.id >= 0) out.push_back(p.id);
        else impl_->encode_text(text, p.begin, p.end, out);
    }
    return out;
}

std::vector<Tokenizer::AddedSpan> Tokenizer::split_added(std::string_view text) const {
    FS_CHECK(text.size() < (1ULL << 32), "text too long to tokenize ({} bytes, limit 4 GiB)", text.size());
    std::vector<TextOrToken> parts;
    impl_->added_splitter.split(text, parts);
    std::vector<AddedSpan> out;
    out.reserve(parts.size());
    for (const auto& p : parts) out.push_back({p.begin, p.end, p.id});
    return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
    std::string bytes;
    for (const TokenId id : ids) {
        FS_CHECK(id >= 0 && static_cast<std::size_t>(id) < impl_->id_bytes.size(), "token id {} out of range [0, {})",
                 id, impl_->id_bytes.size());
        if (skip_special && impl_->id_kind[static_cast<std::size_t>(id)] == 3) continue;
        bytes += impl_->id_bytes[static_cast<std::size_t>(id)];
    }
    return utf8_lossy(bytes);
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
    FS_CHECK(id >= 0 && static_cast<std::size_t>(id) < impl_->id_bytes.size(), "token id {} out of range [0, {})", id,
             impl_->id_bytes.size());
    return impl_->id_bytes[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
    if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
    if (auto it = impl_->model_by_string.find(token); it != impl_->model_by_string.end()) return it->second;
    return std::nullopt;
}

std::string Tokenizer::id_to_token(TokenId id) const {
    FS_CHECK(id >= 0 && static_cast<std::size_t>(id) < impl_->id_kind.size() &&
                 impl_->id_kind[static_cast<std::size_t>(id)] != 0,
             "token id {} is not in the vocabulary of {}", id, impl_->origin);
    return impl_->id_to_string[static_cast<std::size_t>(id)];
}

std::size_t Tokenizer::vocab_size() const { return impl_->id_kind.size(); }

TokenId Tokenizer::bos_id() const {
    FS_CHECK(impl_->bos >= 0, "tokenizer {} has no BOS token", impl_->origin);
    return impl_->bos;
}

TokenId Tokenizer::eos_id() const {
    FS_CHECK(impl_->eos >= 0, "tokenizer {} has no EOS token", impl_->origin);
    return impl_->eos;
}

bool Tokenizer::is_added(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < impl_->id_kind.size() &&
           impl_->id_kind[static_cast<std::size_t>(id)] >= 2;
}

bool Tokenizer::is_special(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < impl_->id_kind.size() &&
           impl_->id_kind[static_cast<std::size_t>(id)] == 3;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

TokenId Tokenizer::require_added(std::string_view content) const {
    const auto it = impl_->added_by_content.find(content);
    FS_CHECK(it != impl_->added_by_content.end(), "tokenizer {} has no added token '{}'", impl_->origin, content);
    return it->second;
}

// ---- IncrementalDecoder ----

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(TokenId id) {
    const std::string& bytes = tokenizer_.token_bytes(id);
    if (skip_special_ && tokenizer_.is_special(id)) return {};
    pending_ += bytes;
    // Everything except a trailing sequence that may still be completed by the next token can be emitted now;
    // bytes that are already invalid become U+FFFD exactly as decode() would turn them.
    const std::size_t hold = utf8::incomplete_tail(pending_);
    std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string IncrementalDecoder::flush() {
    std::string out = utf8_lossy(pending_);
    pending_.clear();
    return out;
}

}  // namespace flashseek::tokenizer
