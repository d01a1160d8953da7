// The request entry (see request_entry.h). Order: strict JSON (depth, duplicate keys) → the route's validation →
// prompt rendering and tokenization → the context check. flashseek::Error from the tokenizer or the chat encoder
// (bad content the template cannot take) becomes a 400 naming the prompt parameter.
#include "server/request_entry.h"

#include "util/error.h"

namespace flashseek::server {

using json = nlohmann::json;

namespace {

const char* prompt_param(Route route) {
    return route == Route::ChatCompletions ? "messages" : route == Route::Responses ? "input" : "prompt";
}

std::vector<std::vector<int32_t>> tokenize_prompts(Route route, const ParsedRequest& pr,
                                                   const tokenizer::Tokenizer& tok) {
    std::vector<std::vector<int32_t>> prompts;
    try {
        if (route == Route::Completions) {
            // As HF encodes it: added tokens matched literally, no BOS (DeepSeek-V4's add_bos_token is false).
            for (const std::string& text : pr.prompt_texts) prompts.push_back(tok.encode_with_specials(text));
            for (const auto& ids : pr.prompt_tokens) prompts.push_back(ids);
        } else {
            prompts.push_back(chat::encode_prompt(tok, chat::render_prompt(pr.chat)));
        }
    } catch (const Error& e) {
        bad_param(prompt_param(route), "could not tokenize the prompt: {}", e.what());
    }
    return prompts;
}

}  // namespace

PreparedGeneration prepare_generation(Route route, std::string_view body_text, const EntryContext& ctx) {
    try {
        const json body = parse_json_body(body_text);
        PreparedGeneration out;
        ParsedRequest& pr = out.request;
        switch (route) {
            case Route::ChatCompletions: pr = parse_chat_request(body, ctx.limits, body_text); break;
            case Route::Completions: pr = parse_completion_request(body, ctx.limits, body_text); break;
            case Route::Responses: out.responses = parse_responses_request(body, ctx.limits, body_text, pr); break;
            default: throw ApiError(500, "prepare_generation: not a generation route", "", "server_error");
        }
        out.prompts = tokenize_prompts(route, pr, ctx.tok);
        for (const auto& p : out.prompts) {
            try {
                out.max_new_tokens.push_back(resolve_max_tokens(pr, int64_t(p.size()), ctx.max_model_len));
            } catch (const ApiError& e) {
                if (route == Route::Responses) throw responses_error(e);
                throw;
            }
        }
        return out;
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "");
    }
}

json answer_tokenize(std::string_view body_text, const EntryContext& ctx) {
    try {
        const json body = parse_json_body(body_text);
        std::vector<int32_t> ids;
        // One of the two, never both: with both, which one was counted would be the server's silent choice.
        if (given_member(body, "messages") && given_member(body, "prompt"))
            bad_param("prompt", "'/tokenize' takes 'prompt' or 'messages', not both");
        if (given_member(body, "messages")) {
            const ParsedRequest pr = parse_chat_request(body, ctx.limits, body_text);
            ids = tokenize_prompts(Route::ChatCompletions, pr, ctx.tok).at(0);
        } else {
            const ParsedRequest pr = parse_completion_request(body, ctx.limits, body_text);
            if (pr.prompt_texts.size() + pr.prompt_tokens.size() != 1)
                bad_param("prompt", "'/tokenize' takes exactly one prompt");
            ids = tokenize_prompts(Route::Completions, pr, ctx.tok).at(0);
        }
        return json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.max_model_len}};
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "");
    }
}

json answer_detokenize(std::string_view body_text, const EntryContext& ctx) {
    try {
        const json body = parse_json_body(body_text);
        check_model(body, ctx.limits);
        const auto it = body.find("tokens");
        if (it == body.end() || it->is_null()) bad_param("tokens", "'tokens' is required");
        if (!it->is_array()) bad_param("tokens", "'tokens' must be an array of token ids, got {}", it->type_name());
        const std::vector<int32_t> ids = parse_token_ids(*it, "tokens", ctx.limits.vocab_size);
        // Special tokens are kept (HF decode's default), so the text shows exactly what the ids are.
        return json{{"prompt", ctx.tok.decode(ids)}};
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "");
    }
}

}  // namespace flashseek::server
