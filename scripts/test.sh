#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs dependencies, builds everything (CUDA targets too when
# nvcc is present; they compile but GPU tests are skipped), and runs every test that needs no GPU.
# Usage: scripts/test.sh [extra ctest args]     Env: BUILD_DIR (default build), JOBS (default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$JOBS"
cd "$BUILD_DIR"
ctest -LE gpu --output-on-failure -j"$JOBS" --timeout 1800 "$@"
