// Constrained decoding with xgrammar's C++ core (docs/serving.md, "Constrained decoding"): an OutputConstraint (JSON
// schema, regex, choice, EBNF grammar, or DeepSeek-V4 tool calls) becomes one xgrammar structural tag, compiled once
// per distinct constraint against the model's vocabulary (cached), and each choice of a request gets its own matcher
// (a TokenConstraint for the scheduler) that fills the allowed-token bitmask and advances with sampled tokens.
// The vocabulary the engine sees is the tokenizer's bytes per token, except that control tokens are hidden (never
// allowed inside constrained text) other than ｜DSML｜ and </think>, which the tool-call and reasoning formats use;
// EOS is the stop token that ends a complete output.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace flashseek::runtime {

// What a request constrains its output to (filled by the server from response_format, structured_outputs,
// guided_* or tool_choice).
struct OutputConstraint {
    enum class Kind { None, Json, Regex, Choice, Grammar, ToolCalls };
    Kind kind = Kind::None;
    std::string param;                 // the request field it came from (named in errors)
    std::string json_schema;           // Json: the schema as JSON text, keys in the client's order
    std::string pattern;               // Regex: the regular expression; Grammar: the EBNF grammar (root rule "root")
    std::vector<std::string> choices;  // Choice: the output is exactly one of these
    nlohmann::ordered_json tools;      // ToolCalls: OpenAI tools to choose from (one when a function is named)
    bool parallel_tool_calls = true;   // ToolCalls: more than one call allowed
    // Chat in thinking mode: the output starts inside the reasoning, which stays free text up to </think>.
    bool reasoning_first = false;
};

// The engine could not compile a constraint (unsupported schema keyword, bad regex or grammar, or it took longer
// than the compile time limit); what() says why. The client's fault: a 400.
class GrammarError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The compiler was busy with other constraints for the whole queue wait; the constraint itself may be fine (a 503).
class GrammarBusy : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// How long one compile may take. The engine cannot be interrupted, so compiles run one at a time on their own thread
// (deadline_worker.h): a caller waits at most queue_wait_s for its compile to start and time_limit_s for it to end.
// A constraint that overran is remembered and refused at once when it comes again.
struct CompileLimits {
    double time_limit_s = 10;
    double queue_wait_s = 10;
    size_t max_pending = 64;  // compiles waiting at once; more callers are told the compiler is busy
};

class DeadlineWorker;
class CompiledConstraint;  // an engine grammar bound to the vocabulary; shareable between requests and threads

class ConstraintCompiler {
public:
    // model_vocab: the model's vocabulary size (>= the tokenizer's; ids past the tokenizer are never allowed).
    ConstraintCompiler(const tokenizer::Tokenizer& tok, int64_t model_vocab, int32_t eos_id,
                       CompileLimits limits = {});
    ~ConstraintCompiler();
    ConstraintCompiler(const ConstraintCompiler&) = delete;
    ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

    // Thread-safe; identical constraints are compiled once. Throws GrammarError or GrammarBusy (see CompileLimits).
    std::shared_ptr<const CompiledConstraint> compile(const OutputConstraint& c) const;
    // Whether a compile is running now, possibly one whose caller stopped waiting at the time limit: it cannot be
    // interrupted, so a process that ends meanwhile should end without running static destructors under it.
    bool compiling() const;
    // A fresh matcher at the start of the output, for one choice.
    std::shared_ptr<TokenConstraint> start(const std::shared_ptr<const CompiledConstraint>& grammar) const;

    // The xgrammar structural tag (JSON text) a constraint compiles from.
    static std::string structural_tag(const OutputConstraint& c);

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;  // shared with a compile that outlives its caller
    CompileLimits limits_;
    std::unique_ptr<DeadlineWorker> worker_;
};

}  // namespace flashseek::runtime
