// Process-wide A/B switches read from the environment (docs/development.md lists them). Callers read each once and
// keep the value. No fmt or CUDA here: CUDA translation units include it too.
#pragma once
#include <cstdint>

namespace flashseek {

// An on/off switch that defaults to on: false only when NAME is set to "0".
bool env_switch_on(const char* name);

// An integer setting: `fallback` when NAME is unset or empty; throws Error naming the variable when it is set to
// something that is not an integer in [lo, hi].
int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi);

}  // namespace flashseek
