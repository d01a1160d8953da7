// `flashseek generate`: greedy or sampled decoding from prompt token ids on a model directory (or the embedded
// default model), printing the generated ids and the prefill / decode speed.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "command.h"
#include "engine/backend.h"
#include "engine/factory.h"
#include "model/default_model.h"
#include "util/error.h"

namespace {

using namespace flashseek;

std::vector<int32_t> parse_prompt_tokens(const std::string& text) {
    std::vector<int32_t> ids;
    std::string t = text;
    for (char& ch : t)
        if (ch == ',') ch = ' ';
    std::istringstream in(t);
    std::string word;
    while (in >> word) {
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(word, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        FS_CHECK(used == word.size() && used > 0, "--prompt-tokens: '{}' (token {}) is not an integer", word,
                 ids.size());
        FS_CHECK(v >= 0 && v <= INT32_MAX, "--prompt-tokens: token id {} (token {}) is negative or too large", v,
                 ids.size());
        ids.push_back(int32_t(v));
    }
    FS_CHECK(!ids.empty(), "--prompt-tokens: no token ids given");
    return ids;
}

int run_generate(int argc, char** argv) {
    CLI::App app{"Generate tokens from prompt token ids (greedy at temperature 0, else sampled)"};
    std::string model_dir, prompt, backend = "cpu", numerics;
    int max_new = 16, top_k = 0, threads = 0;
    float temperature = 0.f, top_p = 1.f;
    uint64_t seed = 0;
    bool ignore_eos = false;
    app.add_option("--model", model_dir, "model directory (default: the embedded default model)");
    app.add_option("--prompt-tokens", prompt, "prompt token ids, space or comma separated")->required();
    app.add_option("--max-new", max_new, "tokens to generate");
    app.add_option("--temperature", temperature, "0 = greedy");
    app.add_option("--top-p", top_p, "nucleus probability mass in (0, 1]");
    app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)");
    app.add_option("--seed", seed, "sampling seed (same seed, same tokens)");
    app.add_option("--backend", backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--numerics", numerics, "exact or release (default: exact on cpu, release on cuda)")
        ->check(CLI::IsMember({"exact", "release"}));
    app.add_option("--threads", threads, "CPU threads (0 = all cores)");
    app.add_flag("--ignore-eos", ignore_eos, "keep generating after the end-of-sequence token");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    FS_CHECK(max_new >= 1, "--max-new must be >= 1, got {}", max_new);
    const std::vector<int32_t> ids = parse_prompt_tokens(prompt);
    if (model_dir.empty()) model_dir = ensure_default_model();

    BackendOptions opt;
    opt.backend = backend;
    opt.numerics = numerics.empty() ? (backend == "cpu" ? Numerics::Exact : Numerics::Release) : parse_numerics(numerics);
    opt.max_sequences = 1;
    opt.threads = threads;
    auto be = create_backend(model_dir, opt);
    const ModelConfig& cfg = be->config();
    for (size_t i = 0; i < ids.size(); ++i)
        FS_CHECK(ids[i] < cfg.vocab_size, "--prompt-tokens: token id {} (token {}) is >= the vocabulary size {}",
                 ids[i], i, cfg.vocab_size);

    SampleParams sp;
    sp.temperature = temperature;
    sp.top_p = top_p;
    sp.top_k = top_k;
    sp.seed = seed;
    const int seq = be->create_sequence();
    std::vector<SampleResult> res;
    std::vector<int32_t> generated;
    const auto t0 = std::chrono::steady_clock::now();
    SequenceStep step;
    step.seq_id = seq;
    step.tokens = ids.data();
    step.n_tokens = int(ids.size());
    be->forward_sample(std::span<const SequenceStep>(&step, 1), std::span<const SampleParams>(&sp, 1), res);
    const auto t1 = std::chrono::steady_clock::now();
    generated.push_back(res[0].token);
    while (int(generated.size()) < max_new && (ignore_eos || generated.back() != cfg.eos_token_id)) {
        sp.draw_index = generated.size();
        step.tokens = &generated.back();
        step.n_tokens = 1;
        be->forward_sample(std::span<const SequenceStep>(&step, 1), std::span<const SampleParams>(&sp, 1), res);
        generated.push_back(res[0].token);
    }
    const auto t2 = std::chrono::steady_clock::now();
    be->free_sequence(seq);

    std::string line;
    for (int32_t t : generated) line += (line.empty() ? "" : " ") + std::to_string(t);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);  // the ids come before the statistics on a shared terminal or pipe
    const double sp_s = std::chrono::duration<double>(t1 - t0).count();
    const double dec_s = std::chrono::duration<double>(t2 - t1).count();
    const size_t n_dec = generated.size() - 1;
    std::fprintf(stderr,
                 "generate [%s]: prompt %zu tokens in %.3f s (%.1f tokens/s); %zu tokens generated, %zu decode steps "
                 "in %.3f s (%.1f tokens/s)\n",
                 be->name().c_str(), ids.size(), sp_s, ids.size() / std::max(sp_s, 1e-9), generated.size(), n_dec,
                 dec_s, n_dec > 0 ? n_dec / std::max(dec_s, 1e-9) : 0.0);
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("generate", "generate tokens from prompt token ids (greedy or sampled)", run_generate);
