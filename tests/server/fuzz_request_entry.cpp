// libFuzzer target (built by scripts/server_fuzz.sh with clang-14, ASan + UBSan): HTTP body → validated request
// through the same request entry the server's handlers call, for every route (the first byte picks it). A crash,
// a sanitizer report, an exception other than ApiError or a broken property (request_entry_check.h) is a bug;
// findings go to tests/server/fuzz_corpus/ and are replayed by test_server_unit (RequestEntryCorpus).
#include <cstdio>

#include "request_entry_check.h"

using namespace flashseek;
using namespace flashseek::server;

static const tokenizer::Tokenizer& v4() {
    static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(FUZZ_TOKENIZER_PATH);
    return tok;
}

static const ProtocolLimits& limits() {
    static const ProtocolLimits l = [] {
        ProtocolLimits x;
        x.model_name = "tiny";
        x.vocab_size = int64_t(v4().vocab_size());
        x.debug_hooks = true;
        return x;
    }();
    return l;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const EntryContext ctx{limits(), v4(), 2048};
    fuzzing::check_request_entry(std::string_view(reinterpret_cast<const char*>(data), size), ctx,
                                 [](const char* what) {
                                     std::fprintf(stderr, "property violated: %s\n", what);
                                     __builtin_trap();
                                 });
    return 0;
}
