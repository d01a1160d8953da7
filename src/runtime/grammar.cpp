// ConstraintCompiler (see grammar.h) over xgrammar: TokenizerInfo from the tokenizer's token bytes, one
// GrammarCompiler with its cache, one GrammarMatcher per choice. Structural tags are built as JSON here; the
// DeepSeek-V4 tool-call block follows chat_encoding.cpp (render_tool_calls) with xgrammar's "deepseek_xml"
// parameter style, so the output parser (chat_parser.cpp) reads every constrained call back as tool_calls.
#include "runtime/grammar.h"

#include <xgrammar/xgrammar.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "backend/backend.h"
#include "runtime/deadline_worker.h"
#include "util/error.h"

namespace flashseek::runtime {

// Ordered: object keys keep the client's order, which is the order the grammar then imposes (as in the prompt).
using json = nlohmann::ordered_json;

namespace {

// Whitespace runs between JSON tokens are bounded: an unconstrained model could otherwise spend its whole budget
// on spaces while staying inside the grammar.
constexpr int kMaxJsonWhitespace = 4;

const std::string kDsml = "｜DSML｜";

json const_string(const std::string& value) { return json{{"type", "const_string"}, {"value", value}}; }

json payload_format(const OutputConstraint& c) {
    using Kind = OutputConstraint::Kind;
    switch (c.kind) {
        case Kind::Json: {
            json schema;
            try {
                schema = json::parse(c.json_schema);
            } catch (const json::exception& e) {
                throw GrammarError(fmt::format("the JSON schema is not JSON: {}", e.what()));
            }
            return json{{"type", "json_schema"}, {"json_schema", schema}, {"max_whitespace_cnt", kMaxJsonWhitespace}};
        }
        case Kind::Regex: return json{{"type", "regex"}, {"pattern", c.pattern}};
        case Kind::Grammar: return json{{"type", "grammar"}, {"grammar", c.pattern}, {"syntax", "ebnf"}};
        case Kind::Choice: {
            json options = json::array();
            for (const std::string& s : c.choices) options.push_back(const_string(s));
            return json{{"type", "or"}, {"elements", options}};
        }
        case Kind::ToolCalls: {
            json tags = json::array();
            for (const json& tool : c.tools) {
                const json& fn = tool.at("function");
                json params = fn.contains("parameters") && fn["parameters"].is_object()
                                  ? fn["parameters"]
                                  : json{{"type", "object"}, {"properties", json::object()}};
                const std::string name = fn.at("name").get<std::string>();
                tags.push_back(json{{"type", "tag"},
                                    {"begin", "<" + kDsml + "invoke name=\"" + name + "\">\n"},
                                    {"content", {{"type", "json_schema"},
                                                 {"json_schema", params},
                                                 {"style", "deepseek_xml"},
                                                 {"max_whitespace_cnt", kMaxJsonWhitespace}}},
                                    {"end", "</" + kDsml + "invoke>\n"}});
            }
            if (tags.empty()) throw GrammarError("tool calls are required but no tool is declared");
            return json{{"type", "sequence"},
                        {"elements", json::array({const_string("\n\n<" + kDsml + "tool_calls>\n"),
                                                  json{{"type", "tags_with_separator"},
                                                       {"tags", tags},
                                                       {"separator", ""},
                                                       {"at_least_one", true},
                                                       {"stop_after_first", !c.parallel_tool_calls}},
                                                  const_string("</" + kDsml + "tool_calls>")})}};
        }
        case Kind::None: break;
    }
    throw GrammarError("no constraint to compile");
}

// The engine's view of the vocabulary: token bytes, with control tokens hidden except the two the formats need.
xgrammar::TokenizerInfo tokenizer_info(const tokenizer::Tokenizer& tok, int64_t model_vocab, int32_t eos_id) {
    const int64_t n = int64_t(tok.vocab_size());
    FS_CHECK(model_vocab >= n, "constrained decoding: the model's vocabulary ({}) is smaller than the tokenizer's ({})",
             model_vocab, n);
    std::vector<std::string> vocab(static_cast<size_t>(n));
    const auto think_end = tok.token_to_id("</think>");
    const auto dsml = tok.token_to_id(kDsml);
    for (int64_t i = 0; i < n; ++i) {
        const auto id = int32_t(i);
        if (tok.is_added(id)) {
            if (id == think_end || id == dsml) vocab[size_t(i)] = tok.id_to_token(id);
            continue;  // "" = a special token to the engine: never allowed inside constrained text
        }
        try {
            vocab[size_t(i)] = tok.token_bytes(id);
        } catch (const Error&) {
            // an id the tokenizer does not define (a gap in its id range): never allowed
        }
    }
    return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, int(model_vocab), std::vector<int32_t>{eos_id},
                                   false);
}

// One choice's grammar state.
class XgrammarConstraint : public TokenConstraint {
public:
    XgrammarConstraint(std::shared_ptr<const CompiledConstraint> grammar, const xgrammar::CompiledGrammar& compiled,
                       int32_t eos_id)
        : grammar_(std::move(grammar)), matcher_(compiled, std::vector<int>{eos_id}) {}

    void fill_allowed(uint32_t* words, int64_t vocab) override {
        int64_t shape[1] = {token_mask_words(vocab)};
        DLTensor t{};
        t.data = words;
        t.device = DLDevice{kDLCPU, 0};
        t.ndim = 1;
        t.dtype = xgrammar::GetBitmaskDLType();
        t.shape = shape;
        t.strides = nullptr;
        t.byte_offset = 0;
        matcher_.FillNextTokenBitmask(&t);
    }
    bool accept(int32_t token) override {
        if (matcher_.AcceptToken(token)) return true;
        error_ = fmt::format("token {} does not continue the grammar", token);
        return false;
    }
    bool complete() const override { return matcher_.IsTerminated(); }
    std::string error() const override { return error_; }

private:
    std::shared_ptr<const CompiledConstraint> grammar_;  // keeps the compiled grammar alive
    xgrammar::GrammarMatcher matcher_;
    std::string error_;
};

// xgrammar's messages start with a time stamp and the source position of the check ("[17:02:46] /path/x.cc:94: "),
// which say nothing to a client; the rest says what is wrong with the constraint.
std::string engine_message(const std::string& what) {
    std::string_view m = what;
    if (m.size() > 2 && m[0] == '[')
        if (const size_t close = m.find("] "); close != std::string_view::npos && close < 16) m.remove_prefix(close + 2);
    if (const size_t colon = m.find(": "); colon != std::string_view::npos) {
        const std::string_view head = m.substr(0, colon);
        const size_t line_colon = head.rfind(':');
        const bool source_position = line_colon != std::string_view::npos && head.find(' ') == std::string_view::npos &&
                                     head.find_first_not_of("0123456789", line_colon + 1) == std::string_view::npos;
        if (source_position) m.remove_prefix(colon + 2);
    }
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.remove_suffix(1);
    return std::string(m.substr(0, 600));
}

}  // namespace

class CompiledConstraint {
public:
    explicit CompiledConstraint(xgrammar::CompiledGrammar g) : grammar(std::move(g)) {}
    xgrammar::CompiledGrammar grammar;
};

struct ConstraintCompiler::Impl {
    Impl(const tokenizer::Tokenizer& tok, int64_t model_vocab, int32_t eos)
        : info(tokenizer_info(tok, model_vocab, eos)), compiler(info, 2, false), eos_id(eos) {}
    xgrammar::TokenizerInfo info;
    xgrammar::GrammarCompiler compiler;
    int32_t eos_id;
    std::mutex mu;  // guards cache and overran; compiling runs outside it
    std::unordered_map<std::string, std::shared_ptr<const CompiledConstraint>> cache;
    std::unordered_set<std::string> overran;  // constraints that ran past the time limit: refused at once
    static constexpr size_t kMaxCached = 256;

    std::shared_ptr<const CompiledConstraint> cached(const std::string& tag) {
        std::lock_guard lock(mu);
        auto it = cache.find(tag);
        return it == cache.end() ? nullptr : it->second;
    }
    void remember_overrun(const std::string& tag) {
        std::lock_guard lock(mu);
        if (overran.size() >= kMaxCached) overran.clear();
        overran.insert(tag);
    }
};

ConstraintCompiler::ConstraintCompiler(const tokenizer::Tokenizer& tok, int64_t model_vocab, int32_t eos_id,
                                       CompileLimits limits)
    : impl_(std::make_shared<Impl>(tok, model_vocab, eos_id)), limits_(limits),
      worker_(std::make_unique<DeadlineWorker>(limits.max_pending)) {
    FS_CHECK(limits.time_limit_s > 0 && limits.queue_wait_s >= 0 && limits.max_pending >= 1,
             "constrained decoding: the compile time limit ({} s) must be > 0, the queue wait ({} s) >= 0 and the "
             "queue ({}) >= 1", limits.time_limit_s, limits.queue_wait_s, limits.max_pending);
}

ConstraintCompiler::~ConstraintCompiler() = default;

std::string ConstraintCompiler::structural_tag(const OutputConstraint& c) {
    json format = payload_format(c);
    if (c.reasoning_first)
        format = json{{"type", "sequence"},
                      {"elements", json::array({json{{"type", "tag"},
                                                     {"begin", ""},
                                                     {"content", {{"type", "any_text"}}},
                                                     {"end", "</think>"}},
                                                format})}};
    return json{{"type", "structural_tag"}, {"format", format}}.dump();
}

std::shared_ptr<const CompiledConstraint> ConstraintCompiler::compile(const OutputConstraint& c) const {
    const std::string tag = structural_tag(c);
    if (auto hit = impl_->cached(tag)) return hit;
    {
        std::lock_guard lock(impl_->mu);
        if (impl_->overran.count(tag))
            throw GrammarError(fmt::format("it did not compile within the {} s limit (tried before; simplify it: "
                                           "fewer alternatives or patterns, smaller repetition counts)",
                                           limits_.time_limit_s));
    }
    // The job owns what it uses: after an overrun it still runs, its caller gone.
    auto result = std::make_shared<std::shared_ptr<const CompiledConstraint>>();
    auto compile_job = [impl = impl_, tag, result] {
        if ((*result = impl->cached(tag))) return;  // the same constraint, compiled while this one waited
        *result = std::make_shared<const CompiledConstraint>(impl->compiler.CompileStructuralTag(tag));
    };
    using Seconds = std::chrono::duration<double>;
    auto nanos = [](double s) { return std::chrono::duration_cast<std::chrono::nanoseconds>(Seconds(s)); };
    DeadlineWorker::Outcome outcome;
    try {
        outcome = worker_->run(compile_job, nanos(limits_.queue_wait_s), nanos(limits_.time_limit_s));
    } catch (const std::exception& e) {
        throw GrammarError(engine_message(e.what()));
    }
    switch (outcome) {
        case DeadlineWorker::Outcome::Done: break;
        case DeadlineWorker::Outcome::NotStarted:
            throw GrammarBusy("the grammar compiler is busy with other constraints; retry later");
        case DeadlineWorker::Outcome::Overran:
            impl_->remember_overrun(tag);
            throw GrammarError(fmt::format("it did not compile within the {} s limit (simplify it: fewer "
                                           "alternatives or patterns, smaller repetition counts)",
                                           limits_.time_limit_s));
    }
    std::lock_guard lock(impl_->mu);
    if (impl_->cache.size() >= Impl::kMaxCached) impl_->cache.clear();
    impl_->cache.emplace(tag, *result);
    return *result;
}

bool ConstraintCompiler::compiling() const { return worker_->busy(); }

std::shared_ptr<TokenConstraint> ConstraintCompiler::start(
    const std::shared_ptr<const CompiledConstraint>& grammar) const {
    FS_CHECK(grammar != nullptr, "constrained decoding: no compiled grammar");
    return std::make_shared<XgrammarConstraint>(grammar, grammar->grammar, impl_->eos_id);
}

}  // namespace flashseek::runtime
