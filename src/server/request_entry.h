// The request entry: an HTTP body for one route → a validated request ready for the step loop (prompts tokenized,
// max_tokens resolved against the context), or the whole answer for the routes that need no model (/tokenize,
// /detokenize). It needs no socket, no step loop and no backend, so the HTTP handlers and the libFuzzer target
// (tests/server/fuzz_request_entry.cpp) run exactly the same validation. Bad input always leaves as ApiError (4xx);
// any other exception escaping from here is a bug.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/protocol.h"
#include "server/responses_protocol.h"
#include "tokenizer/tokenizer.h"

namespace flashseek::server {

enum class Route { ChatCompletions, Completions, Responses, Tokenize, Detokenize };

// What validation needs to know about the server: caps, the tokenizer and the context limit.
struct EntryContext {
    const ProtocolLimits& limits;
    const tokenizer::Tokenizer& tok;
    int64_t max_model_len = 0;
};

struct PreparedGeneration {
    ParsedRequest request;
    std::vector<std::vector<int32_t>> prompts;  // one per prompt (completions may have several)
    std::vector<int64_t> max_new_tokens;        // per prompt: max_tokens, or the remaining context
    std::optional<ResponsesFields> responses;   // /v1/responses: what its response object echoes back
};

// Chat completions, completions and responses. Throws ApiError.
PreparedGeneration prepare_generation(Route route, std::string_view body, const EntryContext& ctx);

// /tokenize ({"prompt"} or {"messages"} → {"tokens", "count", "max_model_len"}) and /detokenize ({"tokens"} →
// {"prompt"}): the JSON answer. Throws ApiError.
nlohmann::json answer_tokenize(std::string_view body, const EntryContext& ctx);
nlohmann::json answer_detokenize(std::string_view body, const EntryContext& ctx);

}  // namespace flashseek::server
