// The flashseek binary's gen-checkpoint and inspect subcommands: output, determinism through the CLI, and clear
// errors (non-zero exit, message naming the key or file) for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>

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
