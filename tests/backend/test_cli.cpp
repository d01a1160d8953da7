// The `flashseek logits` and `flashseek generate` contracts, run through the built binary: output size and
// content (prefill at once, in chunks, or mostly decoded give the same rows), and the clear errors with a
// non-zero exit for P > T, P = 0, ids >= vocab, missing files and malformed token files; `flashseek bench`'s
// sampling flags refused out of range, naming the flag, before any device work (so without a GPU too).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend_test_util.h"
#include "f32_file.h"

namespace fs = std::filesystem;

namespace {

using flashseek::test_support::read_f32_file;
flashseek::test_support::CommandResult run(const std::string& args) { return backend_test::run_flashseek(args); }
std::string temp_path(const std::string& name) { return backend_test::temp_path("cli", name); }

std::string write_tokens(const std::string& name, const std::vector<int32_t>& ids) {
    const std::string path = temp_path(name);
    backend_test::write_token_file(path, ids);
    return path;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        md = std::max(md, double(std::fabs(a[i] - b[i])));
        mb = std::max(mb, double(std::fabs(b[i])));
    }
    return md / mb;
}

}  // namespace

TEST(CliLogits, OutputContractAndConsistency) {
    const auto& tm = backend_test::tiny_model();
    SCOPED_TRACE("checkpoint seed " + std::to_string(tm.seed));
    const int64_t T = 45;
    const auto ids = backend_test::random_tokens(T, tm.vocab, tm.seed ^ 5);
    const std::string tokens = write_tokens("tok.txt", ids);
    const std::string out_full = temp_path("full.bin"), out_dec = temp_path("dec.bin"), out_chunk = temp_path("ch.bin");
    auto r = run("logits --model " + tm.dir + " --tokens " + tokens + " --prefill 45 --output " + out_full);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(fs::file_size(out_full), uintmax_t(T * tm.vocab * 4));
    r = run("logits --model " + tm.dir + " --tokens " + tokens + " --prefill 1 --output " + out_dec +
            " --backend cpu --numerics exact");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run("logits --model " + tm.dir + " --tokens " + tokens + " --prefill 30 --chunk 7 --output " + out_chunk);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto full = read_f32_file(out_full), dec = read_f32_file(out_dec), ch = read_f32_file(out_chunk);
    ASSERT_EQ(full.size(), size_t(T * tm.vocab));
    ASSERT_EQ(dec.size(), full.size());
    ASSERT_EQ(ch.size(), full.size());
    EXPECT_LE(max_rel_diff(dec, full), 1e-5);
    EXPECT_LE(max_rel_diff(ch, full), 1e-5);
    for (float v : full) ASSERT_TRUE(std::isfinite(v));
    // release numerics run and differ
    const std::string out_rel = temp_path("rel.bin");
    r = run("logits --model " + tm.dir + " --tokens " + tokens + " --prefill 45 --numerics release --output " + out_rel);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GT(max_rel_diff(read_f32_file(out_rel), full), 0.0);
}

TEST(CliBench, SamplingFlagsOutOfRangeNameTheFlag) {
    const auto& tm = backend_test::tiny_model();
    const std::string base = "bench --model " + tm.dir + " --prefill none --concurrency 1 ";
    struct Case {
        std::string args, expect;
    };
    const std::vector<Case> cases = {
        {"--temperature 2.5", "--temperature"},      {"--temperature -1", "--temperature"},
        {"--temperature 1 --top-p 0", "--top-p"},    {"--temperature 1 --top-p 1.5", "--top-p"},
        {"--temperature 1 --top-k -3", "--top-k"},   {"--top-p 0.5", "--temperature > 0"},
        {"--top-k 5", "--temperature > 0"},
    };
    for (const auto& c : cases) {
        const auto r = run(base + c.args);
        EXPECT_NE(r.exit_code, 0) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    }
}

TEST(CliLogits, ContractErrors) {
    const auto& tm = backend_test::tiny_model();
    const std::string tokens = write_tokens("err.txt", {1, 2, 3, 4});
    const std::string out = temp_path("err.bin");
    const std::string base = "logits --model " + tm.dir + " --output " + out;
    struct Case {
        std::string args, expect;
    };
    const std::string bad_id = write_tokens("badid.txt", {1, int32_t(tm.vocab), 3});
    const std::string not_int = temp_path("notint.txt");
    std::ofstream(not_int) << "1 2 x3 4\n";
    const std::string empty = temp_path("empty.txt");
    std::ofstream(empty) << "  \n";
    const std::vector<Case> cases = {
        {base + " --tokens " + tokens + " --prefill 5", "exceeds"},
        {base + " --tokens " + tokens + " --prefill 0", "--prefill"},
        {base + " --tokens " + bad_id + " --prefill 2", "vocabulary"},
        {base + " --tokens /nonexistent/tokens.txt --prefill 1", "/nonexistent/tokens.txt"},
        {"logits --model /nonexistent/model --tokens " + tokens + " --prefill 1 --output " + out, "/nonexistent/model"},
        {base + " --tokens " + not_int + " --prefill 1", "x3"},
        {base + " --tokens " + empty + " --prefill 1", "no token ids"},
        {base + " --tokens " + tokens + " --prefill 2 --numerics fast", "fast"},
        {base + " --tokens " + tokens + " --prefill 2 --chunk -1", "--chunk"},
        {"logits --model " + tm.dir + " --tokens " + tokens + " --prefill 2 --output /nonexistent/dir/out.bin",
         "/nonexistent/dir/out.bin"},
    };
    for (const auto& c : cases) {
        const auto r = run(c.args);
        EXPECT_NE(r.exit_code, 0) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    }
}

TEST(CliGenerate, GreedyAndSeededSampling) {
    const auto& tm = backend_test::tiny_model();
    auto r = run("generate --model " + tm.dir + " --prompt-tokens \"5 6 7 8\" --max-new 6 --ignore-eos");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;
    std::istringstream first(r.output.substr(0, r.output.find('\n')));
    std::vector<int64_t> ids;
    int64_t v;
    while (first >> v) ids.push_back(v);
    ASSERT_EQ(ids.size(), 6u) << r.output;
    for (int64_t id : ids) EXPECT_LT(id, tm.vocab);
    // greedy continuation = argmax of teacher-forced logits over prompt + generated tokens
    std::vector<int32_t> seq = {5, 6, 7, 8};
    for (size_t i = 0; i + 1 < ids.size(); ++i) seq.push_back(int32_t(ids[i]));
    const std::string tokens = write_tokens("gen.txt", seq), out = temp_path("gen.bin");
    ASSERT_EQ(run("logits --model " + tm.dir + " --tokens " + tokens + " --prefill 4 --output " + out).exit_code, 0);
    const auto logits = read_f32_file(out);
    for (size_t i = 0; i < ids.size(); ++i) {
        const size_t row = 3 + i;
        auto b = logits.begin() + long(row * size_t(tm.vocab));
        EXPECT_EQ(std::max_element(b, b + tm.vocab) - b, ids[i]) << "generated token " << i;
    }
    const std::string sampled = "generate --model " + tm.dir +
                                " --prompt-tokens 5,6,7 --max-new 8 --temperature 0.9 --top-p 0.95 --top-k 50 "
                                "--seed 77 --ignore-eos";
    const auto a = run(sampled), b = run(sampled);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    EXPECT_EQ(a.output.substr(0, a.output.find('\n')), b.output.substr(0, b.output.find('\n')));
    const auto bad = run("generate --model " + tm.dir + " --prompt-tokens \"5 x\" --max-new 2");
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.output.find("'x'"), std::string::npos) << bad.output;
    const auto cuda = run("generate --model " + tm.dir + " --prompt-tokens 5 --max-new 2 --backend cuda");
#ifndef FLASHSEEK_HAVE_CUDA
    EXPECT_NE(cuda.exit_code, 0);
    EXPECT_NE(cuda.output.find("no CUDA"), std::string::npos) << cuda.output;
#endif
}
