// Files linked into the binary at build time (the default model's tokenizer), so that the flashseek binary is
// self-contained and never reads the source tree at run time.
#pragma once
#include <string_view>

namespace flashseek {

std::string_view embedded_tokenizer_json();         // assets/tokenizer/deepseek-v4/tokenizer.json
std::string_view embedded_tokenizer_config_json();  // assets/tokenizer/deepseek-v4/tokenizer_config.json

}  // namespace flashseek
