#!/usr/bin/env bash
# The main job on a fresh machine: installs dependencies, builds flashseek, and generates text with the
# embedded default model (a tiny random DeepSeek-V4 model with the real tokenizer, made on first use).
# Without a GPU it builds the CPU-only binary (quick); with one (nvidia-smi works) it builds the CUDA backend too.
# Usage: scripts/demo.sh [flashseek generate options]   (default: a short chat prompt, 32 new tokens)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh >/dev/null
if nvidia-smi -L >/dev/null 2>&1; then
  BUILD_DIR=${BUILD_DIR:-build}
  cuda=ON
else
  BUILD_DIR=${BUILD_DIR:-build-cpu}
  cuda=OFF
fi
echo "demo: building flashseek in $BUILD_DIR (CUDA $cuda) ..." >&2
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFLASHSEEK_CUDA=$cuda ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target flashseek >/dev/null
if [ $# -eq 0 ]; then
  set -- --prompt "Hello! What can you do?" --chat --max-new 32
fi
exec "$BUILD_DIR/tools/flashseek/flashseek" generate "$@"
