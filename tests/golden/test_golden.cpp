// The golden test (acceptance "exact numerics vs goldens <= 1e-4"): for every committed golden, regenerate its
// checkpoint with `flashseek gen-checkpoint` (recorded seed) or take the committed one (trained models), check the
// content hash recorded when the golden was made, run `flashseek logits` with the recorded tokens and prefill length (CPU backend, exact numerics), and
// require ||ours_t - golden_t|| / ||golden_t|| <= 1e-4 at every position t. The goldens come from HF transformers
// (scripts/make_goldens.py), so no torch is needed here. Also unit tests of the harness itself.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <cmath>
#include <unistd.h>

#include "f32_file.h"
#include "golden_case.h"
#include "run_command.h"
#include "util/error.h"

namespace fs = std::filesystem;
using namespace flashseek::golden;
using namespace flashseek::test_support;

namespace {

const fs::path kGoldenRoot = fs::path(FLASHSEEK_SOURCE_DIR) / "tests" / "data" / "goldens";

struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& tag) {
        path = fs::temp_directory_path() / ("flashseek-golden-" + tag + "-" + std::to_string(getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

std::string flashseek_cmd(const std::string& args) { return shell_quote(FLASHSEEK_BIN) + " " + args; }

uint32_t fresh_seed() {
    std::random_device rd;
    return rd();
}

class Golden : public ::testing::TestWithParam<fs::path> {};

// Regenerates the golden's checkpoint, checks its hash, runs `flashseek logits` (plus `extra_args`) and compares.
void run_and_compare(const GoldenCase& g, const std::string& extra_args, const std::string& label) {
    TempDir tmp(g.name + "-" + label);
    fs::path model = tmp.path / "model";
    if (g.checkpoint_dir.empty()) {
        auto gen = run_command(flashseek_cmd("gen-checkpoint --config " + shell_quote(g.config_path.string()) +
                                             " --out " + shell_quote(model.string()) + " --seed " +
                                             std::to_string(g.seed)));
        ASSERT_EQ(gen.exit_code, 0) << "gen-checkpoint failed:\n" << gen.output;
    } else {
        model = g.checkpoint_dir;
    }
    auto inspect = run_command(flashseek_cmd("inspect --model " + shell_quote(model.string())));
    ASSERT_EQ(inspect.exit_code, 0) << "inspect failed:\n" << inspect.output;
    ASSERT_EQ(parse_content_hash(inspect.output), g.content_hash)
        << "golden '" << g.name << "': the checkpoint is not the one the golden was made from; "
        << "regenerate the golden with scripts/make_goldens.py (see its meta.json 'command')";

    const fs::path tokens = tmp.path / "tokens.txt";
    {
        std::ofstream out(tokens);
        for (size_t i = 0; i < g.tokens.size(); ++i) out << g.tokens[i] << (i + 1 < g.tokens.size() ? ' ' : '\n');
    }
    const fs::path logits = tmp.path / "logits.bin";
    auto run = run_command(flashseek_cmd("logits --model " + shell_quote(model.string()) + " --tokens " +
                                         shell_quote(tokens.string()) + " --prefill " + std::to_string(g.prefill) +
                                         " --output " + shell_quote(logits.string()) + extra_args));
    ASSERT_EQ(run.exit_code, 0) << "flashseek logits failed:\n" << run.output;

    const int64_t n = int64_t(g.n_tokens) * g.vocab_size;
    const auto ours = read_f32_file(logits, n);
    const auto golden = read_f32_file(g.logits_path, n);
    const auto err = per_position_rel_err(ours.data(), golden.data(), g.n_tokens, g.vocab_size);
    int worst = 0, n_bad = 0, first_bad = -1;
    for (int t = 0; t < g.n_tokens; ++t) {
        if (!(err[size_t(t)] <= err[size_t(worst)])) worst = t;
        if (!(err[size_t(t)] <= g.tolerance)) {
            ++n_bad;
            if (first_bad < 0) first_bad = t;
        }
    }
    std::printf("[golden %s, %s] %d tokens (prefill %d + %d decode): max rel err %.3e at t=%d (tolerance %.0e)\n",
                g.name.c_str(), label.c_str(), g.n_tokens, g.prefill, g.n_tokens - g.prefill, err[size_t(worst)],
                worst, g.tolerance);
    EXPECT_EQ(n_bad, 0) << "golden '" << g.name << "' (" << label << "): " << n_bad << " positions exceed "
                        << g.tolerance << "; first at t=" << first_bad << " (rel err "
                        << (first_bad >= 0 ? err[size_t(first_bad)] : 0) << ", "
                        << (first_bad >= g.prefill ? "decode" : "prefill") << "), worst t=" << worst << " (rel err "
                        << err[size_t(worst)] << ")";
}

TEST_P(Golden, MatchesHfTransformersWithin1e4) {
    run_and_compare(load_golden_case(GetParam()), "", "prefill");
}

// The same contract with the prefill split into chunks of an odd size (chunk boundaries then fall inside
// compression windows): the logits are the same function of the tokens, so the same golden applies.
TEST_P(Golden, ChunkedPrefillMatchesHfTransformersWithin1e4) {
    const GoldenCase g = load_golden_case(GetParam());
    if (g.prefill < 3) GTEST_SKIP() << "prefill " << g.prefill << " is too short to split";
    const int chunk = std::max(1, std::min(37, g.prefill / 2 + 1));
    run_and_compare(g, " --chunk " + std::to_string(chunk), "chunk " + std::to_string(chunk));
}

std::vector<fs::path> golden_dirs() { return list_golden_dirs(kGoldenRoot); }

std::string golden_test_name(const ::testing::TestParamInfo<fs::path>& info) {
    std::string s = info.param.filename().string();
    for (char& c : s)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(Committed, Golden, ::testing::ValuesIn(golden_dirs()), golden_test_name);

// The issue asks for at least two configs that together exercise every layer type, both routing kinds, a sliding
// window shorter than the prompt, many compression windows (several of ratio 128), prefill lengths that are not
// multiples of the ratios, and index_topk below the number of compressed entries with index_n_heads >= 16.
TEST(GoldenSet, CoversEveryLayerTypeRoutingAndWindowCase) {
    const auto dirs = golden_dirs();
    ASSERT_GE(dirs.size(), 2u) << "expected >= 2 goldens under " << kGoldenRoot;
    std::set<std::string> configs;
    std::set<int> ratios;
    bool hash = false, biased = false, short_window = false, many_hca = false, odd_prefill = false;
    bool topk_binds = false, decode_only_rest = false;
    for (const auto& d : dirs) {
        const GoldenCase g = load_golden_case(d);
        std::ifstream in(g.config_path);
        const std::string text(std::istreambuf_iterator<char>(in), {});
        configs.insert(text);
        const auto c = nlohmann::json::parse(text);
        const int n_layers = c.at("num_hidden_layers").get<int>();
        const int n_hash = c.at("num_hash_layers").get<int>();
        hash |= n_hash > 0;
        biased |= n_hash < n_layers;
        EXPECT_GE(c.at("index_n_heads").get<int>(), 16) << g.name << ": fewer heads make tied zero index scores";
        bool has_hca = false, has_csa = false;
        for (int i = 0; i < n_layers; ++i) {
            const int r = c.at("compress_ratios").at(size_t(i)).get<int>();
            ratios.insert(r);
            has_hca |= r == 128;
            has_csa |= r == 4;
        }
        short_window |= c.at("sliding_window").get<int>() < g.n_tokens;
        many_hca |= has_hca && g.n_tokens / 128 >= 3;
        odd_prefill |= g.prefill % 4 != 0 && g.prefill % 128 != 0;
        topk_binds |= has_csa && c.at("index_topk").get<int>() < g.n_tokens / 4;
        decode_only_rest |= g.n_tokens - g.prefill > g.prefill;
    }
    EXPECT_GE(configs.size(), 2u) << "the goldens must use at least two different configs";
    EXPECT_TRUE(ratios.count(0) && ratios.count(4) && ratios.count(128)) << "layer types 0, 4 and 128";
    EXPECT_TRUE(hash && biased) << "hash-routed and bias-routed layers";
    EXPECT_TRUE(short_window) << "a sliding window shorter than the prompt";
    EXPECT_TRUE(many_hca) << "a prompt crossing >= 3 ratio-128 windows";
    EXPECT_TRUE(odd_prefill) << "a prefill length that is not a multiple of 4 or 128";
    EXPECT_TRUE(topk_binds) << "index_topk smaller than the number of compressed entries";
    EXPECT_TRUE(decode_only_rest) << "more decode steps than prefill tokens in some golden";
}

// The literal accuracy criterion of issue 4 (rel err <= 2e-2, argmax >= 99% for bf16 implementations) can only
// mean something on a model without discrete decisions: every expert active (no router top-k choice) and
// index_topk at least every query's number of ratio-4 entries (no indexer top-k choice). One golden must be such a
// model, made with scripts/make_goldens.py --no-decisions (which records checks.decision_free).
TEST(GoldenSet, HasADecisionFreeGolden) {
    int found = 0;
    for (const auto& d : golden_dirs()) {
        const GoldenCase g = load_golden_case(d);
        std::ifstream in(g.config_path);
        const auto c = nlohmann::json::parse(in);
        const bool all_experts = c.at("num_experts_per_tok").get<int>() == c.at("n_routed_experts").get<int>();
        const bool topk_never_binds = c.at("index_topk").get<int64_t>() >= g.n_tokens / 4;
        std::ifstream min(d / "meta.json");
        const auto meta = nlohmann::json::parse(min);
        const bool recorded = meta.at("checks").value("decision_free", false);
        if (all_experts && topk_never_binds) {
            EXPECT_TRUE(recorded) << g.name << ": the oracle's checks must confirm it made no top-k decision";
            EXPECT_NE(g.prefill % 4, 0) << g.name << ": the prefill should end inside a compression window";
            ++found;
        }
    }
    EXPECT_GE(found, 1) << "no decision-free golden under " << kGoldenRoot;
}

// ---- the harness itself ----

TEST(GoldenHarness, RelErrIsZeroForIdenticalAndMeasuresPerturbation) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 3.f);
    const int rows = 7, cols = 301;
    std::vector<float> a(rows * cols), b;
    for (auto& x : a) x = nd(rng);
    b = a;
    for (double e : per_position_rel_err(a.data(), b.data(), rows, cols)) EXPECT_EQ(e, 0.0);
    // Scale row 3 by (1 + 2e-4): its relative error is exactly 2e-4 (up to rounding), the others stay 0.
    for (int c = 0; c < cols; ++c) b[3 * cols + c] = float(double(a[3 * cols + c]) * (1 + 2e-4));
    const auto err = per_position_rel_err(b.data(), a.data(), rows, cols);
    EXPECT_NEAR(err[3], 2e-4, 1e-6);
    EXPECT_EQ(err[2], 0.0);
    b[5 * cols + 11] = NAN;
    EXPECT_TRUE(std::isinf(per_position_rel_err(b.data(), a.data(), rows, cols)[5])) << "NaN must fail, not pass";
}

TEST(GoldenHarness, MalformedMetaNamesFileAndField) {
    TempDir tmp("meta");
    auto write = [&](const std::string& text) { std::ofstream(tmp.path / "meta.json") << text; };
    auto message = [&]() -> std::string {
        try {
            load_golden_case(tmp.path);
        } catch (const flashseek::Error& e) {
            return e.what();
        }
        return "";
    };
    write("{not json");
    EXPECT_NE(message().find("meta.json: not valid JSON"), std::string::npos) << message();
    write(R"({"name": "x", "gen_checkpoint_seed": 1, "content_hash": "fnv1a64:1", "n_tokens": 2, "vocab_size": 8,
              "tokens": [1, 2]})");
    EXPECT_NE(message().find("missing field 'prefill'"), std::string::npos) << message();
    write(R"({"name": "x", "gen_checkpoint_seed": 1, "content_hash": "fnv1a64:1", "n_tokens": 2, "prefill": 3,
              "vocab_size": 8, "tokens": [1, 2]})");
    EXPECT_NE(message().find("'prefill' = 3 is outside [1, 2]"), std::string::npos) << message();
    write(R"({"name": "x", "gen_checkpoint_seed": 1, "content_hash": "fnv1a64:1", "n_tokens": 2, "prefill": 1,
              "vocab_size": 8, "tokens": [1, 9]})");
    EXPECT_NE(message().find("tokens[1] = 9 is outside"), std::string::npos) << message();
    write(R"({"name": "x", "gen_checkpoint_seed": 1, "content_hash": null, "n_tokens": 2, "prefill": 1,
              "vocab_size": 8, "tokens": [1, 2]})");
    EXPECT_NE(message().find("'content_hash'"), std::string::npos) << message();
    write(R"({"name": "x", "gen_checkpoint_seed": 1, "checkpoint": "model", "content_hash": "fnv1a64:1",
              "n_tokens": 2, "prefill": 1, "vocab_size": 8, "tokens": [1, 2]})");
    EXPECT_NE(message().find("exactly one of the fields 'gen_checkpoint_seed' and 'checkpoint'"), std::string::npos)
        << message();
    write(R"({"name": "x", "checkpoint": "../elsewhere", "content_hash": "fnv1a64:1", "n_tokens": 2, "prefill": 1,
              "vocab_size": 8, "tokens": [1, 2]})");
    EXPECT_NE(message().find("'checkpoint' must name a folder inside"), std::string::npos) << message();
    write(R"({"name": "x", "checkpoint": "model", "content_hash": "fnv1a64:1", "n_tokens": 2, "prefill": 1,
              "vocab_size": 8, "tokens": [1, 2]})");
    EXPECT_NE(message().find("model/config.json: missing (field 'checkpoint'"), std::string::npos) << message();
    write(R"({"name": "x", "gen_checkpoint_seed": 1, "content_hash": "fnv1a64:1", "n_tokens": 2, "prefill": 1,
              "vocab_size": 8, "tokens": [1, 2]})");
    std::ofstream(tmp.path / "config.json") << "{}";
    std::ofstream(tmp.path / "logits.bin") << "short";
    EXPECT_NE(message().find("logits.bin: 5 bytes, expected"), std::string::npos) << message();
}

TEST(GoldenHarness, ReadF32FileChecksSize) {
    TempDir tmp("f32");
    const fs::path p = tmp.path / "x.bin";
    const float v[3] = {1.5f, -2.f, 3.25f};
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(v), sizeof v);
    EXPECT_EQ(read_f32_file(p, 3), (std::vector<float>{1.5f, -2.f, 3.25f}));
    try {
        read_f32_file(p, 4);
        FAIL() << "size mismatch not detected";
    } catch (const flashseek::Error& e) {
        EXPECT_NE(std::string(e.what()).find("x.bin: 12 bytes, expected 4 float32"), std::string::npos) << e.what();
    }
}

TEST(GoldenHarness, ParsesInspectHashAndRunsCommands) {
    EXPECT_EQ(parse_content_hash("tensors: 3\ncontent-hash: fnv1a64:00ff12\nconfig: ok\n"), "fnv1a64:00ff12");
    EXPECT_THROW(parse_content_hash("tensors: 3\n"), flashseek::Error);
    auto r = run_command("echo " + shell_quote("it's") + "; exit 3");
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.output, "it's\n");
}

}  // namespace
