// Turns the step loop's OutputEvents of one /v1/responses request into the Responses API's answer: the response
// object (non-streaming), or its SSE event sequence (streaming): response.created, response.in_progress, then per
// output item output_item.added, content_part.added, output_text.delta / reasoning_text.delta ..., the matching
// .done events and output_item.done, function calls as function_call_arguments.delta/.done, and finally
// response.completed (or response.incomplete at max_output_tokens, response.failed when generation failed).
// DeepSeek-V4's reasoning becomes a reasoning item before the message; tool calls become function_call items after
// it. Streaming and non-streaming run the same per-event code, so both give the same output items.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/step_loop.h"
#include "server/api_error.h"
#include "server/protocol.h"
#include "server/responses_protocol.h"

namespace flashseek::server {

class ResponsesBuilder {
public:
    // id: "resp_<hex>"; item ids are derived from it, so a streamed and a non-streamed answer name items alike.
    ResponsesBuilder(const ParsedRequest& req, ResponsesFields fields, std::string id, int64_t created_at,
                     int64_t prompt_tokens);

    // Streaming.
    std::string first_chunks();  // response.created, response.in_progress
    std::string stream(const std::vector<runtime::OutputEvent>& events);
    std::string last_chunks();   // the terminal event if the finish event never came (it always should)

    // Non-streaming.
    void absorb(const std::vector<runtime::OutputEvent>& events);
    nlohmann::ordered_json final_json() const;
    // When generation ended abnormally (deadline, backend error, shutdown): the error to return instead.
    std::optional<ApiError> failure() const;

private:
    enum class Open { none, reasoning, message };
    void apply(const runtime::OutputEvent& ev);
    void on_reasoning(const std::string& piece);
    void on_content(const std::string& piece);
    void close_open_item();
    void add_function_calls();
    void finish_response();
    void emit(const char* type, nlohmann::ordered_json fields);
    nlohmann::ordered_json snapshot(const char* status) const;
    nlohmann::ordered_json usage() const;
    std::string status() const;

    const ParsedRequest& req_;
    ResponsesFields fields_;
    std::string id_;
    std::string hex_;  // the id without "resp_"
    int64_t created_at_;
    int64_t prompt_tokens_;
    std::unique_ptr<chat::StreamingParser> parser_;
    chat::ParsedMessage parsed_;

    bool streaming_ = false;
    std::string out_;         // SSE text produced by the current call
    int64_t sequence_ = 0;
    Open open_ = Open::none;
    std::string reasoning_;   // the open (or last) reasoning item's text
    std::string content_;     // the open (or last) message's text
    nlohmann::ordered_json output_ = nlohmann::ordered_json::array();  // completed output items
    int64_t completion_tokens_ = 0;
    int64_t reasoning_tokens_ = 0;
    std::string finish_reason_;
    std::string error_;
    bool finished_ = false;
    bool terminal_sent_ = false;
};

}  // namespace flashseek::server
