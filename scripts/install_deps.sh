#!/usr/bin/env bash
# Installs everything flashseek needs to build and test on a fresh Debian 12 machine.
# Debian packages for the build; PyPI packages only for test oracles and tools.
# Usage: scripts/install_deps.sh [--oracle]   (--oracle also installs torch + transformers for regenerating goldens)
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

debs=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libfmt-dev libcli11-dev libcpp-httplib-dev libpcre2-dev
      libgtest-dev libgmock-dev libbenchmark-dev python3 python3-pip curl
      clang-14 libclang-rt-14-dev unicode-data)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

PY=${PYTHON:-python3}
pip_pkgs=(numpy safetensors tokenizers openai regex pytest unicodedata2==16.0.0 jsonschema "lm_eval[api]==0.4.13"
          transformers schemathesis)
need_pip=0
for m in numpy safetensors tokenizers openai regex pytest unicodedata2 jsonschema lm_eval transformers schemathesis; do
  $PY -c "import $m" 2>/dev/null || need_pip=1
done
if [ $need_pip = 1 ]; then
  $PY -m pip install -q "${pip_pkgs[@]}" 2>/dev/null || $PY -m pip install -q --break-system-packages "${pip_pkgs[@]}"
fi
# xgrammar's source distribution: cmake/xgrammar.cmake compiles its C++ core (pinned version and SHA-256).
XG_VERSION=0.2.9
XG_SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
DEPS_DIR=${FLASHSEEK_DEPS_DIR:-$HOME/.cache/flashseek/deps}
XG_SDIST="$DEPS_DIR/xgrammar-$XG_VERSION.tar.gz"
if ! echo "$XG_SHA256  $XG_SDIST" | sha256sum -c --status 2>/dev/null; then
  mkdir -p "$DEPS_DIR"
  rm -f "$XG_SDIST"
  $PY -m pip download -q --no-deps --no-binary xgrammar -d "$DEPS_DIR" "xgrammar==$XG_VERSION"
  if ! echo "$XG_SHA256  $XG_SDIST" | sha256sum -c --status; then
    echo "install_deps: $XG_SDIST: SHA-256 mismatch" >&2
    exit 1
  fi
fi
if [ "${1:-}" = "--oracle" ]; then
  $PY -m pip install -q torch "transformers>=5.15"
fi
echo "install_deps: done"
