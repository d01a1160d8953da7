// OpenAI response assembly (see response_builder.h). The same per-event path serves streaming and non-streaming,
// so the concatenated SSE deltas and the non-streamed message are built from identical pieces.
#include "server/response_builder.h"

#include "scheduler/token_constraint.h"

namespace flashseek::server {

using ojson = nlohmann::ordered_json;

namespace {
ojson bytes_of(const std::string& s) {
    ojson b = ojson::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}
// Characters as OpenAI and vLLM count text_offset (Python str length: code points). A byte that cannot start a
// code point (a continuation byte) adds none; a token that is a partial character counts its lead byte only.
size_t code_points(std::string_view bytes) {
    size_t n = 0;
    for (unsigned char b : bytes) n += (b & 0xC0) != 0x80;
    return n;
}
std::string tool_call_id(const std::string& req_id, size_t choice, size_t k) {
    return fmt::format("call_{}_{}_{}", req_id.substr(req_id.find('-') + 1), choice, k);
}
// Completions logprobs: OpenAI's four parallel arrays, one entry per token of the returned text.
ojson empty_completion_logprobs() {
    return ojson{{"tokens", ojson::array()}, {"token_logprobs", ojson::array()}, {"top_logprobs", ojson::array()},
                 {"text_offset", ojson::array()}};
}
void push_completion_logprob(ojson& lp, ojson token, ojson logprob, ojson top, size_t text_offset) {
    lp["tokens"].push_back(std::move(token));
    lp["token_logprobs"].push_back(std::move(logprob));
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(text_offset);
}
// Appends the entries of `more` (the same shape) after those of lp.
void append_completion_logprobs(ojson& lp, const ojson& more) {
    for (auto it = more.begin(); it != more.end(); ++it) {
        ojson& entries = lp[it.key()];
        entries.insert(entries.end(), it->begin(), it->end());
    }
}
}  // namespace

ResponseBuilder::ResponseBuilder(const ParsedRequest& req, const tokenizer::Tokenizer& tok, std::string id,
                                 int64_t created, const std::vector<std::vector<int32_t>>& prompts)
    : req_(req), tok_(tok), id_(std::move(id)), created_(created), prompts_(prompts) {
    choices_.resize(req.prompt_count() * size_t(req.n));
    if (req.endpoint == Endpoint::Chat)
        for (auto& c : choices_) c.parser = std::make_unique<chat::StreamingParser>(req.chat.thinking);
    else
        for (auto& c : choices_) c.cmpl_logprobs = empty_completion_logprobs();
    if (req.echo) {
        // Text prompts come back as sent; token-id prompts as their decoded text.
        for (size_t p = 0; p < prompts_.size(); ++p) {
            prompt_texts_.push_back(p < req.prompt_texts.size() ? req.prompt_texts[p]
                                                                : tok.decode(prompts_[p], req.skip_special_tokens));
            prompt_text_chars_.push_back(code_points(prompt_texts_.back()));
        }
    }
}

ojson ResponseBuilder::vllm_prompt_logprobs(size_t choice) const {
    const std::vector<int32_t>& ids = prompt_of(choice);
    const Choice& c = choices_.at(choice);
    ojson out = ojson::array({nullptr});  // the first prompt token has no logprob
    auto entry = [&](int32_t token, float logprob, int64_t rank) {
        return ojson{{"logprob", logprob},
                     {"rank", rank},
                     {"decoded_token", tokenizer::utf8_lossy(tok_.token_bytes(token))}};
    };
    for (size_t i = 0; i < c.prompt_scores.size() && i + 1 < ids.size(); ++i) {
        const ScoredToken& s = c.prompt_scores[i];
        ojson d = ojson::object();
        d[std::to_string(s.token)] = entry(s.token, s.logprob, s.rank);
        for (size_t k = 0; k < s.top.size() && int(k) < req_.prompt_logprobs; ++k)
            if (!d.contains(std::to_string(s.top[k].first)))
                d[std::to_string(s.top[k].first)] = entry(s.top[k].first, s.top[k].second, int64_t(k) + 1);
        out.push_back(std::move(d));
    }
    return out;
}

void ResponseBuilder::append_echo_logprobs(size_t choice, ojson& lp) const {
    const std::vector<int32_t>& ids = prompt_of(choice);
    const Choice& c = choices_.at(choice);
    size_t offset = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string& bytes = tok_.token_bytes(ids[i]);
        if (i == 0 || i - 1 >= c.prompt_scores.size()) {
            push_completion_logprob(lp, tokenizer::utf8_lossy(bytes), nullptr, nullptr, offset);
        } else {
            const ScoredToken& s = c.prompt_scores[i - 1];
            push_completion_logprob(lp, tokenizer::utf8_lossy(bytes), s.logprob, completion_top_logprobs(s.top),
                                    offset);
        }
        offset += code_points(bytes);
    }
}

ojson ResponseBuilder::completion_top_logprobs(const std::vector<std::pair<int32_t, float>>& top) const {
    ojson out = ojson::object();
    for (size_t k = 0; k < top.size() && int(k) < req_.top_logprobs; ++k)
        out[tokenizer::utf8_lossy(tok_.token_bytes(top[k].first))] = top[k].second;
    return out;
}

std::string ResponseBuilder::sse(const ojson& j) const {
    return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

ojson ResponseBuilder::chunk_base() const {
    ojson j;
    j["id"] = id_;
    j["object"] = req_.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = created_;
    j["model"] = req_.model;
    j["system_fingerprint"] = "flashseek";
    return j;
}

ojson ResponseBuilder::token_logprob(const runtime::TokenOut& t) const {
    const std::string& b = tok_.token_bytes(t.id);
    ojson e;
    e["token"] = tokenizer::utf8_lossy(b);
    e["logprob"] = t.logprob;
    e["bytes"] = bytes_of(b);
    ojson top = ojson::array();
    for (size_t i = 0; i < t.top.size() && int(i) < req_.top_logprobs; ++i) {
        const std::string& tb = tok_.token_bytes(t.top[i].first);
        top.push_back(ojson{{"token", tokenizer::utf8_lossy(tb)}, {"logprob", t.top[i].second}, {"bytes", bytes_of(tb)}});
    }
    e["top_logprobs"] = top;
    return e;
}

std::string ResponseBuilder::final_reason(const Choice& c) const {
    if (req_.endpoint == Endpoint::Chat && !c.parsed.tool_calls.empty()) return "tool_calls";
    return c.finish_reason;
}

ojson ResponseBuilder::apply(const runtime::OutputEvent& ev, bool streaming) {
    Choice& c = choices_.at(size_t(ev.choice));
    ojson delta = ojson::object();
    ojson lp = nullptr;
    const bool chat = req_.endpoint == Endpoint::Chat;
    c.prompt_scores.insert(c.prompt_scores.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
    // Streaming sends the prompt side (echo, prompt_logprobs) once all of it is known: with the first token or the end.
    const bool send_prompt = streaming && !c.prompt_sent && (!ev.tokens.empty() || ev.finished);
    if (send_prompt) c.prompt_sent = true;
    const bool echo_now = send_prompt && req_.echo;
    if (echo_now && req_.logprobs) {
        lp = empty_completion_logprobs();
        append_echo_logprobs(size_t(ev.choice), lp);
    }
    if (req_.logprobs && !ev.tokens.empty()) {
        if (chat) {
            ojson content = ojson::array();
            for (const auto& t : ev.tokens) {
                ojson e = token_logprob(t);
                c.logprobs.push_back(e);
                content.push_back(std::move(e));
            }
            lp = ojson{{"content", content}};
        } else {
            if (lp.is_null()) lp = empty_completion_logprobs();  // else the tokens follow the echoed prompt's entries
            // text_offset counts code points of the returned text, which starts with the echoed prompt.
            const size_t offset_base =
                req_.echo ? prompt_text_chars_.at(size_t(ev.choice) / size_t(req_.n)) : 0;
            for (const auto& t : ev.tokens) {
                const std::string s = tokenizer::utf8_lossy(tok_.token_bytes(t.id));
                const ojson top = completion_top_logprobs(t.top);
                push_completion_logprob(lp, s, t.logprob, top, offset_base + c.text_chars);
                push_completion_logprob(c.cmpl_logprobs, s, t.logprob, top, offset_base + c.text_chars);
                c.text_chars += code_points(tok_.token_bytes(t.id));
            }
        }
    }
    std::string reasoning_piece, content_piece;
    if (chat) {
        chat::StreamingParser::Delta d = c.parser->push(ev.text);
        if (ev.finished) {
            chat::StreamingParser::Delta last = c.parser->finish(&c.parsed);
            d.reasoning_content += last.reasoning_content;
            d.content += last.content;
        }
        if (!d.reasoning_content.empty() && d.content.empty()) c.reasoning_tokens += int64_t(ev.tokens.size());
        reasoning_piece = std::move(d.reasoning_content);
        content_piece = std::move(d.content);
        c.reasoning += reasoning_piece;
        c.text += content_piece;
    } else {
        content_piece = ev.text;
        c.text += ev.text;
    }
    c.completion_tokens += int64_t(ev.tokens.size());
    if (ev.finished) {
        c.finished = true;
        c.finish_reason = ev.finish_reason;
        c.error = ev.error;
        c.completion_tokens = ev.completion_tokens;
    }
    if (!streaming) return nullptr;

    ojson choice;
    choice["index"] = ev.choice;
    if (chat) {
        if (!reasoning_piece.empty()) delta["reasoning_content"] = reasoning_piece;
        if (!content_piece.empty()) delta["content"] = content_piece;
        if (ev.finished && !c.parsed.tool_calls.empty()) {
            ojson calls = ojson::array();
            for (size_t k = 0; k < c.parsed.tool_calls.size(); ++k)
                calls.push_back(ojson{{"index", k},
                                      {"id", tool_call_id(id_, size_t(ev.choice), k)},
                                      {"type", "function"},
                                      {"function", {{"name", c.parsed.tool_calls[k].name},
                                                    {"arguments", c.parsed.tool_calls[k].arguments}}}});
            delta["tool_calls"] = calls;
        }
        choice["delta"] = delta;
    } else {
        choice["text"] = echo_now ? echo_text(size_t(ev.choice)) + content_piece : content_piece;
    }
    choice["logprobs"] = lp;
    if (send_prompt && req_.prompt_logprobs >= 0) choice["prompt_logprobs"] = vllm_prompt_logprobs(size_t(ev.choice));
    choice["finish_reason"] = ev.finished && (c.finish_reason == "stop" || c.finish_reason == "length")
                                  ? ojson(final_reason(c))
                                  : ojson(nullptr);
    return choice;
}

std::string ResponseBuilder::first_chunks() {
    if (req_.endpoint != Endpoint::Chat) return {};
    std::string out;
    for (size_t i = 0; i < choices_.size(); ++i) {
        ojson j = chunk_base();
        j["choices"] = ojson::array({ojson{{"index", i},
                                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                                           {"logprobs", nullptr},
                                           {"finish_reason", nullptr}}});
        if (req_.include_usage) j["usage"] = nullptr;
        out += sse(j);
    }
    return out;
}

std::string ResponseBuilder::stream(const std::vector<runtime::OutputEvent>& events) {
    std::string out;
    for (const runtime::OutputEvent& ev : events) {
        ojson choice = apply(ev, true);
        const Choice& c = choices_.at(size_t(ev.choice));
        const bool abnormal = ev.finished && c.finish_reason != "stop" && c.finish_reason != "length";
        if (req_.endpoint == Endpoint::Chat && choice.contains("prompt_logprobs")) {
            // vLLM puts a chat response's prompt_logprobs beside its choices.
            ojson j = chunk_base();
            j["choices"] = ojson::array();
            j["prompt_logprobs"] = choice["prompt_logprobs"];
            if (req_.include_usage) j["usage"] = nullptr;
            out += sse(j);
            choice.erase("prompt_logprobs");
        }
        const bool has_payload = choice["finish_reason"] != nullptr || choice["logprobs"] != nullptr ||
                                 (choice.contains("delta") && !choice["delta"].empty()) ||
                                 (choice.contains("text") && !choice["text"].get<std::string>().empty());
        if (has_payload) {
            ojson j = chunk_base();
            j["choices"] = ojson::array({choice});
            if (req_.include_usage) j["usage"] = nullptr;
            out += sse(j);
        }
        if (abnormal && !error_sent_) {
            // Streams cannot change their status code any more: an error event, then [DONE] as usual.
            error_sent_ = true;
            const std::optional<ApiError> f = failure();
            if (f) out += "data: " + error_body(*f) + "\n\n";
        }
    }
    return out;
}

ojson ResponseBuilder::usage() const {
    int64_t prompt = 0, completion = 0, reasoning = 0;
    for (const auto& p : prompts_) prompt += int64_t(p.size());
    for (const Choice& c : choices_) {
        completion += c.completion_tokens;
        reasoning += c.reasoning_tokens;
    }
    return ojson{{"prompt_tokens", prompt},
                 {"completion_tokens", completion},
                 {"total_tokens", prompt + completion},
                 {"prompt_tokens_details", {{"cached_tokens", 0}}},
                 {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
}

std::string ResponseBuilder::last_chunks() {
    std::string out;
    if (req_.include_usage) {
        ojson j = chunk_base();
        j["choices"] = ojson::array();
        j["usage"] = usage();
        out += sse(j);
    }
    out += "data: [DONE]\n\n";
    return out;
}

void ResponseBuilder::absorb(const std::vector<runtime::OutputEvent>& events) {
    for (const runtime::OutputEvent& ev : events) apply(ev, false);
}

std::optional<ApiError> generation_failure(const std::string& finish_reason, const std::string& error,
                                           const std::string& constraint_param) {
    if (finish_reason == "stop" || finish_reason == "length") return std::nullopt;
    if (finish_reason == "deadline")
        return ApiError(408, "the request did not finish before its deadline (--request-timeout)", "", "timeout_error",
                        "deadline_exceeded");
    if (finish_reason == "shutdown" || finish_reason == "cancelled")
        return ApiError(503, "the server is shutting down", "", "service_unavailable_error", "shutting_down");
    // A request the scheduler refused (it validates prompt ids and sizes again) is the client's fault.
    if (error.rfind("prompt", 0) == 0 || error.rfind("max_tokens", 0) == 0 || error.rfind("debug_forced_tokens", 0) == 0)
        return ApiError(400, error, error.substr(0, error.find(':')));
    // A grammar that accepts no output (or reaches a dead end) is the client's constraint at fault.
    if (error.find(kConstraintDeadEnd) != std::string::npos)
        return ApiError(400, fmt::format("'{}' cannot be used for constrained decoding: {}", constraint_param,
                                         kConstraintDeadEnd),
                        constraint_param);
    return ApiError(500, "generation failed: " + error, "", "server_error", "engine_error");
}

std::optional<ApiError> ResponseBuilder::failure() const {
    for (const Choice& c : choices_)
        if (c.finished)
            if (std::optional<ApiError> f = generation_failure(c.finish_reason, c.error, req_.constraint.param)) return f;
    return std::nullopt;
}

ojson ResponseBuilder::final_json() const {
    ojson j;
    const bool chat = req_.endpoint == Endpoint::Chat;
    j["id"] = id_;
    j["object"] = chat ? "chat.completion" : "text_completion";
    j["created"] = created_;
    j["model"] = req_.model;
    j["system_fingerprint"] = "flashseek";
    ojson choices = ojson::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        ojson ch;
        ch["index"] = i;
        if (chat) {
            ojson msg;
            msg["role"] = "assistant";
            msg["content"] = c.text.empty() && !c.parsed.tool_calls.empty() ? ojson(nullptr) : ojson(c.text);
            msg["reasoning_content"] = c.reasoning.empty() ? ojson(nullptr) : ojson(c.reasoning);
            if (!c.parsed.tool_calls.empty()) {
                ojson calls = ojson::array();
                for (size_t k = 0; k < c.parsed.tool_calls.size(); ++k)
                    calls.push_back(ojson{{"id", tool_call_id(id_, i, k)},
                                          {"type", "function"},
                                          {"function", {{"name", c.parsed.tool_calls[k].name},
                                                        {"arguments", c.parsed.tool_calls[k].arguments}}}});
                msg["tool_calls"] = calls;
            }
            ch["message"] = msg;
            ch["logprobs"] = req_.logprobs ? ojson{{"content", c.logprobs}} : ojson(nullptr);
        } else {
            ch["text"] = req_.echo ? echo_text(i) + c.text : c.text;
            if (req_.logprobs) {
                ojson lp = empty_completion_logprobs();
                if (req_.echo) append_echo_logprobs(i, lp);
                append_completion_logprobs(lp, c.cmpl_logprobs);
                ch["logprobs"] = lp;
            } else {
                ch["logprobs"] = nullptr;
            }
            if (req_.prompt_logprobs >= 0) ch["prompt_logprobs"] = vllm_prompt_logprobs(i);
        }
        ch["finish_reason"] = final_reason(c);
        choices.push_back(ch);
    }
    j["choices"] = choices;
    if (chat && req_.prompt_logprobs >= 0 && !choices_.empty()) j["prompt_logprobs"] = vllm_prompt_logprobs(0);
    j["usage"] = usage();
    return j;
}

}  // namespace flashseek::server
