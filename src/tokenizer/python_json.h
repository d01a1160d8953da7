// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it (", " and ": " separators, insertion
// order, Python float repr), because the DeepSeek-V4 prompt embeds tool schemas and arguments serialized that way.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace flashseek::chat {

std::string python_json_dumps(const nlohmann::ordered_json& value);
std::string python_json_string(std::string_view s);  // a quoted, escaped JSON string

}  // namespace flashseek::chat
