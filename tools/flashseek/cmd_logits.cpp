// `flashseek logits`: teacher-forced logits of a token file, the contract that checks outside the test suite use:
// one forward over the first P tokens (or chunks of --chunk C), then one decode step per remaining token; OUT gets
// T x vocab little-endian float32 rows, row t = the logits after consuming token t. --perturb-norms SEED runs the
// same with every RMSNorm weight moved by one bf16 rounding (model/perturb.h): the reference's own sensitivity.
#include <CLI/CLI.hpp>
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "backend_flags.h"
#include "command.h"
#include "token_ids.h"
#include "backend/backend.h"
#include "backend/registry.h"
#include "model/perturb.h"
#include "util/error.h"

namespace {

using namespace flashseek;

std::vector<int32_t> read_token_file(const std::string& path) {
    std::ifstream f(path);
    FS_CHECK(f.good(), "--tokens: cannot open token file '{}'", path);
    return cli::parse_token_ids(f, fmt::format("--tokens (file '{}')", path));
}

int run_logits(int argc, char** argv) {
    CLI::App app{"Teacher-forced logits: prefill P tokens, then decode the rest one at a time"};
    std::string model_dir, tokens_path, output_path, perturb_seed;
    cli::BackendFlags flags;
    int64_t prefill = -1, chunk = 0;
    app.add_option("--model", model_dir, "model directory (config.json + safetensors)")->required();
    app.add_option("--tokens", tokens_path, "file of T whitespace-separated token ids")->required();
    app.add_option("--prefill", prefill, "tokens of the first forward (1 <= P <= T)")->required();
    app.add_option("--output", output_path, "output file: T x vocab little-endian float32")->required();
    cli::add_backend_flags(app, flags);
    app.add_option("--chunk", chunk, "prefill in steps of C tokens (0 = all P in one step)");
    app.add_option("--perturb-norms", perturb_seed,
                   "multiply every RMSNorm weight by (1 +- 2^-8) per channel (signs from SEED), rounded to bf16: "
                   "the reference's own sensitivity to one rounding error")
        ->type_name("SEED");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    static_assert(std::endian::native == std::endian::little, "the output format is little-endian float32");
    FS_CHECK(chunk >= 0, "--chunk must be >= 0, got {}", chunk);
    const std::vector<int32_t> tokens = read_token_file(tokens_path);
    const int64_t T = int64_t(tokens.size());
    FS_CHECK(prefill >= 1, "--prefill must be >= 1, got {}", prefill);
    FS_CHECK(prefill <= T, "--prefill {} exceeds the {} tokens in {}", prefill, T, tokens_path);

    BackendOptions opt = cli::backend_options(flags);
    opt.max_sequences = 1;
    std::unique_ptr<Backend> be;
    if (app.count("--perturb-norms")) {
        const uint64_t seed = parse_perturbation_seed(perturb_seed);
        NormPerturbationSummary sum;
        auto guard = install_norm_perturbation(seed, &sum);
        be = create_backend(model_dir, opt);
        FS_CHECK(guard->applications() == 1, "--perturb-norms: backend '{}' opened {} checkpoints through the "
                 "loader, expected exactly 1; the perturbation would not apply to the weights it runs", flags.backend,
                 guard->applications());
        std::fprintf(stderr, "logits: --perturb-norms %llu: %d norm tensors, %lld of %lld values changed by one "
                     "bf16 step (x (1 +- 2^-8))\n", (unsigned long long)seed, sum.tensors, (long long)sum.changed,
                     (long long)sum.values);
    } else {
        be = create_backend(model_dir, opt);
    }
    const int64_t V = be->config().vocab_size;
    for (int64_t i = 0; i < T; ++i)
        FS_CHECK(tokens[size_t(i)] < V, "--tokens: token id {} (token {} of {}) is >= the vocabulary size {}",
                 tokens[size_t(i)], i, tokens_path, V);

    std::ofstream out(output_path, std::ios::binary | std::ios::trunc);
    FS_CHECK(out.good(), "--output: cannot open '{}' for writing", output_path);
    const int seq = be->create_sequence();
    std::vector<float> logits;
    auto step = [&](int64_t begin, int64_t n, bool all) {
        SequenceStep s;
        s.seq_id = seq;
        s.tokens = tokens.data() + begin;
        s.n_tokens = int(n);
        s.all_logits = all;
        be->forward(std::span<const SequenceStep>(&s, 1), logits);
        FS_CHECK(int64_t(logits.size()) == (all ? n : 1) * V, "backend returned {} logits, expected {}",
                 logits.size(), (all ? n : 1) * V);
        out.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
        FS_CHECK(out.good(), "--output: write to '{}' failed", output_path);
    };
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t c = chunk > 0 ? chunk : prefill;
    for (int64_t b = 0; b < prefill; b += c) step(b, std::min(c, prefill - b), true);
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t t = prefill; t < T; ++t) step(t, 1, false);
    const auto t2 = std::chrono::steady_clock::now();
    be->free_sequence(seq);
    out.close();
    FS_CHECK(out.good(), "--output: closing '{}' failed", output_path);
    const double sp = std::chrono::duration<double>(t1 - t0).count(), sd = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr, "logits: %lld tokens (prefill %lld in %.3f s, %lld decode steps in %.3f s) -> %s [%lld x %lld]\n",
                 (long long)T, (long long)prefill, sp, (long long)(T - prefill), sd, output_path.c_str(), (long long)T,
                 (long long)V);
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("logits", "teacher-forced logits of a token file (prefill P, then decode) as float32", run_logits);
