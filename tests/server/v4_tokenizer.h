// The real DeepSeek-V4 tokenizer (assets/) and the limits of the "tiny" test model, for the server's unit tests that
// run the request entry without a model.
#pragma once
#include <string>

#include "server/protocol.h"
#include "tokenizer/tokenizer.h"

namespace flashseek::server::test_support {

inline const tokenizer::Tokenizer& v4_tokenizer() {
    static const tokenizer::Tokenizer tok =
        tokenizer::Tokenizer::load(std::string(FLASHSEEK_SOURCE_DIR) + "/assets/tokenizer/deepseek-v4/tokenizer.json");
    return tok;
}

inline ProtocolLimits tiny_limits(bool debug_hooks) {
    ProtocolLimits l;
    l.model_name = "tiny";
    l.vocab_size = int64_t(v4_tokenizer().vocab_size());
    l.debug_hooks = debug_hooks;
    return l;
}

}  // namespace flashseek::server::test_support
