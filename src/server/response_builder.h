// Turns the step loop's OutputEvents of one HTTP request into OpenAI responses: SSE chunks while streaming, or the final
// JSON object. Chat output goes through the DeepSeek-V4 output parser (reasoning_content / content / tool_calls);
// completions return raw text. Logprobs, usage (with reasoning token count) and finish_reason are assembled here, and
// the prompt side: completions echo (prompt text and its logprobs before the completion's) and vLLM prompt_logprobs.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "runtime/step_loop.h"
#include "server/protocol.h"

namespace flashseek::server {

// The error a request gets when one of its choices ended abnormally (finish_reason deadline, shutdown, cancelled,
// error): 408, 503, 400 for a prompt the scheduler refused or a constraint with a dead end (naming
// constraint_param), else 500. nullopt for stop and length.
std::optional<ApiError> generation_failure(const std::string& finish_reason, const std::string& error,
                                           const std::string& constraint_param = "");

class ResponseBuilder {
public:
    // prompts: the token ids of each prompt (choice i belongs to prompt i / n); like req, they must outlive the
    // builder (the generation's state owns both).
    ResponseBuilder(const ParsedRequest& req, const tokenizer::Tokenizer& tok, std::string id, int64_t created,
                    const std::vector<std::vector<int32_t>>& prompts);

    // Streaming. first_chunk: the role delta of every chat choice (empty for completions).
    std::string first_chunks();
    std::string stream(const std::vector<runtime::OutputEvent>& events);
    std::string last_chunks();  // usage chunk when requested, then [DONE]

    // Non-streaming.
    void absorb(const std::vector<runtime::OutputEvent>& events);
    nlohmann::ordered_json final_json() const;
    // When a choice ended abnormally (deadline, backend error, shutdown): the error to return instead.
    std::optional<ApiError> failure() const;

private:
    struct Choice {
        std::unique_ptr<chat::StreamingParser> parser;
        chat::ParsedMessage parsed;
        std::string text;  // completions: all text; chat: content collected (non-streaming)
        std::string reasoning;
        nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();  // chat: content entries
        nlohmann::ordered_json cmpl_logprobs;  // completions: the generated tokens' logprobs (tokens, text_offset, ...)
        size_t text_chars = 0;  // completions: code points of the tokens so far (the next text_offset)
        std::vector<ScoredToken> prompt_scores;  // positions 1, 2, ... of its prompt
        bool prompt_sent = false;                // streaming: echo / prompt_logprobs already emitted
        std::string finish_reason;
        std::string error;
        int64_t completion_tokens = 0;
        int64_t reasoning_tokens = 0;
        bool finished = false;
    };
    // Applies one event to its choice; returns the chat delta / completion text produced (for streaming).
    nlohmann::ordered_json apply(const runtime::OutputEvent& ev, bool streaming);
    nlohmann::ordered_json chunk_base() const;
    nlohmann::ordered_json usage() const;
    nlohmann::ordered_json token_logprob(const runtime::TokenOut& t) const;
    std::string sse(const nlohmann::ordered_json& j) const;
    std::string final_reason(const Choice& c) const;
    // The prompt of a choice, its echoed text, and its prompt logprobs in vLLM's and in OpenAI echo's shapes.
    const std::vector<int32_t>& prompt_of(size_t choice) const { return prompts_.at(choice / size_t(req_.n)); }
    const std::string& echo_text(size_t choice) const { return prompt_texts_.at(choice / size_t(req_.n)); }
    nlohmann::ordered_json vllm_prompt_logprobs(size_t choice) const;
    void append_echo_logprobs(size_t choice, nlohmann::ordered_json& lp) const;
    // A completions top_logprobs entry: token text -> logprob for the request's top_logprobs most likely tokens.
    nlohmann::ordered_json completion_top_logprobs(const std::vector<std::pair<int32_t, float>>& top) const;

    const ParsedRequest& req_;
    const tokenizer::Tokenizer& tok_;
    std::string id_;
    int64_t created_;
    const std::vector<std::vector<int32_t>>& prompts_;
    std::vector<std::string> prompt_texts_;  // completions with echo: the text returned before each completion
    std::vector<size_t> prompt_text_chars_;  // ... and its length in code points (text_offset's base)
    std::vector<Choice> choices_;
    bool error_sent_ = false;
};

}  // namespace flashseek::server
