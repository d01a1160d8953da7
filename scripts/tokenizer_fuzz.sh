#!/usr/bin/env bash
# Builds tests/tokenizer/fuzz_tokenizer.cpp with clang-14 + libFuzzer + ASan/UBSan (scripts/fuzz_lib.sh: the tokenizer
# sources compiled directly, so the main g++ build is untouched) and fuzzes for SECONDS seconds from a seed corpus.
# Usage: scripts/tokenizer_fuzz.sh WORKDIR [SECONDS]
set -euo pipefail
source "$(dirname "$0")/fuzz_lib.sh"
fuzz_init tokenizer_fuzz.sh 120 "$@"
BIN="$WORK/fuzz_tokenizer"
fuzz_build "$BIN" "$ROOT"/src/tokenizer/*.h -- "$ROOT"/src/tokenizer/*.cpp "$ROOT/tests/tokenizer/fuzz_tokenizer.cpp"
# Seed corpus: one file per parser selector byte.
printf '\x00{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":null,"decoder":{"type":"ByteLevel"}}' > "$WORK/corpus/seed0"
printf '\x01Hello, world! 中文 <think>x</think> 123456 \r\n  \xf0\x9f\x98\x80' > "$WORK/corpus/seed1"
printf '\x02\x12\x34\xab\xcd\x00\x01\x7f\xff' > "$WORK/corpus/seed2"
printf '\x03{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\\"k\\": 1}"}}]},{"role":"tool","tool_call_id":"1","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}],"thinking":true}' > "$WORK/corpus/seed3"
printf '\x04r</think>c\n\n<\xef\xbd\x9cDSML\xef\xbd\x9ctool_calls>\n<\xef\xbd\x9cDSML\xef\xbd\x9cinvoke name="f">\n<\xef\xbd\x9cDSML\xef\xbd\x9cparameter name="a" string="false">[1]</\xef\xbd\x9cDSML\xef\xbd\x9cparameter>\n</\xef\xbd\x9cDSML\xef\xbd\x9cinvoke>\n</\xef\xbd\x9cDSML\xef\xbd\x9ctool_calls>' > "$WORK/corpus/seed4"
fuzz_run "$BIN" 4096 120
