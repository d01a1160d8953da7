// DeepSeek-V4 prompt rendering (encoding_dsv4.encode_messages semantics) and request parsing; see chat_encoding.h.
// Every piece of text is tagged: template and markers are control, anything that came from the request is content.
#include "tokenizer/chat_encoding.h"

#include <map>

#include "tokenizer/python_json.h"
#include "util/error.h"

namespace flashseek::chat {

namespace {

const char* const kBos = "<｜begin▁of▁sentence｜>";
const char* const kEos = "<｜end▁of▁sentence｜>";
const char* const kThinkStart = "<think>";
const char* const kThinkEnd = "</think>";
const char* const kUser = "<｜User｜>";
const char* const kAssistant = "<｜Assistant｜>";
const char* const kLatestReminder = "<｜latest_reminder｜>";
const char* const kDsml = "｜DSML｜";

const char* const kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

const char* const kResponseFormatPrefix =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

std::string tools_template_head() {
    const std::string d = kDsml;
    return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
           "writing a \"<" + d + "tool_calls>\" block like the following:\n\n<" + d + "tool_calls>\n<" + d +
           "invoke name=\"$TOOL_NAME\">\n<" + d +
           "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d + "parameter>\n...\n</" +
           d + "invoke>\n<" + d + "invoke name=\"$TOOL_NAME2\">\n...\n</" + d + "invoke>\n</" + d +
           "tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all other types "
           "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\nIf "
           "thinking_mode is enabled (triggered by " + std::string(kThinkStart) +
           "), you MUST output your complete reasoning inside " + kThinkStart + "..." + kThinkEnd +
           " BEFORE any tool calls or final response.\n\nOtherwise, output directly after " + kThinkEnd +
           " with tool calls or final response.\n\n### Available Tool Schemas\n\n";
}
const char* const kToolsTemplateTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

const std::map<std::string, std::string>& task_tokens() {
    static const std::map<std::string, std::string> m = {
        {"action", "<｜action｜>"}, {"query", "<｜query｜>"},   {"authority", "<｜authority｜>"},
        {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
    return m;
}

class SegmentWriter {
public:
    void control(std::string_view s) { add(s, true); }
    void content(std::string_view s) { add(s, false); }
    std::vector<PromptSegment> take() { return std::move(segments_); }

private:
    void add(std::string_view s, bool is_control) {
        if (s.empty()) return;
        if (!segments_.empty() && segments_.back().is_control == is_control) segments_.back().text += s;
        else segments_.push_back({std::string(s), is_control});
    }
    std::vector<PromptSegment> segments_;
};

// A message after tool messages have been merged into user turns (encoding_dsv4.merge_tool_messages).
struct Block {
    bool is_tool_result = false;
    std::string text;
    std::string tool_use_id;
};
struct Turn {
    const Message* source = nullptr;  // fields other than the user blocks come from here
    std::string role;
    std::vector<Block> blocks;        // user turns
    bool has_task = false;
    bool drop_reasoning = false;
};

std::vector<Turn> merge_tool_messages(const std::vector<Message>& messages) {
    std::vector<Turn> merged;
    for (const auto& m : messages) {
        if (m.role == "tool") {
            Block b{true, m.content.value_or(""), m.tool_call_id};
            if (!merged.empty() && merged.back().role == "user") {
                merged.back().blocks.push_back(std::move(b));
            } else {
                Turn t;
                t.source = &m;
                t.role = "user";
                t.blocks.push_back(std::move(b));
                merged.push_back(std::move(t));
            }
        } else if (m.role == "user") {
            Block b{false, m.content.value_or(""), {}};
            if (!merged.empty() && merged.back().role == "user" && !merged.back().has_task) {
                merged.back().blocks.push_back(std::move(b));
                // A user message merged into a turn that began with tool results contributes its task flags, as the
                // reference keeps them only on the message that starts a turn.
            } else {
                Turn t;
                t.source = &m;
                t.role = "user";
                t.has_task = m.task.has_value();
                t.blocks.push_back(std::move(b));
                merged.push_back(std::move(t));
            }
        } else {
            Turn t;
            t.source = &m;
            t.role = m.role;
            t.has_task = m.task.has_value();
            merged.push_back(std::move(t));
        }
    }
    return merged;
}

void sort_tool_results_by_call_order(std::vector<Turn>& turns) {
    std::map<std::string, std::size_t> order;
    for (auto& t : turns) {
        if (t.role == "assistant" && !t.source->tool_calls.empty()) {
            order.clear();
            for (std::size_t i = 0; i < t.source->tool_calls.size(); ++i)
                if (!t.source->tool_calls[i].id.empty()) order[t.source->tool_calls[i].id] = i;
        } else if (t.role == "user") {
            std::vector<Block> tool_blocks;
            for (const auto& b : t.blocks)
                if (b.is_tool_result) tool_blocks.push_back(b);
            if (tool_blocks.size() <= 1 || order.empty()) continue;
            auto key = [&](const Block& b) {
                const auto it = order.find(b.tool_use_id);
                return it == order.end() ? std::size_t{0} : it->second;
            };
            std::stable_sort(tool_blocks.begin(), tool_blocks.end(),
                             [&](const Block& a, const Block& b) { return key(a) < key(b); });
            std::size_t k = 0;
            for (auto& b : t.blocks)
                if (b.is_tool_result) b = tool_blocks[k++];
        }
    }
}

std::ptrdiff_t find_last_user_index(const std::vector<Turn>& turns) {
    for (std::ptrdiff_t i = static_cast<std::ptrdiff_t>(turns.size()) - 1; i >= 0; --i)
        if (turns[static_cast<std::size_t>(i)].role == "user" || turns[static_cast<std::size_t>(i)].role == "developer")
            return i;
    return -1;
}

bool has_tools(const Message& m) { return m.tools.is_array() && !m.tools.empty(); }

// Tool schemas inside the system or developer prompt: template text is control, the schemas are content.
void render_tools(const nlohmann::ordered_json& tools, std::size_t msg_index, SegmentWriter& w) {
    w.control(tools_template_head());
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const auto& t = tools[i];
        FS_CHECK(t.is_object() && t.contains("function") && t["function"].is_object(),
                 "messages[{}].tools[{}].function: missing or not an object", msg_index, i);
        if (i > 0) w.control("\n");
        w.content(python_json_dumps(t["function"]));
    }
    w.control(kToolsTemplateTail);
}

void render_tool_calls(const Message& m, std::size_t msg_index, SegmentWriter& w) {
    const std::string d = kDsml;
    w.control("\n\n<" + d + "tool_calls>\n");
    for (std::size_t i = 0; i < m.tool_calls.size(); ++i) {
        const auto& call = m.tool_calls[i];
        if (i > 0) w.control("\n");
        w.control("<" + d + "invoke name=\"");
        w.content(call.name);
        w.control("\">\n");
        nlohmann::ordered_json args;
        try {
            args = nlohmann::ordered_json::parse(call.arguments);
        } catch (const nlohmann::json::exception&) {
            // The reference wraps arguments that are not JSON as {"arguments": <raw text>}.
            args = nlohmann::ordered_json::object({{"arguments", call.arguments}});
        }
        FS_CHECK(args.is_object(), "messages[{}].tool_calls[{}].function.arguments: expected a JSON object", msg_index, i);
        bool first = true;
        for (auto it = args.begin(); it != args.end(); ++it) {
            if (!first) w.control("\n");
            first = false;
            w.control("<" + d + "parameter name=\"");
            w.content(it.key());
            const bool is_string = it.value().is_string();
            w.control(is_string ? "\" string=\"true\">" : "\" string=\"false\">");
            w.content(is_string ? it.value().get<std::string>() : python_json_dumps(it.value()));
            w.control("</" + d + "parameter>");
        }
        w.control("\n</" + d + "invoke>");
    }
    w.control("\n</" + d + "tool_calls>");
}

}  // namespace

std::vector<PromptSegment> render_prompt(const ChatRequest& request) {
    const bool thinking = request.thinking == ThinkingMode::thinking;
    std::vector<Turn> turns = merge_tool_messages(request.messages);
    sort_tool_results_by_call_order(turns);

    bool drop_thinking = request.drop_thinking;
    for (const auto& m : request.messages)
        if (has_tools(m)) drop_thinking = false;
    if (thinking && drop_thinking) {
        // Reasoning of assistant turns before the last user turn is removed; developer turns before it are dropped.
        const std::ptrdiff_t last_user = find_last_user_index(turns);
        std::vector<Turn> kept;
        for (std::size_t i = 0; i < turns.size(); ++i) {
            const auto& role = turns[i].role;
            if (role == "user" || role == "system" || role == "latest_reminder" ||
                static_cast<std::ptrdiff_t>(i) >= last_user) {
                kept.push_back(turns[i]);
            } else if (role == "assistant") {
                kept.push_back(turns[i]);
                kept.back().drop_reasoning = true;
            }
        }
        turns.swap(kept);
    }

    SegmentWriter w;
    if (request.add_bos) w.control(kBos);
    const std::ptrdiff_t last_user = find_last_user_index(turns);
    for (std::size_t index = 0; index < turns.size(); ++index) {
        const Turn& turn = turns[index];
        const Message& m = *turn.source;
        // Errors name the index in the request, not in the merged list.
        const auto msg_index = static_cast<std::size_t>(&m - request.messages.data());
        if (index == 0 && thinking && request.reasoning_effort == ReasoningEffort::max) w.control(kReasoningEffortMax);

        if (turn.role == "system" || turn.role == "developer") {
            if (turn.role == "developer") {
                FS_CHECK(m.content && !m.content->empty(), "messages[{}].content: a developer message needs content",
                         msg_index);
                w.control(kUser);
            }
            w.content(m.content.value_or(""));
            if (has_tools(m)) {
                w.control("\n\n");
                render_tools(m.tools, msg_index, w);
            }
            if (!m.response_format.is_null() && !(m.response_format.is_object() && m.response_format.empty())) {
                w.control(std::string("\n\n") + kResponseFormatPrefix);
                w.content(python_json_dumps(m.response_format));
            }
        } else if (turn.role == "user") {
            w.control(kUser);
            for (std::size_t b = 0; b < turn.blocks.size(); ++b) {
                if (b > 0) w.control("\n\n");
                if (turn.blocks[b].is_tool_result) {
                    w.control("<tool_result>");
                    w.content(turn.blocks[b].text);
                    w.control("</tool_result>");
                } else {
                    w.content(turn.blocks[b].text);
                }
            }
        } else if (turn.role == "latest_reminder") {
            w.control(kLatestReminder);
            w.content(m.content.value_or(""));
        } else if (turn.role == "assistant") {
            const bool prev_has_task = index > 0 && turns[index - 1].has_task;
            if (thinking && !prev_has_task &&
                (!drop_thinking || static_cast<std::ptrdiff_t>(index) > last_user)) {
                if (!turn.drop_reasoning) w.content(m.reasoning_content.value_or(""));
                w.control(kThinkEnd);
            }
            w.content(m.content.value_or(""));
            if (!m.tool_calls.empty()) render_tool_calls(m, msg_index, w);
            if (!m.wo_eos) w.control(kEos);
        } else {
            fail("messages[{}].role: unknown role '{}'", msg_index, turn.role);
        }

        // Transition to the next turn: nothing when a user/system turn follows; otherwise the generation prompt.
        if (index + 1 < turns.size() && turns[index + 1].role != "assistant" && turns[index + 1].role != "latest_reminder")
            continue;
        if (turn.has_task && m.task) {
            const auto it = task_tokens().find(*m.task);
            FS_CHECK(it != task_tokens().end(), "messages[{}].task: unknown task '{}' (action, query, authority, "
                     "domain, title, read_url)", msg_index, *m.task);
            if (*m.task != "action") {
                w.control(it->second);
            } else {
                w.control(kAssistant);
                w.control(thinking ? kThinkStart : kThinkEnd);
                w.control(it->second);
            }
        } else if (turn.role == "user" || turn.role == "developer") {
            w.control(kAssistant);
            const bool open_thinking =
                thinking && (!drop_thinking || static_cast<std::ptrdiff_t>(index) >= last_user);
            w.control(open_thinking ? kThinkStart : kThinkEnd);
        }
    }
    return w.take();
}

std::string prompt_text(const std::vector<PromptSegment>& segments) {
    std::string out;
    for (const auto& s : segments) out += s.text;
    return out;
}

std::vector<TokenId> encode_prompt(const tokenizer::Tokenizer& tok, const std::vector<PromptSegment>& segments) {
    // Added tokens are taken only from control text; the plain text between them (control and content together) is
    // encoded as one string, exactly as HF pre-tokenizes the text between two added tokens.
    std::vector<TokenId> ids;
    std::string plain;
    auto flush = [&] {
        if (plain.empty()) return;
        const auto part = tok.encode(plain);
        ids.insert(ids.end(), part.begin(), part.end());
        plain.clear();
    };
    for (const auto& seg : segments) {
        if (!seg.is_control) {
            if (const auto bad = tokenizer::find_invalid_utf8(seg.text))
                fail("prompt content has invalid UTF-8 at byte offset {}", *bad);
            plain += seg.text;
            continue;
        }
        for (const auto& span : tok.split_added(seg.text)) {
            if (span.id < 0) {
                plain.append(seg.text, span.begin, span.end - span.begin);
            } else {
                flush();
                ids.push_back(span.id);
            }
        }
    }
    flush();
    return ids;
}

EncodedPrompt encode_chat(const tokenizer::Tokenizer& tok, const ChatRequest& request) {
    const auto segments = render_prompt(request);
    return {prompt_text(segments), encode_prompt(tok, segments)};
}

}  // namespace flashseek::chat
