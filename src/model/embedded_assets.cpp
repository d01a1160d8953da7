// Embeds the tokenizer files with the assembler's .incbin (paths come from CMake compile definitions), which costs
// nothing at build time, unlike turning 6 MB of JSON into a C array.
#include "model/embedded_assets.h"

#ifndef FLASHSEEK_TOKENIZER_JSON_PATH
#error "FLASHSEEK_TOKENIZER_JSON_PATH must name assets/tokenizer/deepseek-v4/tokenizer.json (set by CMake)"
#endif
#ifndef FLASHSEEK_TOKENIZER_CONFIG_PATH
#error "FLASHSEEK_TOKENIZER_CONFIG_PATH must name assets/tokenizer/deepseek-v4/tokenizer_config.json (set by CMake)"
#endif

#define FLASHSEEK_INCBIN(symbol, path)                 \
    __asm__(".section .rodata\n"                       \
            ".balign 16\n"                             \
            ".global " #symbol "_begin\n"              \
            #symbol "_begin:\n"                        \
            ".incbin \"" path "\"\n"                   \
            ".global " #symbol "_end\n"                \
            #symbol "_end:\n"                          \
            ".byte 0\n"                                \
            ".previous\n")

FLASHSEEK_INCBIN(flashseek_asset_tokenizer_json, FLASHSEEK_TOKENIZER_JSON_PATH);
FLASHSEEK_INCBIN(flashseek_asset_tokenizer_config_json, FLASHSEEK_TOKENIZER_CONFIG_PATH);

extern "C" {
extern const char flashseek_asset_tokenizer_json_begin[];
extern const char flashseek_asset_tokenizer_json_end[];
extern const char flashseek_asset_tokenizer_config_json_begin[];
extern const char flashseek_asset_tokenizer_config_json_end[];
}

namespace flashseek {

std::string_view embedded_tokenizer_json() {
    return {flashseek_asset_tokenizer_json_begin,
            size_t(flashseek_asset_tokenizer_json_end - flashseek_asset_tokenizer_json_begin)};
}

std::string_view embedded_tokenizer_config_json() {
    return {flashseek_asset_tokenizer_config_json_begin,
            size_t(flashseek_asset_tokenizer_config_json_end - flashseek_asset_tokenizer_config_json_begin)};
}

}  // namespace flashseek
