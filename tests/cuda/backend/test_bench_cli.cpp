// `flashseek bench` through the built binary on a tiny model: a configuration the state pool cannot hold (a
// prefill length, a decode context) is skipped with the reason, in the output and in the JSON, and the rest of the
// sweep still runs and is saved; sampled decode steps (--temperature, --top-p, --top-k) run and are recorded (the
// flags' range errors: tests/backend/test_cli.cpp, no GPU needed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cuda/common/runtime_library.h"
#include "run_command.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace flashseek {
namespace {

// The flashseek binary: beside this test's executable (the device bundle), else the build tree's.
std::string flashseek_binary() {
    const std::string folder = cuda::executable_folder();
    if (folder.empty()) return FLASHSEEK_BIN;
    const fs::path beside = fs::path(folder) / "flashseek";
    return fs::exists(beside) ? beside.string() : FLASHSEEK_BIN;
}

TEST(CudaBenchCli, ConfigurationsThatDoNotFitAreSkippedAndTheRestSaved) {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    const std::string json = (fs::temp_directory_path() / ("bench_skip_" + std::to_string(::getpid()) + ".json")).string();
    // tiny-a keeps ~0.8 KB of compressed state per token: 60,000 tokens need ~12 MB, more than the 4 MiB pool;
    // 64 and 32 tokens fit in a block or two.
    const std::string cmd = flashseek_binary() + " bench --model " + test::source_dir() +
                            "/tests/data/configs/tiny-a.json --dummy-weights --prefill 60000,64 --prefill-runs 1 "
                            "--context 32,60000 --concurrency 1 --output-len 2 --warmup 1 --state-memory 4MiB "
                            "--seed 3 --json " + json;
    const test_support::CommandResult r = test_support::run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("skipped: 1 x 60000 tokens need"), std::string::npos) << r.output;
    std::ifstream f(json);
    ASSERT_TRUE(f.good()) << "no JSON written: " << r.output;
    const nlohmann::json doc = nlohmann::json::parse(f);
    fs::remove(json);
    ASSERT_EQ(doc["prefill"].size(), 2u);
    EXPECT_EQ(doc["prefill"][0]["tokens"], 60000);
    EXPECT_TRUE(doc["prefill"][0].contains("skipped"));
    EXPECT_EQ(doc["prefill"][1]["tokens"], 64);
    EXPECT_GT(doc["prefill"][1]["prefill_tok_s"].get<double>(), 0);
    ASSERT_EQ(doc["results"].size(), 2u);
    EXPECT_EQ(doc["results"][0]["context"], 32);
    EXPECT_GT(doc["results"][0]["tpot_median_ms"].get<double>(), 0);
    EXPECT_EQ(doc["results"][0]["timed_passes"]["replayed"].get<int64_t>() +
                  doc["results"][0]["timed_passes"]["captured"].get<int64_t>() +
                  doc["results"][0]["timed_passes"]["first_eager"].get<int64_t>(),
              2);
    EXPECT_EQ(doc["results"][1]["context"], 60000);
    EXPECT_TRUE(doc["results"][1].contains("skipped"));
}

TEST(CudaBenchCli, SampledDecodeStepsRunAndAreRecorded) {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    const std::string json =
        (fs::temp_directory_path() / ("bench_sampled_" + std::to_string(::getpid()) + ".json")).string();
    const test_support::CommandResult r = test_support::run_command(
        flashseek_binary() + " bench --model " + test::source_dir() +
        "/tests/data/configs/tiny-a.json --dummy-weights --prefill none --context 16 --concurrency 1,3 "
        "--output-len 3 --warmup 1 --seed 5 --temperature 0.8 --top-p 0.9 --top-k 20 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("sampled: temperature 0.8"), std::string::npos) << r.output;
    std::ifstream f(json);
    ASSERT_TRUE(f.good()) << "no JSON written: " << r.output;
    const nlohmann::json doc = nlohmann::json::parse(f);
    fs::remove(json);
    ASSERT_EQ(doc["results"].size(), 2u);
    for (const nlohmann::json& res : doc["results"]) {
        EXPECT_DOUBLE_EQ(res["decode_sampling"]["temperature"].get<double>(), 0.8);
        EXPECT_DOUBLE_EQ(res["decode_sampling"]["top_p"].get<double>(), 0.9);
        EXPECT_EQ(res["decode_sampling"]["top_k"].get<int>(), 20);
        EXPECT_GT(res["tpot_median_ms"].get<double>(), 0);
        EXPECT_EQ(res["step_ms"].size(), 3u);
    }
}

}  // namespace
}  // namespace flashseek
