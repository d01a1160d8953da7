// The embedded default model (see default_model.h): a tiny random DeepSeek-V4 with the real 129 280-token
// vocabulary, generated on first use into a cache folder together with the embedded tokenizer. A marker file
// holds a fingerprint of everything that determines the files (config, seed, tokenizer bytes, format version), so
// a stale or half-written cache is regenerated; generation goes to a temporary folder that is renamed into place,
// so concurrent first runs never see partial files.
#include "model/default_model.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/checkpoint_gen.h"
#include "model/config.h"
#include "model/embedded_assets.h"
#include "util/error.h"
#include "util/hash.h"

namespace flashseek {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kDefaultSeed = 20260430;
// Bump when the generator's output for a given config and seed changes, so old caches are regenerated.
constexpr int kGeneratorVersion = 1;
constexpr const char* kMarker = ".flashseek-default-model";

// hidden 256, 4 layers with ratios [0, 4, 128, 4] (+ one MTP layer), 8 experts, head_dim 128 incl. rope 64;
// everything else as in V4-Flash. index_n_heads >= 16 avoids tied index scores (spec, oracle note).
constexpr const char* kDefaultConfig = R"({
  "architectures": ["DeepseekV4ForCausalLM"],
  "model_type": "deepseek_v4",
  "torch_dtype": "bfloat16",
  "hidden_size": 256,
  "num_hidden_layers": 4,
  "vocab_size": 129280,
  "tie_word_embeddings": false,
  "max_position_embeddings": 1048576,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "num_attention_heads": 8,
  "num_key_value_heads": 1,
  "head_dim": 128,
  "qk_rope_head_dim": 64,
  "q_lora_rank": 128,
  "o_lora_rank": 128,
  "o_groups": 2,
  "sliding_window": 32,
  "attention_bias": false,
  "attention_dropout": 0.0,
  "rope_theta": 10000,
  "compress_rope_theta": 160000,
  "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
                   "beta_slow": 1},
  "compress_ratios": [0, 4, 128, 4, 0],
  "index_n_heads": 16,
  "index_head_dim": 128,
  "index_topk": 16,
  "hc_mult": 4,
  "hc_sinkhorn_iters": 20,
  "hc_eps": 1e-06,
  "n_routed_experts": 8,
  "n_shared_experts": 1,
  "num_experts_per_tok": 2,
  "moe_intermediate_size": 256,
  "num_hash_layers": 2,
  "scoring_func": "sqrtsoftplus",
  "topk_method": "noaux_tc",
  "norm_topk_prob": true,
  "routed_scaling_factor": 1.5,
  "swiglu_limit": 10.0,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-06,
  "num_nextn_predict_layers": 1,
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                          "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
  "expert_dtype": "fp4"
}
)";

std::string cache_root() {
    if (const char* h = std::getenv("FLASHSEEK_HOME"); h && *h) return h;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "flashseek").string();
    const char* home = std::getenv("HOME");
    FS_CHECK(home && *home, "default model: none of FLASHSEEK_HOME, XDG_CACHE_HOME or HOME is set, so there is no "
             "cache folder to generate it into");
    return (fs::path(home) / ".cache" / "flashseek").string();
}

std::string fingerprint() {
    uint64_t h = fnv1a_str(kDefaultConfig);
    h = fnv1a_u64(kDefaultSeed, h);
    h = fnv1a_u64(uint64_t(kGeneratorVersion), h);
    h = fnv1a_str(embedded_tokenizer_json(), h);
    h = fnv1a_str(embedded_tokenizer_config_json(), h);
    return fmt::format("flashseek default model v{} {:016x}\n", kGeneratorVersion, h);
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return {};
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const fs::path& p, std::string_view data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(data.data(), std::streamsize(data.size()));
    out.close();
    FS_CHECK(out.good(), "default model: cannot write {}", p.string());
}

bool is_complete(const fs::path& dir, const std::string& fp) {
    std::error_code ec;
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
        if (!fs::is_regular_file(dir / f, ec)) return false;
    return read_file(dir / kMarker) == fp;
}

}  // namespace

std::string default_model_config_json() { return kDefaultConfig; }

std::string ensure_default_model() {
    const fs::path root = cache_root();
    const fs::path dir = root / "default-model";
    const std::string fp = fingerprint();
    if (is_complete(dir, fp)) return dir.string();

    std::error_code ec;
    fs::create_directories(root, ec);
    FS_CHECK(!ec, "default model: cannot create the cache folder {}: {}", root.string(), ec.message());
    static std::atomic<int> attempt{0};  // unique per call, so concurrent callers never share a folder
    const fs::path tmp = root / fmt::format("default-model.tmp-{}-{}", ::getpid(), attempt++);
    fs::remove_all(tmp, ec);
    try {
        const ModelConfig cfg = parse_model_config(kDefaultConfig, "default model config");
        GenOptions opt;
        opt.seed = kDefaultSeed;
        generate_checkpoint(cfg, tmp.string(), opt);
        write_file(tmp / "tokenizer.json", embedded_tokenizer_json());
        write_file(tmp / "tokenizer_config.json", embedded_tokenizer_config_json());
        write_file(tmp / kMarker, fp);  // last: its presence means the folder is complete
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    // Replace a stale folder; if another process finished first, keep its (identical) result.
    if (fs::exists(dir, ec) && !is_complete(dir, fp)) {
        const fs::path old = root / fmt::format("default-model.old-{}-{}", ::getpid(), attempt++);
        fs::rename(dir, old, ec);
        fs::remove_all(old, ec);
    }
    fs::rename(tmp, dir, ec);
    if (ec) {
        fs::remove_all(tmp, ec);
        FS_CHECK(is_complete(dir, fp), "default model: cannot move the generated model into {}", dir.string());
    }
    return dir.string();
}

}  // namespace flashseek
