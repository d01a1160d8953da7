// The embedded default model: generated on first use into $FLASHSEEK_HOME with the tokenizer linked into the
// binary, reused afterwards, regenerated when incomplete; pinned by a content hash.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>

#include "model/default_model.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace flashseek;
using namespace flashseek::test;

namespace {
constexpr uint64_t kDefaultModelHash = 0x2ccccb3a9e0d4622ull;
}

TEST(DefaultModel, GeneratedOnceWithTokenizer) {
    TempDir home;
    ::setenv("FLASHSEEK_HOME", home.str().c_str(), 1);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string dir = ensure_default_model();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("default model generated in %.2f s\n", secs);
    EXPECT_EQ(dir, home.file("default-model"));

    const std::string src = std::string(FLASHSEEK_SOURCE_DIR) + "/assets/tokenizer/deepseek-v4/";
    EXPECT_EQ(read_bytes(dir + "/tokenizer.json"), read_bytes(src + "tokenizer.json"));
    EXPECT_EQ(read_bytes(dir + "/tokenizer_config.json"), read_bytes(src + "tokenizer_config.json"));

    const ModelConfig cfg = load_model_config(dir + "/config.json");
    EXPECT_EQ(cfg.vocab_size, 129280);
    EXPECT_EQ(cfg.hidden_size, 256);
    EXPECT_EQ(cfg.compress_ratios, (std::vector<int>{0, 4, 128, 4}));
    EXPECT_EQ(cfg.n_routed_experts, 8);
    EXPECT_EQ(cfg.index_n_heads, 16);
    EXPECT_EQ(cfg.sliding_window, 32);
    EXPECT_EQ(model_config_to_json(parse_model_config(default_model_config_json())), model_config_to_json(cfg));
    const auto ck = Checkpoint::open(dir);
    EXPECT_NO_THROW(bind_weights(cfg, *ck));
    EXPECT_EQ(content_hash(*ck), kDefaultModelHash) << std::hex << content_hash(*ck);

    // Reused: the second call does not rewrite anything.
    const auto mtime = std::filesystem::last_write_time(dir + "/model.safetensors");
    EXPECT_EQ(ensure_default_model(), dir);
    EXPECT_EQ(std::filesystem::last_write_time(dir + "/model.safetensors"), mtime);

    // Incomplete or stale folders are regenerated.
    std::filesystem::remove(dir + "/tokenizer.json");
    EXPECT_EQ(ensure_default_model(), dir);
    EXPECT_EQ(read_bytes(dir + "/tokenizer.json"), read_bytes(src + "tokenizer.json"));
    write_bytes(dir + "/.flashseek-default-model", "stale");
    write_bytes(dir + "/model.safetensors", "garbage");
    EXPECT_EQ(ensure_default_model(), dir);
    EXPECT_EQ(content_hash(*Checkpoint::open(dir)), kDefaultModelHash);
    // No temporary folders are left behind.
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(home.str())) entries += 1 + 0 * int(e.path().empty());
    EXPECT_EQ(entries, 1);
}

TEST(DefaultModel, CacheLocationFallbacks) {
    TempDir xdg;
    ::unsetenv("FLASHSEEK_HOME");
    ::setenv("XDG_CACHE_HOME", xdg.str().c_str(), 1);
    // Only checks the location logic; generation is covered above. A complete folder is faked by generating once.
    const std::string dir = ensure_default_model();
    EXPECT_EQ(dir, xdg.file("flashseek/default-model"));
}
