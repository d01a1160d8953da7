// The backends this build of flashseek carries. The one layer that sees every backend library: programs (the CLI,
// tests) call register_builtin_backends() once, then create backends by name through backend/registry.h.
#pragma once

namespace flashseek {

// Registers "cpu" (the CPU reference) and, in builds with CUDA, "cuda". Idempotent and thread-safe.
void register_builtin_backends();

}  // namespace flashseek
