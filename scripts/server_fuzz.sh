#!/usr/bin/env bash
# Builds tests/server/fuzz_request_entry.cpp with clang-14 + libFuzzer + ASan/UBSan (scripts/fuzz_lib.sh: the request
# entry, protocol and tokenizer sources compiled directly, so the main g++ build is untouched) and fuzzes for SECONDS
# seconds, starting from the checked-in corpus tests/server/fuzz_corpus/ (seeds and past findings) plus generated large
# seeds up to the 16 KiB input size (8,000-deep nesting, a 15 KiB string; the server tests send the 100,000-deep
# and megabyte cases). New crashes land in WORKDIR as crash-*: add each one to
# tests/server/fuzz_corpus/ (test_server_unit replays them) once it is fixed.
# Usage: scripts/server_fuzz.sh WORKDIR [SECONDS]
set -euo pipefail
source "$(dirname "$0")/fuzz_lib.sh"
fuzz_init server_fuzz.sh 60 "$@"
BIN="$WORK/fuzz_request_entry"
# The request entry and everything it calls (no HTTP layer, no step loop): a validator added to src/server that the
# entry calls belongs in this list too.
ENTRY_SOURCES=(protocol.cpp output_constraint.cpp request_entry.cpp responses_protocol.cpp)
fuzz_build "$BIN" "$ROOT"/src/tokenizer/*.h "$ROOT"/src/server/*.h "$ROOT"/tests/server/request_entry_check.h -- \
  "$ROOT"/src/tokenizer/*.cpp "${ENTRY_SOURCES[@]/#/$ROOT/src/server/}" "$ROOT/tests/server/fuzz_request_entry.cpp"
cp "$ROOT"/tests/server/fuzz_corpus/* "$WORK/corpus/"
python3 - "$WORK/corpus" <<'PY'
import sys
out = sys.argv[1]
deep = b"[" * 8000 + b"]" * 8000
open(f"{out}/gen-deep-array", "wb").write(b"\x00" + b'{"model":"tiny","messages":' + deep + b"}")
open(f"{out}/gen-deep-object", "wb").write(b"\x02" + b'{"input":' + b'{"a":' * 2500 + b"1" + b"}" * 2500 + b"}")
open(f"{out}/gen-giant-string", "wb").write(b"\x01" + b'{"prompt":"' + b"ab " * 5000 + b'","max_tokens":1}')
PY
fuzz_run "$BIN" 16384 60
