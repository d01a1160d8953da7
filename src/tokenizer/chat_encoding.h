// DeepSeek-V4 chat format (docs/model.md §4.2, official encoding_dsv4.py): renders OpenAI-style requests into a
// prompt made of segments that are either control text (template, role markers: special tokens matched literally) or
// content (user/tool/document text: encoded without special-token matching, so it can never yield control ids), and
// parses generated text back into reasoning_content, content and tool_calls.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace flashseek::chat {

using tokenizer::TokenId;

enum class ThinkingMode { chat, thinking };

struct ToolCall {
    std::string id;         // OpenAI tool_call id (used to order tool results)
    std::string name;
    std::string arguments;  // JSON text of an object, as in the OpenAI API
};

struct Message {
    std::string role;  // system, user, assistant, tool, developer, latest_reminder
    std::optional<std::string> content;
    std::optional<std::string> reasoning_content;  // assistant
    std::vector<ToolCall> tool_calls;              // assistant
    std::string tool_call_id;                      // tool
    nlohmann::ordered_json tools;                  // system/developer: OpenAI tools array (null if none)
    nlohmann::ordered_json response_format;        // system/developer (null if none)
    std::optional<std::string> task;               // action, query, authority, domain, title, read_url
    bool wo_eos = false;                           // assistant turn left open (prefill continuation)
};

enum class ReasoningEffort { none, high, max };

struct ChatRequest {
    std::vector<Message> messages;
    ThinkingMode thinking = ThinkingMode::chat;
    ReasoningEffort reasoning_effort = ReasoningEffort::none;
    bool drop_thinking = true;
    bool add_bos = true;

    // Reads an OpenAI chat request body: messages (content as string or text parts), top-level tools (attached to the
    // first system message, inserted if absent), thinking ({"type":"enabled"|"disabled"} or bool, or
    // chat_template_kwargs.thinking / enable_thinking), reasoning_effort (low/medium/high → high; xhigh/max → max),
    // drop_thinking. Throws flashseek::Error naming the offending field, e.g. "messages[2].role". Note: a
    // nlohmann::json body has sorted keys, so tool schemas render in sorted key order; use from_ordered_json (parse
    // the body with nlohmann::ordered_json) to reproduce the official encoder byte for byte.
    static ChatRequest from_json(const nlohmann::json& body, ThinkingMode default_thinking = ThinkingMode::chat);
    // Same, keeping the key order of the request (tool schemas are rendered in that order, as Python would).
    static ChatRequest from_ordered_json(const nlohmann::ordered_json& body,
                                         ThinkingMode default_thinking = ThinkingMode::chat);

private:
    static ChatRequest parse_request(const nlohmann::ordered_json& body, ThinkingMode default_thinking);
};

struct PromptSegment {
    std::string text;
    bool is_control = false;  // true: template text where special-token text is matched; false: untrusted content
};

// Renders the prompt exactly as encoding_dsv4.encode_messages would (the concatenated text is identical).
std::vector<PromptSegment> render_prompt(const ChatRequest& request);
std::string prompt_text(const std::vector<PromptSegment>& segments);
// Ids of the prompt: added tokens are recognised only inside control segments; text between them (control template
// text and content alike) is concatenated and BPE-encoded as HF would encode the whole string.
std::vector<TokenId> encode_prompt(const tokenizer::Tokenizer& tok, const std::vector<PromptSegment>& segments);

// Convenience for callers that want both: the prompt text (for logs, /tokenize) and its ids.
struct EncodedPrompt {
    std::string text;
    std::vector<TokenId> ids;
};
EncodedPrompt encode_chat(const tokenizer::Tokenizer& tok, const ChatRequest& request);

// ---- Output parsing -------------------------------------------------------------------------------------------

struct ParsedToolCall {
    std::string name;
    std::string arguments;  // JSON object text, e.g. {"city": "Paris", "days": 3}
};

struct ParsedMessage {
    std::string reasoning_content;
    std::string content;
    std::vector<ParsedToolCall> tool_calls;
    bool saw_eos = false;           // <｜end▁of▁sentence｜> text was found
    std::vector<std::string> errors;  // malformed DSML etc.: the raw text is kept in content instead of being lost
};

// Whole-text parse of generated text (decoded with special tokens kept). In thinking mode the text starts inside
// the reasoning (the prompt ended with <think>). Lenient: a missing EOS or </think> (length stop) is accepted.
ParsedMessage parse_completion(std::string_view text, ThinkingMode mode);

// Incremental parse for streaming: feed the text deltas of an IncrementalDecoder created with skip_special = false
// (the parser needs </think>, ｜DSML｜ and the EOS text), get reasoning/content deltas, get reasoning/content deltas as soon as they cannot be
// the start of a marker; tool calls are complete at finish().
class StreamingParser {
public:
    explicit StreamingParser(ThinkingMode mode);
    struct Delta {
        std::string reasoning_content;
        std::string content;
        bool empty() const { return reasoning_content.empty() && content.empty(); }
    };
    Delta push(std::string_view text);
    // End of generation: returns the final delta (held-back text) and fills `result` with the whole message.
    Delta finish(ParsedMessage* result);
    bool in_tool_calls() const { return state_ == State::tool_calls; }

private:
    enum class State { reasoning, content, tool_calls, done };
    State state_;
    ThinkingMode mode_;
    std::string pending_;     // text not yet classified (possible marker prefix)
    std::string tool_text_;   // raw DSML block
    ParsedMessage message_;
};

}  // namespace flashseek::chat
