// /v1/responses (the OpenAI Responses API, stateless): validates a Responses request and translates it into the chat
// request it is rendered as, so that every chat rule (sampling fields, tools, reasoning, the DeepSeek-V4 template)
// applies to both endpoints from one place. Input items map to chat messages: instructions → a system message,
// message items → messages, reasoning items → the next assistant turn's reasoning_content, function_call items →
// that turn's tool_calls, function_call_output items → tool messages. Nothing is stored: `store` is accepted and the
// response says `store: false`; previous_response_id, conversation, background and item references are refused.
#pragma once
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/protocol.h"

namespace flashseek::server {

struct ResponsesFields {
    // The request's settings that the response object repeats (instructions, tools, tool_choice, text, reasoning,
    // max_output_tokens, temperature, top_p, metadata, ...), already in response form.
    nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

// `body` was parsed by parse_json_body from `raw_body` (kept for the client's key order of tool schemas). Fills
// `request` (a chat request: endpoint Chat, n = 1) and returns the echo fields. Throws ApiError naming the
// Responses parameter (input[3].call_id, text.format, max_output_tokens, ...).
ResponsesFields parse_responses_request(const nlohmann::json& body, const ProtocolLimits& limits,
                                        std::string_view raw_body, ParsedRequest& request);

// The Responses name of a chat-request parameter named in an error (messages[...] -> input, max_tokens ->
// max_output_tokens, response_format -> text.format; others unchanged).
std::string responses_param(const std::string& chat_param);

// An error the chat rules raised for a translated Responses request, as the client must read it: the param by its
// Responses name, and the field's chat name in the message replaced by that name too ('max_tokens' must be at
// least 1 -> 'max_output_tokens' must be at least 1). reasoning_effort becomes reasoning.effort only where the
// client sent that (`effort_translated`); a top-level reasoning_effort passed through keeps its name.
ApiError responses_error(const ApiError& chat_error, bool effort_translated = false);

}  // namespace flashseek::server
