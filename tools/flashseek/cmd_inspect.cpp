// `flashseek inspect`: summarizes a checkpoint directory (tensor count, bytes, dtype histogram, a content hash over
// all tensors in name order) and validates it against its config.json. Tests compare the hash to check that a
// regenerated checkpoint is bit-identical.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <map>

#include "command.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/error.h"
#include "util/hash.h"

namespace {

int run_inspect(int argc, char** argv) {
    CLI::App app{"Summarize and validate a checkpoint directory"};
    std::string dir;
    bool list = false, no_hash = false, no_validate = false;
    app.add_option("--model", dir, "checkpoint directory (config.json + safetensors)")->required();
    app.add_flag("--tensors", list, "list every tensor (name, dtype, shape, bytes, FNV-1a of its bytes)");
    app.add_flag("--no-hash", no_hash, "skip the content hash (which reads every byte)");
    app.add_flag("--no-validate", no_validate, "do not check the tensors against config.json");
    CLI11_PARSE(app, argc, argv);
    const auto ckpt = flashseek::Checkpoint::open(dir);
    std::map<std::string, std::pair<size_t, size_t>> by_dtype;  // count, bytes
    // Content hash: FNV-1a over, per tensor in name order, its name, dtype, shape and bytes.
    uint64_t h = flashseek::kFnvOffset;
    for (const auto& [name, t] : ckpt->all()) {
        auto& d = by_dtype[flashseek::dtype_name(t->dtype)];
        d.first += 1;
        d.second += t->nbytes;
        uint64_t th = 0;
        if (!no_hash || list) th = flashseek::fnv1a(t->data, t->nbytes);
        if (!no_hash) {
            h = flashseek::fnv1a_str(name, h);
            h = flashseek::fnv1a_str(flashseek::dtype_name(t->dtype), h);
            for (auto s : t->shape) h = flashseek::fnv1a_u64(uint64_t(s), h);
            h = flashseek::fnv1a_u64(th, h);
        }
        if (list)
            std::printf("%-56s %-8s %-18s %12zu %016llx\n", name.c_str(), flashseek::dtype_name(t->dtype),
                        t->shape_str().c_str(), t->nbytes, (unsigned long long)th);
    }
    std::printf("model: %s\n", dir.c_str());
    std::printf("tensors: %zu\n", ckpt->all().size());
    std::printf("bytes: %zu\n", ckpt->total_bytes());
    for (const auto& [dt, d] : by_dtype) std::printf("dtype %s: %zu tensors, %zu bytes\n", dt.c_str(), d.first, d.second);
    if (!no_hash) std::printf("content-hash: fnv1a64:%016llx\n", (unsigned long long)h);
    const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
    if (!no_validate) {
        const auto cfg = flashseek::load_model_config(cfg_path);
        flashseek::bind_weights(cfg, *ckpt);
        std::printf("config: %d layers, hidden %lld, %d experts, vocab %lld; all tensors match\n",
                    cfg.num_hidden_layers, (long long)cfg.hidden_size, cfg.n_routed_experts,
                    (long long)cfg.vocab_size);
    }
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("inspect", "summarize a checkpoint: tensors, bytes, content hash; validate against config.json",
                  run_inspect);
