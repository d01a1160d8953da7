#!/usr/bin/env bash
# Stages test_cuda_linear and flashseek from $BUILD (default build-stream) in .devcarry/ for
# scripts/moe_stream_device.sh: stripped, gzip-compressed, with the non-system shared libraries they link.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-stream}
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
rm -rf .devcarry && mkdir -p .devcarry
cp "$BUILD/tests/cuda/linear/test_cuda_linear" "$BUILD/tools/flashseek/flashseek" .devcarry/
for b in .devcarry/test_cuda_linear .devcarry/flashseek; do
  strip "$b"
  ldd "$b" | awk '/=> \// {print $3}' | grep -E 'libfmt|libgtest|libpcre2|libnlohmann|httplib' | while read -r lib; do
    cp -Ln "$lib" .devcarry/ 2>/dev/null || true
  done
done
for b in test_cuda_linear flashseek; do gzip -6 ".devcarry/$b"; done
du -sh .devcarry; ls -la .devcarry
