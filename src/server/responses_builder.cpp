// Responses API answer assembly (see responses_builder.h). Output items are opened as their first text arrives
// (reasoning first: DeepSeek-V4 thinks before it answers) and closed when the next kind starts or generation ends;
// function calls are complete only at the end (the DSML block is parsed whole), so their items are added then.
#include "server/responses_builder.h"

#include "server/response_builder.h"

namespace flashseek::server {

using ojson = nlohmann::ordered_json;

ResponsesBuilder::ResponsesBuilder(const ParsedRequest& req, ResponsesFields fields, std::string id,
                                   int64_t created_at, int64_t prompt_tokens)
    : req_(req), fields_(std::move(fields)), id_(std::move(id)), created_at_(created_at),
      prompt_tokens_(prompt_tokens), parser_(std::make_unique<chat::StreamingParser>(req.chat.thinking)) {
    hex_ = id_.substr(id_.find('_') + 1);
}

void ResponsesBuilder::emit(const char* type, ojson fields) {
    if (!streaming_) return;
    ojson event;
    event["type"] = type;
    event["sequence_number"] = sequence_++;
    for (auto& [k, v] : fields.items()) event[k] = std::move(v);
    out_ += fmt::format("event: {}\ndata: {}\n\n", type, event.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

ojson ResponsesBuilder::usage() const {
    return ojson{{"input_tokens", prompt_tokens_},
                 {"input_tokens_details", {{"cached_tokens", 0}}},
                 {"output_tokens", completion_tokens_},
                 {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                 {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

std::string ResponsesBuilder::status() const {
    if (!finished_) return "in_progress";
    if (finish_reason_ == "length") return "incomplete";
    if (finish_reason_ == "stop") return "completed";
    return "failed";
}

ojson ResponsesBuilder::snapshot(const char* status) const {
    ojson r;
    r["id"] = id_;
    r["object"] = "response";
    r["created_at"] = created_at_;
    r["status"] = status;
    r["background"] = false;
    r["error"] = nullptr;
    r["incomplete_details"] = nullptr;
    if (std::string(status) == "incomplete") r["incomplete_details"] = ojson{{"reason", "max_output_tokens"}};
    if (std::string(status) == "failed") {
        const std::optional<ApiError> f = failure();
        r["error"] = ojson{{"code", f && f->status < 500 ? "invalid_prompt" : "server_error"},
                           {"message", f ? std::string(f->what()) : std::string("generation failed")}};
    }
    r["model"] = req_.model;
    r["output"] = std::string(status) == "in_progress" ? ojson::array() : output_;
    for (const auto& [k, v] : fields_.echo.items()) r[k] = v;
    r["usage"] = std::string(status) == "in_progress" ? ojson(nullptr) : usage();
    return r;
}

void ResponsesBuilder::on_reasoning(const std::string& piece) {
    if (open_ != Open::reasoning) {
        close_open_item();
        open_ = Open::reasoning;
        reasoning_.clear();
        const std::string item_id = "rs_" + hex_;
        emit("response.output_item.added",
             {{"output_index", output_.size()},
              {"item", {{"id", item_id}, {"type", "reasoning"}, {"summary", ojson::array()},
                        {"content", ojson::array()}, {"status", "in_progress"}}}});
        emit("response.content_part.added", {{"item_id", item_id},
                                             {"output_index", output_.size()},
                                             {"content_index", 0},
                                             {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    }
    reasoning_ += piece;
    emit("response.reasoning_text.delta",
         {{"item_id", "rs_" + hex_}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", piece}});
}

void ResponsesBuilder::on_content(const std::string& piece) {
    if (open_ != Open::message) {
        close_open_item();
        open_ = Open::message;
        content_.clear();
        const std::string item_id = "msg_" + hex_;
        emit("response.output_item.added",
             {{"output_index", output_.size()},
              {"item", {{"id", item_id}, {"type", "message"}, {"role", "assistant"}, {"status", "in_progress"},
                        {"content", ojson::array()}}}});
        emit("response.content_part.added",
             {{"item_id", item_id},
              {"output_index", output_.size()},
              {"content_index", 0},
              {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}}}});
    }
    content_ += piece;
    emit("response.output_text.delta", {{"item_id", "msg_" + hex_},
                                        {"output_index", output_.size()},
                                        {"content_index", 0},
                                        {"delta", piece},
                                        {"logprobs", ojson::array()}});
}

void ResponsesBuilder::close_open_item() {
    const std::string item_status = finished_ && finish_reason_ != "stop" ? "incomplete" : "completed";
    if (open_ == Open::reasoning) {
        const std::string item_id = "rs_" + hex_;
        const ojson part = {{"type", "reasoning_text"}, {"text", reasoning_}};
        emit("response.reasoning_text.done",
             {{"item_id", item_id}, {"output_index", output_.size()}, {"content_index", 0}, {"text", reasoning_}});
        emit("response.content_part.done",
             {{"item_id", item_id}, {"output_index", output_.size()}, {"content_index", 0}, {"part", part}});
        ojson item = {{"id", item_id}, {"type", "reasoning"}, {"summary", ojson::array()},
                      {"content", ojson::array({part})}, {"status", item_status}};
        emit("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
        output_.push_back(std::move(item));
    } else if (open_ == Open::message) {
        const std::string item_id = "msg_" + hex_;
        const ojson part = {{"type", "output_text"}, {"text", content_}, {"annotations", ojson::array()},
                            {"logprobs", ojson::array()}};
        emit("response.output_text.done", {{"item_id", item_id},
                                           {"output_index", output_.size()},
                                           {"content_index", 0},
                                           {"text", content_},
                                           {"logprobs", ojson::array()}});
        emit("response.content_part.done",
             {{"item_id", item_id}, {"output_index", output_.size()}, {"content_index", 0}, {"part", part}});
        ojson item = {{"id", item_id}, {"type", "message"}, {"role", "assistant"}, {"status", item_status},
                      {"content", ojson::array({part})}};
        emit("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
        output_.push_back(std::move(item));
    }
    open_ = Open::none;
}

void ResponsesBuilder::add_function_calls() {
    for (size_t k = 0; k < parsed_.tool_calls.size(); ++k) {
        const chat::ParsedToolCall& call = parsed_.tool_calls[k];
        const std::string item_id = fmt::format("fc_{}_{}", hex_, k);
        ojson item = {{"id", item_id},
                      {"type", "function_call"},
                      {"call_id", fmt::format("call_{}_{}", hex_, k)},
                      {"name", call.name},
                      {"arguments", ""},
                      {"status", "in_progress"}};
        emit("response.output_item.added", {{"output_index", output_.size()}, {"item", item}});
        emit("response.function_call_arguments.delta",
             {{"item_id", item_id}, {"output_index", output_.size()}, {"delta", call.arguments}});
        emit("response.function_call_arguments.done", {{"item_id", item_id},
                                                        {"output_index", output_.size()},
                                                        {"name", call.name},
                                                        {"arguments", call.arguments}});
        item["arguments"] = call.arguments;
        item["status"] = "completed";
        emit("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
        output_.push_back(std::move(item));
    }
}

void ResponsesBuilder::finish_response() {
    if (terminal_sent_) return;
    terminal_sent_ = true;
    close_open_item();
    add_function_calls();
    const std::string s = status();
    const char* type = s == "completed" ? "response.completed" : s == "incomplete" ? "response.incomplete"
                                                                                   : "response.failed";
    emit(type, {{"response", snapshot(s.c_str())}});
}

void ResponsesBuilder::apply(const runtime::OutputEvent& ev) {
    chat::StreamingParser::Delta d = parser_->push(ev.text);
    if (ev.finished) {
        chat::StreamingParser::Delta last = parser_->finish(&parsed_);
        d.reasoning_content += last.reasoning_content;
        d.content += last.content;
    }
    // Counted as on chat completions: tokens whose text went only to the reasoning.
    if (!d.reasoning_content.empty() && d.content.empty()) reasoning_tokens_ += int64_t(ev.tokens.size());
    if (!d.reasoning_content.empty()) on_reasoning(d.reasoning_content);
    if (!d.content.empty()) on_content(d.content);
    completion_tokens_ += int64_t(ev.tokens.size());
    if (ev.finished) {
        finished_ = true;
        finish_reason_ = ev.finish_reason;
        error_ = ev.error;
        completion_tokens_ = ev.completion_tokens;
        finish_response();
    }
}

std::string ResponsesBuilder::first_chunks() {
    streaming_ = true;
    out_.clear();
    const ojson start = snapshot("in_progress");
    emit("response.created", {{"response", start}});
    emit("response.in_progress", {{"response", start}});
    return std::move(out_);
}

std::string ResponsesBuilder::stream(const std::vector<runtime::OutputEvent>& events) {
    streaming_ = true;
    out_.clear();
    for (const runtime::OutputEvent& ev : events) apply(ev);
    return std::move(out_);
}

std::string ResponsesBuilder::last_chunks() {
    out_.clear();
    if (!finished_) {
        finished_ = true;
        finish_reason_ = "error";
        error_ = "generation ended without a final event";
    }
    finish_response();
    return std::move(out_);
}

void ResponsesBuilder::absorb(const std::vector<runtime::OutputEvent>& events) {
    for (const runtime::OutputEvent& ev : events) apply(ev);
}

ojson ResponsesBuilder::final_json() const { return snapshot(status().c_str()); }

std::optional<ApiError> ResponsesBuilder::failure() const {
    if (!finished_) return std::nullopt;
    return generation_failure(finish_reason_, error_, req_.constraint.param);
}

}  // namespace flashseek::server
