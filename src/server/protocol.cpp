// OpenAI request parsing and validation (see protocol.h). Known fields are type- and range-checked; fields that
// would change the output but that the engine cannot honour (best_of, suffix) are rejected with 400 rather than
// silently ignored; purely informational fields (user, metadata, …) are accepted. Constrained-decoding fields are
// read in output_constraint.cpp.
#include "server/protocol.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "util/error.h"

namespace flashseek::server {

using json = nlohmann::json;

namespace {
// Error text that quotes the body (nlohmann's "last read: '...'" can hold megabytes of one string) stays short.
std::string clip(std::string text, size_t max_bytes = 240) {
    if (text.size() <= max_bytes) return text;
    const size_t total = text.size();
    text.resize(max_bytes);
    return fmt::format("{}... ({} bytes)", text, total);
}
}  // namespace

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& type,
                       const std::string& code) {
    std::string t = type;
    if (t.empty()) {
        if (status == 401) t = "authentication_error";
        else if (status == 404) t = "not_found_error";
        else if (status == 429) t = "rate_limit_error";
        else if (status == 503) t = "service_unavailable_error";
        else if (status >= 500) t = "server_error";
        else t = "invalid_request_error";
    }
    // Every message is clipped: whatever a validator quoted from the request, the answer stays small.
    json e = {{"message", clip(message, 1024)},
              {"type", t},
              {"param", param.empty() ? json(nullptr) : json(clip(param, 128))},
              {"code", code.empty() ? json(nullptr) : json(code)}};
    return json({{"error", e}, {"object", "error"}}).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_body(const ApiError& e) { return error_body(e.status, e.what(), e.param, e.type, e.code); }

namespace {

// Thrown from the parser callback to stop at the first value nested too deeply.
struct TooDeep {};
}  // namespace

std::string describe_value(const json& v) {
    if (v.is_number() || v.is_boolean() || v.is_null()) return clip(v.dump(), 64);
    return v.type_name();
}

json parse_json_body(std::string_view body, int max_depth) {
    if (body.empty()) bad_param("body", "the request body is empty; expected a JSON object");
    // nlohmann's lexer takes a NUL byte for the end of the input, so `{...}\0<anything>` was accepted with what
    // follows the NUL silently ignored. A raw NUL is never valid JSON text (inside strings it must be escaped).
    if (const size_t nul = body.find('\0'); nul != std::string_view::npos)
        bad_param("body", "the request body is not valid JSON: a NUL byte at offset {}", nul);
    // A parser callback sees every key; a set per open object catches duplicates at any depth (nlohmann would
    // silently keep the last one, so two validators could disagree about which value counts). It also sees every
    // array and object as it opens, so a body nested too deeply is refused before the deeper value is built
    // (nlohmann's parser itself is iterative; dump(), copies and our own walks are not).
    std::vector<std::set<std::string>> keys;
    std::string duplicate;
    auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) {
            if (depth >= max_depth) throw TooDeep{};
            if (ev == json::parse_event_t::object_start) keys.emplace_back();
        } else if (ev == json::parse_event_t::object_end) {
            keys.pop_back();
        } else if (ev == json::parse_event_t::key && !keys.empty()) {
            const std::string& k = parsed.get_ref<const std::string&>();
            if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
        }
        return true;
    };
    json j;
    try {
        j = json::parse(body.begin(), body.end(), cb);
    } catch (const TooDeep&) {
        throw ApiError(400,
                       fmt::format("the request body nests arrays/objects more than {} levels deep; at most {} are "
                                   "allowed",
                                   max_depth, max_depth),
                       "body", "invalid_request_error", "json_too_deep");
    } catch (const json::exception& e) {
        bad_param("body", "the request body is not valid JSON: {}", clip(e.what()));
    }
    if (!duplicate.empty()) bad_param(clip(duplicate, 64), "duplicate key '{}' in the request body", clip(duplicate, 64));
    if (!j.is_object()) bad_param("body", "the request body must be a JSON object, got {}", j.type_name());
    return j;
}

namespace {

bool get_bool(const json& body, const char* name, bool def) {
    const json* v = given_member(body, name);
    if (!v) return def;
    if (!v->is_boolean()) bad_param(name, "'{}' must be a boolean, got {}", name, v->type_name());
    return v->get<bool>();
}

double get_number(const json& body, const char* name, double def) {
    const json* v = given_member(body, name);
    if (!v) return def;
    if (!v->is_number()) bad_param(name, "'{}' must be a number, got {}", name, v->type_name());
    const double d = v->get<double>();
    if (!std::isfinite(d)) bad_param(name, "'{}' must be finite", name);
    return d;
}

std::optional<int64_t> get_int(const json& body, const char* name) {
    const json* v = given_member(body, name);
    if (!v) return std::nullopt;
    if (v->is_number_unsigned()) {
        const uint64_t u = v->get<uint64_t>();
        if (u > uint64_t(INT64_MAX)) bad_param(name, "'{}' is too large ({})", name, u);
        return int64_t(u);
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
        const double d = v->get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
        bad_param(name, "'{}' must be an integer, got {}", name, describe_value(*v));
    }
    bad_param(name, "'{}' must be an integer, got {}", name, v->type_name());
}

// Fields that change the output and that this engine does not implement: accept only their neutral value.
void reject_unsupported(const json& body) {
    if (const auto best_of = get_int(body, "best_of"); best_of && *best_of != 1)
        bad_param("best_of", "'best_of' is not supported by this server (only 1)");
    if (const json* s = given_member(body, "suffix")) {
        if (!s->is_string()) bad_param("suffix", "'suffix' must be a string");
        if (!s->get<std::string>().empty()) bad_param("suffix", "'suffix' is not supported by this server");
    }
}

// Penalties, min_p, logit_bias, min_tokens (OpenAI / vLLM ranges).
void parse_sampling_adjustments(const json& body, const ProtocolLimits& limits, ParsedRequest& r) {
    for (const auto& [pen, value] : {std::pair{"presence_penalty", &r.presence_penalty},
                                     std::pair{"frequency_penalty", &r.frequency_penalty}}) {
        const double v = get_number(body, pen, 0.0);
        if (v < -2.0 || v > 2.0) bad_param(pen, "'{}' must be in [-2, 2], got {}", pen, v);
        *value = float(v);
    }
    const double rep = get_number(body, "repetition_penalty", 1.0);
    if (rep <= 0.0 || rep > 100.0)
        bad_param("repetition_penalty", "'repetition_penalty' must be in (0, 100], got {}", rep);
    r.repetition_penalty = float(rep);
    // The sampler works in single precision: a positive double below its range would become a penalty of 0.
    if (!(r.repetition_penalty > 0.f))
        bad_param("repetition_penalty", "'repetition_penalty' = {} is too small (it rounds to 0)", rep);
    const double min_p = get_number(body, "min_p", 0.0);
    if (min_p < 0.0 || min_p > 1.0) bad_param("min_p", "'min_p' must be in [0, 1], got {}", min_p);
    r.min_p = float(min_p);
    if (const json* lb = given_member(body, "logit_bias")) {
        if (!lb->is_object()) bad_param("logit_bias", "'logit_bias' must be an object of token id -> bias");
        if (lb->size() > limits.max_logit_bias)
            bad_param("logit_bias", "'logit_bias' has {} entries; at most {} are allowed", lb->size(),
                      limits.max_logit_bias);
        for (auto it = lb->begin(); it != lb->end(); ++it) {
            const std::string& key = it.key();
            int64_t id = -1;
            const bool digits = !key.empty() && key.size() <= 10 &&
                                std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (digits) id = std::stoll(key);
            if (id < 0 || id >= limits.vocab_size)
                bad_param("logit_bias", "'logit_bias' key '{}' is not a token id (valid: 0 to {})",
                          key.substr(0, 40), limits.vocab_size - 1);
            if (!it->is_number()) bad_param("logit_bias", "'logit_bias[{}]' must be a number", key);
            const double b = it->get<double>();
            if (!(b >= -100.0 && b <= 100.0)) bad_param("logit_bias", "'logit_bias[{}]' must be in [-100, 100]", key);
            r.logit_bias.emplace_back(int32_t(id), float(b));
        }
    }
    if (auto m = get_int(body, "min_tokens")) {
        if (*m < 0) bad_param("min_tokens", "'min_tokens' must be >= 0, got {}", *m);
        r.min_tokens = *m;
    }
    if (auto pl = get_int(body, "prompt_logprobs")) {
        if (*pl < 0 || *pl > limits.max_logprobs)
            bad_param("prompt_logprobs", "'prompt_logprobs' must be between 0 and {}, got {}", limits.max_logprobs,
                      *pl);
        r.prompt_logprobs = int(*pl);
    }
}

// `where` names the list in messages ("prompt[2]"); `param` is the top-level parameter reported in the error.
std::vector<int32_t> parse_token_list(const json& v, const std::string& param, int64_t vocab,
                                      const std::string& where = {}) {
    const std::string& name = where.empty() ? param : where;
    std::vector<int32_t> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        const json& t = v[i];
        if (!t.is_number_integer()) bad_param(param, "'{}[{}]' must be an integer token id, got {}", name, i,
                                               describe_value(t));
        if (t.is_number_unsigned() ? t.get<uint64_t>() >= uint64_t(vocab) : (t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab))
            bad_param(param, "'{}[{}]' = {} is not a token id (valid: 0 to {})", name, i, describe_value(t), vocab - 1);
        out.push_back(int32_t(t.get<int64_t>()));
    }
    return out;
}

std::string resolve_model(const json& body, const ProtocolLimits& limits) {
    const json* m = given_member(body, "model");
    if (!m) return limits.model_name;
    if (!m->is_string()) bad_param("model", "'model' must be a string, got {}", m->type_name());
    if (m->get_ref<const std::string&>() != limits.model_name)
        throw ApiError(404, fmt::format("The model '{}' does not exist; this server serves '{}'",
                                        clip(m->get<std::string>(), 128), limits.model_name),
                       "model", "invalid_request_error", "model_not_found");
    return limits.model_name;
}

void parse_common(const json& body, const ProtocolLimits& limits, ParsedRequest& r) {
    r.model = resolve_model(body, limits);
    reject_unsupported(body);
    parse_sampling_adjustments(body, limits, r);

    const double temperature = get_number(body, "temperature", 1.0);
    if (temperature < 0.0 || temperature > 2.0)
        bad_param("temperature", "'temperature' must be in [0, 2], got {}", temperature);
    r.temperature = float(temperature);
    const double top_p = get_number(body, "top_p", 1.0);
    if (!(top_p > 0.0 && top_p <= 1.0)) bad_param("top_p", "'top_p' must be in (0, 1], got {}", top_p);
    r.top_p = float(top_p);
    // A positive double can round to 0 as a float (5e-324), which the sampler refuses (a 500 otherwise).
    if (!(r.top_p > 0.f)) bad_param("top_p", "'top_p' = {} is too small (it rounds to 0)", top_p);
    if (auto k = get_int(body, "top_k")) {
        if (*k < -1) bad_param("top_k", "'top_k' must be -1 (off), 0 (off) or positive, got {}", *k);
        if (*k > limits.vocab_size) bad_param("top_k", "'top_k' must be at most the vocabulary size {}, got {}",
                                              limits.vocab_size, *k);
        r.top_k = *k <= 0 ? 0 : int(*k);
    }
    if (const json* s = given_member(body, "seed")) {
        if (!s->is_number_integer()) bad_param("seed", "'seed' must be an integer, got {}", describe_value(*s));
        r.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
    }
    if (auto n = get_int(body, "n")) {
        if (*n < 1 || *n > limits.max_n) bad_param("n", "'n' must be between 1 and {}, got {}", limits.max_n, *n);
        r.n = int(*n);
    }
    if (r.n > 1 && r.temperature == 0.f)
        bad_param("n", "'n' > 1 needs temperature > 0 (greedy decoding would return {} identical choices)", r.n);

    if (const json* s = given_member(body, "stop")) {
        if (s->is_string()) {
            r.stop.push_back(s->get<std::string>());
        } else if (s->is_array()) {
            if (int(s->size()) > limits.max_stop)
                bad_param("stop", "'stop' has {} entries; at most {} are allowed", s->size(), limits.max_stop);
            for (size_t i = 0; i < s->size(); ++i) {
                if (!(*s)[i].is_string()) bad_param("stop", "'stop[{}]' must be a string", i);
                r.stop.push_back((*s)[i].get<std::string>());
            }
        } else {
            bad_param("stop", "'stop' must be a string or an array of strings, got {}", s->type_name());
        }
        for (size_t i = 0; i < r.stop.size(); ++i) {
            if (r.stop[i].empty()) bad_param("stop", "'stop[{}]' is empty", i);
            if (r.stop[i].size() > limits.max_stop_bytes)
                bad_param("stop", "'stop[{}]' is {} bytes; at most {} are allowed", i, r.stop[i].size(),
                          limits.max_stop_bytes);
            if (tokenizer::find_invalid_utf8(r.stop[i])) bad_param("stop", "'stop[{}]' is not valid UTF-8", i);
        }
    }
    if (const json* s = given_member(body, "stop_token_ids")) {
        if (!s->is_array()) bad_param("stop_token_ids", "'stop_token_ids' must be an array of token ids");
        if (int(s->size()) > limits.max_stop)
            bad_param("stop_token_ids", "'stop_token_ids' has {} entries; at most {} are allowed", s->size(),
                      limits.max_stop);
        r.stop_token_ids = parse_token_list(*s, "stop_token_ids", limits.vocab_size);
    }
    r.ignore_eos = get_bool(body, "ignore_eos", false);

    r.stream = get_bool(body, "stream", false);
    if (const json* so = given_member(body, "stream_options")) {
        if (!so->is_object()) bad_param("stream_options", "'stream_options' must be an object");
        if (!r.stream) bad_param("stream_options", "'stream_options' is only allowed when 'stream' is true");
        r.include_usage = get_bool(*so, "include_usage", false);
        (void)get_bool(*so, "continuous_usage_stats", false);
    }

    // Completions with echo may ask for no new token at all (scoring a prompt, as lm-evaluation-harness does).
    r.echo = r.endpoint == Endpoint::Completion && get_bool(body, "echo", false);
    for (const char* name : {"max_tokens", "max_completion_tokens"}) {
        if (auto m = get_int(body, name)) {
            if (*m < (r.echo ? 0 : 1))
                bad_param(name, "'{}' must be at least {}, got {}", name, r.echo ? "0 (with echo)" : "1", *m);
            r.max_tokens = r.max_tokens ? std::min(*r.max_tokens, *m) : *m;
        }
    }
    if (r.max_tokens && r.min_tokens > *r.max_tokens)
        bad_param("min_tokens", "'min_tokens' ({}) must not exceed 'max_tokens' ({})", r.min_tokens, *r.max_tokens);

    if (const json* f = given_member(body, "debug_forced_tokens")) {
        if (!limits.debug_hooks)
            bad_param("debug_forced_tokens", "'debug_forced_tokens' needs the server flag --enable-debug-hooks");
        if (!f->is_array()) bad_param("debug_forced_tokens", "'debug_forced_tokens' must be an array of token ids");
        r.forced_tokens = parse_token_list(*f, "debug_forced_tokens", limits.vocab_size);
    }
}

// ChatRequest::from_json names the field at the start of its message ("messages[2].role: ..."); keep it as param.
std::string param_from_message(std::string msg) {
    // Top-level fields are named "request body.<field>" there (drop_thinking): the param is the field, not "request".
    if (msg.rfind("request body.", 0) == 0) msg.erase(0, 13);
    const size_t end = msg.find_first_of(" :");
    if (end == std::string::npos || end == 0) return "messages";
    const std::string head = msg.substr(0, end);
    for (char c : head)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']' || c == '\''))
            return "messages";
    return head;
}

}  // namespace

ParsedRequest parse_chat_request(const json& body, const ProtocolLimits& limits, std::string_view raw_body) {
    return parse_chat_request_ordered(
        body, limits, raw_body.empty() ? nlohmann::ordered_json(body) : nlohmann::ordered_json::parse(raw_body));
}

ParsedRequest parse_chat_request_ordered(const json& body, const ProtocolLimits& limits,
                                         const nlohmann::ordered_json& ordered_body) {
    ParsedRequest r;
    r.endpoint = Endpoint::Chat;
    parse_common(body, limits, r);
    r.skip_special_tokens = false;
    const json* msgs = given_member(body, "messages");
    if (!msgs) bad_param("messages", "'messages' is required");
    if (!msgs->is_array()) bad_param("messages", "'messages' must be an array, got {}", msgs->type_name());
    if (msgs->empty()) bad_param("messages", "'messages' must contain at least one message");
    if (const json* lp = given_member(body, "logprobs")) {
        if (!lp->is_boolean()) bad_param("logprobs", "'logprobs' must be a boolean for chat completions");
        r.logprobs = lp->get<bool>();
    }
    if (auto tl = get_int(body, "top_logprobs")) {
        if (*tl < 0 || *tl > limits.max_logprobs)
            bad_param("top_logprobs", "'top_logprobs' must be between 0 and {}, got {}", limits.max_logprobs, *tl);
        if (!r.logprobs && *tl > 0) bad_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r.top_logprobs = int(*tl);
    }
    if (const json* tools = given_member(body, "tools")) {
        if (!tools->is_array()) bad_param("tools", "'tools' must be an array");
        // Names identify a tool in the model's calls and in a forced tool_choice: an empty one names nothing, and
        // two tools of one name would make either ambiguous.
        std::set<std::string> names;
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            // A non-string "type" must not reach value("type", ""): that throws a type_error (a 500).
            if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") ||
                !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
                bad_param("tools", "'tools[{}]' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
            if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object())
                bad_param("tools", "'tools[{}].function.parameters' must be a JSON Schema object", i);
            const std::string& name = t["function"]["name"].get_ref<const std::string&>();
            if (name.empty()) bad_param("tools", "'tools[{}].function.name' must not be empty", i);
            if (!names.insert(name).second)
                bad_param("tools", "'tools[{}].function.name' repeats the name of an earlier tool", i);
        }
        r.has_tools = !tools->empty();
    }
    if (const json* ptc = given_member(body, "parallel_tool_calls"))
        if (!ptc->is_boolean()) bad_param("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (const json* tc = given_member(body, "tool_choice")) {
        if (tc->is_string()) {
            r.tool_choice = tc->get<std::string>();
            if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
                bad_param("tool_choice", "'tool_choice' must be auto, none, required or a function object");
        } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
                   (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string() &&
                   (!given_member(*tc, "type") || (*tc)["type"] == "function")) {
            r.tool_choice = (*tc)["function"]["name"].get<std::string>();
        } else {
            bad_param("tool_choice", "'tool_choice' must be auto, none, required or {{\"function\": {{\"name\"}}}}");
        }
        if (r.tool_choice != "auto" && r.tool_choice != "none" && !r.has_tools)
            bad_param("tool_choice", "'tool_choice' = '{}' needs 'tools'", r.tool_choice);
    }
    parse_output_constraint(ordered_body, limits, r);
    if (const json* ctk = given_member(body, "chat_template_kwargs"))
        if (!ctk->is_object()) bad_param("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (const json* re = given_member(body, "reasoning_effort"))
        if (!re->is_string()) bad_param("reasoning_effort", "'reasoning_effort' must be a string");
    try {
        r.chat = chat::ChatRequest::from_ordered_json(ordered_body);
    } catch (const Error& e) {
        const std::string msg = e.what();
        throw ApiError(400, msg, param_from_message(msg));
    } catch (const json::exception& e) {
        throw ApiError(400, fmt::format("messages: {}", e.what()), "messages");
    }
    if (r.tool_choice == "none") {
        // The DeepSeek template has no "tools disabled" switch; not showing the tools is how the model is told.
        for (auto& m : r.chat.messages) m.tools = nullptr;
        r.has_tools = false;
    }
    return r;
}

ParsedRequest parse_completion_request(const json& body, const ProtocolLimits& limits, std::string_view raw_body) {
    ParsedRequest r;
    r.endpoint = Endpoint::Completion;
    parse_common(body, limits, r);
    r.skip_special_tokens = get_bool(body, "skip_special_tokens", true);
    if (mentions_output_constraint(body))
        parse_output_constraint(raw_body.empty() ? nlohmann::ordered_json(body) : nlohmann::ordered_json::parse(raw_body),
                                limits, r);
    if (auto lp = get_int(body, "logprobs")) {
        if (*lp < 0 || *lp > limits.max_logprobs)
            bad_param("logprobs", "'logprobs' must be between 0 and {}, got {}", limits.max_logprobs, *lp);
        r.logprobs = true;
        r.top_logprobs = int(*lp);
    }
    const json* p = given_member(body, "prompt");
    if (!p) bad_param("prompt", "'prompt' is required");
    auto add_text = [&](const json& s, const std::string& where) {
        std::string text = s.get<std::string>();
        if (text.empty()) bad_param("prompt", "'{}' is empty", where);
        if (auto bad = tokenizer::find_invalid_utf8(text))
            bad_param("prompt", "'{}' is not valid UTF-8 (byte offset {})", where, *bad);
        r.prompt_texts.push_back(std::move(text));
    };
    auto add_tokens = [&](const json& a, const std::string& where) {
        if (a.empty()) bad_param("prompt", "'{}' is an empty token list", where);
        r.prompt_tokens.push_back(parse_token_list(a, "prompt", limits.vocab_size, where));
    };
    if (p->is_string()) {
        add_text(*p, "prompt");
    } else if (p->is_array()) {
        if (p->empty()) bad_param("prompt", "'prompt' is an empty list");
        if ((*p)[0].is_number()) {
            add_tokens(*p, "prompt");
        } else {
            if (int(p->size()) > limits.max_prompts)
                bad_param("prompt", "'prompt' has {} prompts; at most {} are allowed", p->size(), limits.max_prompts);
            for (size_t i = 0; i < p->size(); ++i) {
                const json& e = (*p)[i];
                const std::string where = fmt::format("prompt[{}]", i);
                if (e.is_string()) add_text(e, where);
                else if (e.is_array()) add_tokens(e, where);
                else bad_param("prompt", "'{}' must be a string or a list of token ids, got {}", where, e.type_name());
            }
        }
    } else {
        bad_param("prompt", "'prompt' must be a string, a list of strings or token ids, got {}", p->type_name());
    }
    if (!r.prompt_texts.empty() && !r.prompt_tokens.empty())
        bad_param("prompt", "'prompt' mixes text and token-id prompts; send one kind per request");
    if (int(r.prompt_count()) * r.n > limits.max_n * limits.max_prompts)
        bad_param("n", "{} prompts x n = {} choices is too many", r.prompt_count(), r.n);
    return r;
}

void check_model(const json& body, const ProtocolLimits& limits) { (void)resolve_model(body, limits); }

std::vector<int32_t> parse_token_ids(const json& list, const std::string& param, int64_t vocab_size) {
    return parse_token_list(list, param, vocab_size);
}

int64_t resolve_max_tokens(const ParsedRequest& req, int64_t prompt_tokens, int64_t max_model_len) {
    const char* param = req.endpoint == Endpoint::Chat ? "messages" : "prompt";
    if (prompt_tokens >= max_model_len)
        throw ApiError(400,
                       fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                   "tokens, which leaves no room for any output token.",
                                   max_model_len, prompt_tokens),
                       param, "invalid_request_error", "context_length_exceeded");
    if (!req.max_tokens) return max_model_len - prompt_tokens;
    const int64_t want = *req.max_tokens;
    if (want > max_model_len - prompt_tokens)
        throw ApiError(400,
                       fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                   "({} in the prompt, {} in the completion). Reduce the prompt or max_tokens.",
                                   max_model_len, want > INT64_MAX - prompt_tokens ? INT64_MAX : prompt_tokens + want,
                                   prompt_tokens, want),
                       "max_tokens", "invalid_request_error", "context_length_exceeded");
    return want;
}

}  // namespace flashseek::server
