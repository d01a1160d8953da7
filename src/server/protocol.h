// OpenAI API request parsing and validation (chat and legacy completions) into one engine-facing description.
// Every rule that can reject a request lives here, so the HTTP handlers stay thin and the validation matrix is
// testable without a model. Errors are ApiError (4xx) naming the parameter.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/grammar.h"
#include "server/api_error.h"
#include "tokenizer/chat_encoding.h"

namespace flashseek::server {

enum class Endpoint { Chat, Completion };

// Default bounds on one constrained-decoding constraint, checked while parsing (output_constraint.cpp), so that what the
// grammar engine compiles stays small: its compile time and memory grow with the constraint's size, faster than
// linearly for long enums and alternations (docs/serving.md, "Constrained decoding", has the measured worst cases).
// The size is the schema as compact JSON text, the regex or grammar text, the choices' bytes, or the forced tools'
// names and parameter schemas together. `flashseek serve` can change them (ProtocolLimits).
inline constexpr size_t kMaxConstraintBytes = 32 * 1024;
inline constexpr size_t kMaxConstraintChoices = 1024;

// A logit_bias map is applied to every sampled row of its request on every step (and staged to the device with the
// CUDA backend), so its size is bounded too.
inline constexpr size_t kMaxLogitBiasEntries = 1024;

// Server-wide caps and facts the validation needs.
struct ProtocolLimits {
    std::string model_name = "flashseek";
    int64_t vocab_size = 0;
    int max_n = 16;
    int max_logprobs = 20;
    int max_stop = 16;            // stop strings (plus stop_token_ids, counted separately)
    size_t max_stop_bytes = 256;  // one stop string
    int max_prompts = 16;         // completions: prompts in one request
    size_t max_constraint_bytes = kMaxConstraintBytes;      // one constraint's size (see above)
    size_t max_constraint_choices = kMaxConstraintChoices;  // strings of a choice constraint
    size_t max_logit_bias = kMaxLogitBiasEntries;           // entries of logit_bias
    bool debug_hooks = false;     // accept debug_forced_tokens (tests only)
};

using runtime::OutputConstraint;

struct ParsedRequest {
    Endpoint endpoint = Endpoint::Chat;
    std::string model;
    // Chat: the conversation, rendered by the chat encoder. Completions: one or more prompts, text or token ids.
    chat::ChatRequest chat;
    std::vector<std::string> prompt_texts;             // completions, text prompts
    std::vector<std::vector<int32_t>> prompt_tokens;   // completions, token-id prompts
    std::optional<int64_t> max_tokens;                 // absent = the remaining context
    float temperature = 1.f;
    float top_p = 1.f;
    int top_k = 0;                                     // 0 = off (-1 is accepted as off too)
    float min_p = 0.f;
    float presence_penalty = 0.f;
    float frequency_penalty = 0.f;
    float repetition_penalty = 1.f;
    std::vector<std::pair<int32_t, float>> logit_bias; // token id -> bias in [-100, 100]
    int64_t min_tokens = 0;
    int prompt_logprobs = -1;                          // vLLM prompt_logprobs (top-N per prompt position); -1 = off
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    bool skip_special_tokens = true;                   // completions only; chat keeps markers for its parser
    bool stream = false;
    bool include_usage = false;
    int n = 1;
    bool logprobs = false;
    int top_logprobs = 0;
    bool echo = false;                                 // completions: the prompt is returned before the completion
    bool has_tools = false;
    std::string tool_choice = "auto";                  // auto | none | required | a function name
    std::vector<int32_t> forced_tokens;                // debug hook: replaces sampled tokens in order
    OutputConstraint constraint;

    size_t prompt_count() const { return endpoint == Endpoint::Chat ? 1 : prompt_texts.size() + prompt_tokens.size(); }
};

// Deepest nesting of arrays and objects a request body may have. Every later walk over the parsed value (validation,
// rendering tool schemas, error messages) is recursive, so the bound is what keeps a hostile body off the stack.
inline constexpr int kMaxJsonDepth = 128;

// The member `name` of a request object, or nullptr when it is absent or null (a null field counts as not sent).
template <typename Json>
const Json* given_member(const Json& obj, const char* name) {
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// Parses JSON text strictly: invalid JSON, nesting deeper than max_depth (checked while parsing, before a deeper
// value exists), duplicate keys (at any depth) or a non-object body give 400.
nlohmann::json parse_json_body(std::string_view body, int max_depth = kMaxJsonDepth);

// A client value quoted in an error message: scalars as JSON (long ones clipped), containers and strings by type
// only, so a message never grows with (or recurses into) what the client sent.
std::string describe_value(const nlohmann::json& v);

// raw_body (the text `body` was parsed from) keeps the request's key order for the chat encoder: tool schemas are
// rendered in the client's order, as the official encoder (Python dicts) would.
ParsedRequest parse_chat_request(const nlohmann::json& body, const ProtocolLimits& limits,
                                 std::string_view raw_body = {});
// Same, with the request already in the client's key order (the Responses API's translated request).
ParsedRequest parse_chat_request_ordered(const nlohmann::json& body, const ProtocolLimits& limits,
                                         const nlohmann::ordered_json& ordered_body);
// raw_body, as for chat, keeps the client's key order in the schemas of constrained decoding.
ParsedRequest parse_completion_request(const nlohmann::json& body, const ProtocolLimits& limits,
                                       std::string_view raw_body = {});

// Whether the body has any field of constrained decoding (response_format, structured_outputs, guided_*): only then
// does a completions request need its body in the client's key order.
bool mentions_output_constraint(const nlohmann::json& body);
// Reads response_format, structured_outputs / guided_* and (chat) tool_choice into req.constraint, from the body in
// the client's key order (a schema's property order is the order the grammar imposes); 400 naming the field when
// they are malformed or conflict. Called by the parse functions above, after tool_choice and tools were checked.
void parse_output_constraint(const nlohmann::ordered_json& ordered_body, const ProtocolLimits& limits,
                             ParsedRequest& req);

// Pieces the other routes share (request_entry.cpp, responses_protocol.cpp): the "model" field (404 naming the
// served model when it differs) and a list of token ids (400 naming `param` for a non-integer or out-of-vocab id).
void check_model(const nlohmann::json& body, const ProtocolLimits& limits);
std::vector<int32_t> parse_token_ids(const nlohmann::json& list, const std::string& param, int64_t vocab_size);

// Context check shared by both endpoints: prompt + max_tokens must fit max_model_len. Returns the max_tokens to
// use (the remaining context when the request gave none). Throws 400 code context_length_exceeded with both numbers.
int64_t resolve_max_tokens(const ParsedRequest& req, int64_t prompt_tokens, int64_t max_model_len);

}  // namespace flashseek::server
