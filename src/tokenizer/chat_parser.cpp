// Parser of DeepSeek-V4 generated text (encoding_dsv4.parse_message_from_completion_text semantics, but lenient on
// truncation): reasoning up to </think>, content up to EOS or the DSML tool-call block, tool calls as JSON arguments.
// The whole-text parse is the streaming parser fed once, so both always agree.
#include <algorithm>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/python_json.h"
#include "util/error.h"

namespace flashseek::chat {

namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kThinkEnd = "</think>";
const std::string kDsml = "｜DSML｜";
const std::string kToolCallsStart = "\n\n<" + kDsml + "tool_calls";
const std::string kToolCallsEnd = "</" + kDsml + "tool_calls>";
const std::string kInvoke = "<" + kDsml + "invoke";
const std::string kInvokeEnd = "</" + kDsml + "invoke";
const std::string kParam = "<" + kDsml + "parameter";
const std::string kParamEnd = "</" + kDsml + "parameter";

// Earliest occurrence of any marker at or after `from`; returns npos if none, and the marker index in *which.
std::size_t find_first(std::string_view text, std::size_t from, const std::vector<const std::string*>& markers,
                       std::size_t* which) {
    std::size_t best = std::string_view::npos;
    for (std::size_t k = 0; k < markers.size(); ++k) {
        const std::size_t p = text.find(*markers[k], from);
        if (p < best) best = p, *which = k;
    }
    return best;
}

// Length of the longest suffix of `text` that is a proper prefix of one of the markers (text that must be held back
// because the next delta may complete a marker).
std::size_t marker_prefix_suffix(std::string_view text, const std::vector<const std::string*>& markers) {
    std::size_t best = 0;
    for (const auto* m : markers) {
        const std::size_t max_len = std::min(text.size(), m->size() - 1);
        for (std::size_t len = max_len; len > best; --len) {
            if (text.substr(text.size() - len) == std::string_view(*m).substr(0, len)) {
                best = len;
                break;
            }
        }
    }
    return best;
}

std::string_view trim_ws(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// Parses the DSML block that follows "\n\n<｜DSML｜tool_calls" (block = the text after that marker). Returns false
// with *error set when the block is malformed.
bool parse_tool_calls(std::string_view block, std::vector<ParsedToolCall>* calls, std::string* error) {
    std::size_t pos = 0;
    std::size_t which = 0;
    auto expect_gt = [&](std::string_view between, const char* after) {
        if (trim_ws(between) != ">") {
            *error = fmt::format("tool calls: expected '>' after {}, got '{}'", after, std::string(between.substr(0, 40)));
            return false;
        }
        return true;
    };
    std::size_t p = find_first(block, pos, {&kInvoke, &kToolCallsEnd}, &which);
    if (p == std::string_view::npos) return *error = "tool calls: no invoke and no closing tag", false;
    if (!expect_gt(block.substr(pos, p - pos), "<｜DSML｜tool_calls")) return false;
    while (which == 0) {  // at "<｜DSML｜invoke"
        pos = p + kInvoke.size();
        p = find_first(block, pos, {&kParam, &kInvokeEnd}, &which);
        if (p == std::string_view::npos) return *error = "tool calls: invoke without parameters or closing tag", false;
        std::string_view head = trim_ws(block.substr(pos, p - pos));  // name="F">
        if (head.substr(0, 6) != "name=\"" || head.size() < 8 || head.substr(head.size() - 2) != "\">")
            return *error = fmt::format("tool calls: bad invoke header '{}'", std::string(head.substr(0, 60))), false;
        ParsedToolCall call;
        call.name = tokenizer::utf8_lossy(head.substr(6, head.size() - 8));
        std::string args = "{";
        std::vector<std::string> seen;
        while (which == 0) {  // at "<｜DSML｜parameter"
            pos = p + kParam.size();
            const std::size_t end = block.find(kParamEnd, pos);
            if (end == std::string_view::npos) return *error = "tool calls: parameter without closing tag", false;
            std::string_view param = block.substr(pos, end - pos);  //  name="k" string="true">v
            if (param.substr(0, 7) != " name=\"") return *error = "tool calls: bad parameter header", false;
            param.remove_prefix(7);
            const std::size_t t = param.find("\" string=\"true\">");
            const std::size_t f = param.find("\" string=\"false\">");
            const bool is_string = t != std::string_view::npos && (f == std::string_view::npos || t < f);
            const std::size_t cut = is_string ? t : f;
            if (cut == std::string_view::npos) return *error = "tool calls: parameter lacks string=\"true|false\"", false;
            // Generated text decoded by the tokenizer is valid UTF-8; other callers may pass anything, and the
            // arguments must stay valid JSON, so invalid bytes become U+FFFD.
            const std::string key = tokenizer::utf8_lossy(param.substr(0, cut));
            const std::string value_text = tokenizer::utf8_lossy(param.substr(cut + (is_string ? 16 : 17)));
            const std::string_view value = value_text;
            if (std::find(seen.begin(), seen.end(), key) != seen.end())
                return *error = fmt::format("tool calls: duplicate parameter '{}'", key), false;
            seen.push_back(key);
            if (seen.size() > 1) args += ", ";
            args += python_json_string(key) + ": ";
            if (is_string) {
                args += python_json_string(value);
            } else {
                // A string="false" value is JSON text; if the model wrote something that is not JSON, keep it as a
                // string so the arguments stay valid JSON, and report it.
                // (nlohmann's accept() stops at a NUL byte, so text with one is never taken as JSON.)
                const bool valid = value.find('\0') == std::string_view::npos && nlohmann::json::accept(value);
                if (valid) {
                    args += std::string(trim_ws(value));
                } else {
                    args += python_json_string(value);
                    *error = fmt::format("tool calls: parameter '{}' has string=\"false\" but is not JSON", key);
                }
            }
            pos = end + kParamEnd.size();
            p = find_first(block, pos, {&kParam, &kInvokeEnd}, &which);
            if (p == std::string_view::npos) return *error = "tool calls: invoke without closing tag", false;
            if (!expect_gt(block.substr(pos, p - pos), "</｜DSML｜parameter")) return false;
        }
        args += "}";
        call.arguments = std::move(args);
        calls->push_back(std::move(call));
        pos = p + kInvokeEnd.size();
        p = find_first(block, pos, {&kInvoke, &kToolCallsEnd}, &which);
        if (p == std::string_view::npos) return *error = "tool calls: missing </｜DSML｜tool_calls>", false;
        if (!expect_gt(block.substr(pos, p - pos), "</｜DSML｜invoke")) return false;
    }
    const std::string_view rest = block.substr(p + kToolCallsEnd.size());
    if (!trim_ws(rest).empty()) {
        *error = fmt::format("tool calls: unexpected text after </｜DSML｜tool_calls>: '{}'",
                             std::string(rest.substr(0, 40)));
    }
    return true;
}

}  // namespace

StreamingParser::StreamingParser(ThinkingMode mode)
    : state_(mode == ThinkingMode::thinking ? State::reasoning : State::content), mode_(mode) {}

StreamingParser::Delta StreamingParser::push(std::string_view text) {
    Delta delta;
    pending_ += text;
    while (!pending_.empty()) {
        if (state_ == State::done) {
            if (!trim_ws(pending_).empty()) message_.errors.push_back("text after end of sentence ignored");
            pending_.clear();
            break;
        }
        if (state_ == State::tool_calls) {
            tool_text_ += pending_;
            pending_.clear();
            const std::size_t close = tool_text_.find(kToolCallsEnd);
            if (close != std::string::npos) {
                // Whatever follows the closing tag is only EOS (or junk reported by the block parser).
                const std::size_t eos = tool_text_.find(kEos, close);
                if (eos != std::string::npos) {
                    tool_text_.resize(eos);
                    message_.saw_eos = true;
                    state_ = State::done;
                }
            }
            break;
        }
        const bool reasoning = state_ == State::reasoning;
        const std::vector<const std::string*> markers =
            reasoning ? std::vector<const std::string*>{&kThinkEnd, &kToolCallsStart, &kEos}
                      : std::vector<const std::string*>{&kToolCallsStart, &kEos};
        std::size_t which = 0;
        const std::size_t p = find_first(pending_, 0, markers, &which);
        std::string& out = reasoning ? delta.reasoning_content : delta.content;
        std::string& all = reasoning ? message_.reasoning_content : message_.content;
        if (p == std::string::npos) {
            const std::size_t hold = marker_prefix_suffix(pending_, markers);
            out += pending_.substr(0, pending_.size() - hold);
            all += pending_.substr(0, pending_.size() - hold);
            pending_.erase(0, pending_.size() - hold);
            break;
        }
        out += pending_.substr(0, p);
        all += pending_.substr(0, p);
        const std::string& marker = *markers[which];
        pending_.erase(0, p + marker.size());
        if (&marker == &kThinkEnd) {
            state_ = State::content;
        } else if (&marker == &kToolCallsStart) {
            state_ = State::tool_calls;
        } else {
            message_.saw_eos = true;
            state_ = State::done;
        }
    }
    return delta;
}

StreamingParser::Delta StreamingParser::finish(ParsedMessage* result) {
    Delta delta;
    // Held-back text that never became a marker is ordinary text.
    if (!pending_.empty() && (state_ == State::reasoning || state_ == State::content)) {
        std::string& out = state_ == State::reasoning ? delta.reasoning_content : delta.content;
        std::string& all = state_ == State::reasoning ? message_.reasoning_content : message_.content;
        out += pending_;
        all += pending_;
        pending_.clear();
    }
    if (!tool_text_.empty() || state_ == State::tool_calls) {
        std::string error;
        std::vector<ParsedToolCall> calls;
        if (parse_tool_calls(tool_text_, &calls, &error)) {
            message_.tool_calls = std::move(calls);
            if (!error.empty()) message_.errors.push_back(error);
        } else {
            // Malformed DSML: keep the raw text as content rather than losing it.
            message_.errors.push_back(error);
            const std::string raw = kToolCallsStart + tool_text_;
            delta.content += raw;
            message_.content += raw;
        }
        tool_text_.clear();
    }
    if (state_ == State::reasoning && mode_ == ThinkingMode::thinking)
        message_.errors.push_back("generation ended inside the reasoning (no </think>)");
    state_ = State::done;
    if (result) *result = message_;
    return delta;
}

ParsedMessage parse_completion(std::string_view text, ThinkingMode mode) {
    StreamingParser parser(mode);
    parser.push(text);
    ParsedMessage result;
    parser.finish(&result);
    return result;
}

}  // namespace flashseek::chat
