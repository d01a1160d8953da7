// `flashseek gen-checkpoint`: writes a random checkpoint in the official DeepSeek-V4 layout for a config, for tests
// and demos (deterministic for a given config and seed).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "command.h"
#include "model/checkpoint_gen.h"
#include "model/config.h"
#include "util/error.h"

namespace {

int run_gen_checkpoint(int argc, char** argv) {
    CLI::App app{"Write a random DeepSeek-V4 checkpoint (official layout and dtypes) for a config.json"};
    std::string config_path, out_dir, expert_dtype;
    uint64_t seed = 0;
    int shards = 1, threads = 0;
    bool f32_scales = false;
    app.add_option("--config", config_path, "config.json to generate for")->required();
    app.add_option("--out", out_dir, "output directory (created; old model files in it are replaced)")->required();
    app.add_option("--seed", seed, "random seed")->required();
    app.add_option("--shards", shards, "number of safetensors shards (> 1 writes model.safetensors.index.json)");
    app.add_option("--expert-dtype", expert_dtype, "routed expert format, overriding the config: fp4 or fp8")
        ->check(CLI::IsMember({"fp4", "fp8"}));
    app.add_flag("--f32-scales", f32_scales, "store block scales as F32 (as Base checkpoints) instead of E8M0");
    app.add_option("--threads", threads, "worker threads (0 = all cores; the output does not depend on it)");
    CLI11_PARSE(app, argc, argv);
    const auto t0 = std::chrono::steady_clock::now();
    flashseek::ModelConfig cfg = flashseek::load_model_config(config_path);
    flashseek::GenOptions opt;
    opt.seed = seed;
    opt.shards = shards;
    opt.f32_scales = f32_scales;
    opt.threads = threads;
    if (expert_dtype == "fp4") opt.expert_dtype = flashseek::ExpertDtype::FP4;
    if (expert_dtype == "fp8") opt.expert_dtype = flashseek::ExpertDtype::FP8;
    const auto summary = flashseek::generate_checkpoint(cfg, out_dir, opt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s: %zu tensors, %zu bytes, %d shard(s), seed %llu (%.2f s)\n", out_dir.c_str(),
                summary.n_tensors, summary.n_bytes, shards, (unsigned long long)seed, secs);
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("gen-checkpoint", "write a random checkpoint in the official layout for a config", run_gen_checkpoint);
