# Sourced by the libFuzzer scripts (scripts/server_fuzz.sh, scripts/tokenizer_fuzz.sh): what every fuzz target
# shares. Each target compiles its sources directly with clang-14 + libFuzzer + ASan/UBSan (FUZZ_CXX overrides the
# compiler), so the main g++ build is untouched, and runs from WORKDIR/corpus.

# fuzz_init SCRIPT_NAME DEFAULT_SECONDS "$@": sets ROOT, WORK (the first argument, required), SECONDS_TO_RUN (the
# second, else DEFAULT_SECONDS) and CXX, and creates WORK/corpus.
fuzz_init() {
  local name=$1 default_seconds=$2
  shift 2
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  WORK=${1:?usage: $name WORKDIR [SECONDS]}
  SECONDS_TO_RUN=${2:-$default_seconds}
  CXX=${FUZZ_CXX:-clang++-14}
  mkdir -p "$WORK/corpus"
}

# fuzz_build BIN WATCHED... -- SOURCES...: builds BIN from SOURCES (with the tokenizer's dependencies) when it is
# missing or older than any source or watched file (headers).
fuzz_build() {
  local bin=$1
  shift
  local -a watched=() sources=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do watched+=("$1"); shift; done
  [ "$#" -gt 0 ] && shift
  sources=("$@")
  if [ ! -x "$bin" ] || [ -n "$(find "${sources[@]}" "${watched[@]}" -newer "$bin" 2>/dev/null)" ]; then
    echo "building $bin"
    "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I"$ROOT/src" -DFUZZ_TOKENIZER_PATH="\"$ROOT/assets/tokenizer/deepseek-v4/tokenizer.json\"" \
      "${sources[@]}" $(pkg-config --cflags --libs libpcre2-8) -lfmt -o "$bin"
  fi
}

# fuzz_run BIN MAX_LEN TIMEOUT: fuzzes for SECONDS_TO_RUN from WORK/corpus; new crashes land in WORK as crash-*.
fuzz_run() {
  cd "$WORK"
  "$1" -max_total_time="$SECONDS_TO_RUN" -max_len="$2" -timeout="$3" -rss_limit_mb=4096 -print_final_stats=1 corpus
}
