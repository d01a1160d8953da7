// The flashseek binary's gen-checkpoint, inspect and plan subcommands: output, determinism through the CLI, and clear
// errors (non-zero exit, message naming the key or file) for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include "model/shard_plan.h"
#include "model_test_util.h"

using namespace flashseek::test;

namespace {

struct Result {
    int code;
    std::string output;
};
Result run(const std::string& args) {
    const std::string cmd = std::string(FLASHSEEK_BIN) + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    const int status = ::pclose(p);
    return {WEXITSTATUS(status), out};
}

}  // namespace

TEST(Cli, GenCheckpointAndInspect) {
    TempDir dir;
    auto r = run("gen-checkpoint --config " + config_path("tiny-a.json") + " --out " + dir.str() +
                 " --seed 1 --shards 2");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("427 tensors"), std::string::npos) << r.output;
    r = run("inspect --model " + dir.str());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("tensors: 427"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bytes: 8118528"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("content-hash: fnv1a64:4d0b571e6c80b9d3"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("all tensors match"), std::string::npos) << r.output;
    r = run("inspect --model " + dir.str() + " --tensors --no-validate");
    EXPECT_NE(r.output.find("layers.0.ffn.gate.tid2eid"), std::string::npos);
}

TEST(Cli, Errors) {
    TempDir dir;
    auto j = config_json("tiny-a.json");
    j.erase("hidden_size");
    write_bytes(dir.file("bad.json"), j.dump());
    auto r = run("gen-checkpoint --config " + dir.file("bad.json") + " --out " + dir.file("out") + " --seed 1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.output.find("hidden_size"), std::string::npos) << r.output;
    r = run("gen-checkpoint --config " + config_path("tiny-a.json") + " --out " + dir.file("out") +
            " --seed 1 --expert-dtype int4");
    EXPECT_NE(r.code, 0);
    r = run("inspect --model " + dir.file("nothing"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.output.find("nothing"), std::string::npos) << r.output;
}

// The independent Python oracle (torch's float8 decoders + the official safetensors reader) accepts generated
// checkpoints in every variant. Skipped where torch or safetensors is not installed.
TEST(Cli, PythonOracleAcceptsGeneratedCheckpoints) {
    if (std::system("python3 -c 'import torch, safetensors' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "python3 with torch and safetensors not available";
    const std::string script = std::string(FLASHSEEK_SOURCE_DIR) + "/scripts/check_checkpoint.py";
    struct Variant {
        const char* config;
        const char* flags;
    };
    for (const Variant& v : {Variant{"tiny-a.json", "--shards 3"}, Variant{"tiny-a.json", "--expert-dtype fp8"},
                             Variant{"tiny-b.json", "--f32-scales --expert-dtype fp4"}}) {
        SCOPED_TRACE(std::string(v.config) + " " + v.flags);
        TempDir dir;
        auto r = run("gen-checkpoint --config " + config_path(v.config) + " --out " + dir.str() + " --seed 11 " +
                     v.flags);
        ASSERT_EQ(r.code, 0) << r.output;
        const std::string cmd = "python3 " + script + " " + dir.str() + " 2>&1";
        FILE* p = ::popen(cmd.c_str(), "r");
        std::string out;
        char buf[4096];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
        EXPECT_EQ(WEXITSTATUS(::pclose(p)), 0) << out;
        EXPECT_NE(out.find("check_checkpoint: OK"), std::string::npos) << out;
    }
}

// `flashseek plan` on the 43-layer V4-Flash config: the plans of TP2, EP2, TP4, EP8 and TP2xEP2 print, fit a 141 GB
// GPU for 16 sequences of 8192 tokens, and their JSON carries the library's per-rank bytes.
TEST(Cli, PlanPrintsV4FlashLayouts) {
    const flashseek::ModelConfig cfg = flashseek::load_model_config(config_path("v4-flash.json"));
    TempDir dir;
    struct Case {
        int tp, ep;
        const char* name;
    };
    for (const Case c : {Case{2, 1, "TP2"}, Case{1, 2, "EP2"}, Case{4, 1, "TP4"}, Case{1, 8, "EP8"},
                         Case{2, 2, "TP2xEP2"}}) {
        SCOPED_TRACE(c.name);
        const std::string json = dir.file(std::string(c.name) + ".json");
        const auto r = run("plan --model " + config_path("v4-flash.json") + " --tp " + std::to_string(c.tp) +
                           " --ep " + std::to_string(c.ep) +
                           " --gpu-memory 141GB --max-sequences 16 --max-context 8192 --json " + json);
        ASSERT_EQ(r.code, 0) << r.output;
        const int ranks = c.tp * c.ep;
        EXPECT_NE(r.output.find("43 of 43 layers"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(fmt::format("layout: {} = {} ranks", c.name, ranks)), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(fmt::format("rank {} (tp {}, ep {})", ranks - 1, c.tp - 1, c.ep - 1)),
                  std::string::npos) << r.output;
        EXPECT_NE(r.output.find("fit: every rank fits 141.00 GB"), std::string::npos) << r.output;
        const auto j = nlohmann::json::parse(read_bytes(json));
        ASSERT_EQ(j["ranks"].size(), size_t(ranks));
        const flashseek::ShardPlan plan = flashseek::plan_layout(cfg, {c.tp, c.ep}, 0);
        for (int k = 0; k < ranks; ++k) {
            const int64_t weights = j["ranks"][size_t(k)]["weights"].get<int64_t>();
            EXPECT_EQ(weights, plan.ranks[size_t(k)].total());
            EXPECT_NE(r.output.find(fmt::format("{:>16} bytes  replicated", weights)), std::string::npos) << r.output;
        }
        EXPECT_EQ(j["communication"]["allreduces_per_step"].get<int>(), plan.comm.allreduces_per_step);
        EXPECT_TRUE(j["fits"].get<bool>());
    }
}

TEST(Cli, PlanRefusesWhatDoesNotFit) {
    // The whole model on one 80 GB GPU: refused with the bytes needed and available.
    auto r = run("plan --model " + config_path("v4-flash.json") + " --gpu-memory 80GB");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("layout: TP1 = 1 rank"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("layout TP1 does not fit: rank 0 needs"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the GPU has 80.00 GB (80000000000 bytes)"), std::string::npos) << r.output;
    // 20 layers fit one H200 (141 GB, here in GiB units: 131.3 GiB = 141 GB).
    r = run("plan --model " + config_path("v4-flash.json") + " --layers 20 --gpu-memory 131.3GiB");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("20 of 43 layers"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("fit: every rank fits 140.98 GB"), std::string::npos) << r.output;
    // Layouts that cannot split the model, and bad options, name the key or flag.
    const std::string m = " --model " + config_path("v4-flash.json");
    struct Bad {
        std::string args, message;
    };
    for (const Bad& b : {Bad{"--tp 3", "tp 3 does not divide o_groups 8"}, Bad{"--ep 3", "ep 3 does not divide "
                         "n_routed_experts 256"}, Bad{"--tp abc", "--tp 'abc'"}, Bad{"--ep 0", "--ep '0'"},
                         Bad{"--gpu-memory 80XB", "--gpu-memory '80XB'"}, Bad{"--gpu-memory 0", "--gpu-memory '0'"},
                         Bad{"--layers 50", "--layers 50"}, Bad{"--max-context 0", "max-context 0"},
                         Bad{"--ep 32", "shared expert"}}) {
        SCOPED_TRACE(b.args);
        r = run("plan" + m + " " + b.args);
        EXPECT_EQ(r.code, 1) << r.output;
        EXPECT_NE(r.output.find(b.message), std::string::npos) << r.output;
    }
    TempDir dir;
    r = run("plan --model " + dir.str());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.output.find(dir.str() + "/config.json"), std::string::npos) << r.output;
    // A directory holding config.json is accepted.
    write_bytes(dir.file("config.json"), read_bytes(config_path("tiny-sharding.json")));
    r = run("plan --model " + dir.str() + " --tp 2 --ep 2");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("fit: not checked"), std::string::npos) << r.output;
}
