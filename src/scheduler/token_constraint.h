// What constrained decoding (a grammar: JSON schema, regex, tool-call format) looks like to the scheduler: each
// sampled step it asks for the set of tokens allowed next, as a bitmask over the vocabulary, and then advances the
// constraint with the token that was sampled. The grammar engine behind it lives in src/runtime; the scheduler only
// calls this interface, for the requests that carry one.
#pragma once
#include <cstdint>
#include <string>

namespace flashseek {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;
    // Writes the allowed-token bitmask of the next token (bit t % 32 of word t / 32 = token t; token_mask_words
    // words). Runs on the scheduler's mask thread while the forward pass runs; never concurrently with accept().
    virtual void fill_allowed(uint32_t* words, int64_t vocab) = 0;
    // Advances past the sampled token. Returns false when the token breaks the constraint (error() says why).
    virtual bool accept(int32_t token) = 0;
    // True once the constrained output is complete (its end, then a stop token, were accepted).
    virtual bool complete() const = 0;
    virtual std::string error() const = 0;
};

}  // namespace flashseek
