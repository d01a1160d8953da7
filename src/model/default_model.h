// The embedded default model: a tiny random DeepSeek-V4 checkpoint with the real tokenizer's vocabulary,
// generated deterministically on first use into a cache folder (not committed), so `flashseek generate` and
// `flashseek serve` work on a fresh machine without downloading anything.
#pragma once
#include <string>

namespace flashseek {

// The directory of the default model, generating it (config.json, safetensors, tokenizer.json) when absent or
// incomplete. Location: $FLASHSEEK_HOME/default-model, else $XDG_CACHE_HOME/flashseek/..., else ~/.cache/flashseek/....
std::string ensure_default_model();

// The config.json text of the default model.
std::string default_model_config_json();

}  // namespace flashseek
