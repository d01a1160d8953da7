// What constrained decoding (a grammar: JSON schema, regex, tool-call format) looks like to the scheduler: each
// sampled step it asks for the set of tokens allowed next, as a bitmask over the vocabulary, and then advances the
// constraint with the token that was sampled. The grammar engine behind it lives in src/runtime; the scheduler only
// calls this interface, for the requests that carry one.
#pragma once
#include <cstdint>
#include <string>

namespace flashseek {

// The error a constrained request ends with when its constraint allows no next token: a grammar whose language is
// empty (`root ::= root "a"`) or that reached a dead end. The scheduler checks every mask it fills, so such a request
// ends alone instead of the sampler failing the whole step; the server answers it as the client's constraint at fault.
inline constexpr const char* kConstraintDeadEnd =
    "the constraint allows no next token (its grammar matches no complete output from here)";

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
