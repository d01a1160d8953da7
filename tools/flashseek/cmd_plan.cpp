// `flashseek plan`: the dry run of a parallel layout. Prints, per rank, the weight bytes of each category (replicated
// and sharded), the per-sequence state for the given sequences and context, the step-buffer estimate and reserve,
// the communication of one decode step, and whether every rank fits the given GPU memory; a layout that cannot be
// split, or does not fit, is refused (non-zero exit) with the key and numbers, or the bytes it needs and has.
// Nothing is allocated and no weight is read: the plan comes from config.json alone.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "byte_size.h"
#include "command.h"
#include "layout_flags.h"
#include "model/config.h"
#include "model/memory_estimate.h"
#include "model/shard_plan.h"
#include "util/error.h"

namespace {

using namespace flashseek;

std::string gb(int64_t bytes) { return fmt::format("{:.3f} GB", double(bytes) / 1e9); }

void print_line(const char* what, int64_t bytes, const std::string& note = "") {
    std::printf("  %-26s %12s %16lld bytes%s%s\n", what, gb(bytes).c_str(), (long long)bytes, note.empty() ? "" : "  ",
                note.c_str());
}

std::string range(int64_t b, int64_t e) { return fmt::format("[{}, {})", b, e); }

nlohmann::ordered_json rank_json(const RankPlan& rp, const RankMemory& mem) {
    nlohmann::ordered_json j;
    const RankSlice& s = rp.slice;
    j["rank"] = s.rank;
    j["tp_rank"] = s.tp_rank;
    j["ep_rank"] = s.ep_rank;
    j["heads"] = {s.head_begin, s.head_end};
    j["groups"] = {s.group_begin, s.group_end};
    j["experts"] = {s.expert_begin, s.expert_end};
    j["expert_inter"] = {s.inter_begin, s.inter_end};
    j["shared_inter"] = {s.shared_inter_begin, s.shared_inter_end};
    j["vocab"] = {s.vocab_begin, s.vocab_end};
    nlohmann::ordered_json cats;
    for (int c = 0; c < int(WeightCategory::kCount); ++c)
        cats[weight_category_name(WeightCategory(c))] = rp.held.bytes[size_t(c)];
    j["weight_bytes"] = cats;
    j["weights"] = rp.total();
    j["replicated"] = rp.replicated_bytes;
    j["sharded"] = rp.sharded_bytes;
    j["routed_expert_bytes"] = rp.routed_expert_bytes;
    j["experts_per_layer"] = rp.experts_per_layer;
    j["state"] = mem.state;
    j["step_buffers"] = mem.buffers;
    j["reserve"] = mem.reserve;
    j["device_total"] = mem.total();
    return j;
}

int run_plan(int argc, char** argv) {
    CLI::App app{"Dry run of a parallel layout: per-rank weight bytes, state, communication, and the fit check"};
    std::string model, gpu_memory_text, numerics = "release", allreduce_dtype = "bf16", json_path;
    cli::LayoutFlags layout_flags;
    int layers = 0, max_sequences = 1, prefill_chunk = kDefaultPrefillChunkTokens;
    int64_t max_context = 4096;
    app.add_option("--model", model, "a config.json, or a directory holding one")->required();
    layout_flags.add_to(app);
    app.add_option("--layers", layers, "plan only the first N layers (0 = all; the MTP layers are never planned)");
    app.add_option("--gpu-memory", gpu_memory_text,
                   "memory of one GPU (80GB, 141GB, 96GiB, or bytes); without it nothing is checked");
    app.add_option("--max-sequences", max_sequences, "sequences the state is sized for (1)");
    app.add_option("--max-context", max_context, "tokens per sequence the state is sized for (4096)");
    app.add_option("--prefill-chunk", prefill_chunk, "prefill tokens per sequence and pass (4096, the CUDA default; the window rings "
                   "hold one chunk more than the window)");
    app.add_option("--numerics", numerics, "release (FP8 KV, FP4 indexer keys) or exact (bf16 state)")
        ->check(CLI::IsMember({"exact", "release"}));
    app.add_option("--allreduce-dtype", allreduce_dtype, "element of the all-reduce messages: bf16 or fp32")
        ->check(CLI::IsMember({"bf16", "fp32"}));
    app.add_option("--json", json_path, "also write the plan as JSON to this file");
    CLI11_PARSE(app, argc, argv);
    const ParallelLayout layout = layout_flags.layout();
    const int64_t gpu_memory = gpu_memory_text.empty() ? 0 : cli::parse_byte_size("--gpu-memory", gpu_memory_text);
    std::error_code ec;
    const std::string config_path =
        std::filesystem::is_directory(model, ec) ? (std::filesystem::path(model) / "config.json").string() : model;
    const ModelConfig cfg = load_model_config(config_path);
    FS_CHECK(layers >= 0 && layers <= cfg.num_hidden_layers, "--layers {}: must be in [0, num_hidden_layers {}]",
             layers, cfg.num_hidden_layers);

    PlanOptions popt;
    popt.comm_element_bytes = allreduce_dtype == "fp32" ? 4 : 2;
    const ShardPlan plan = plan_layout(cfg, layout, layers, popt);
    StateOptions sopt;
    sopt.max_sequences = max_sequences;
    sopt.max_context = max_context;
    sopt.release_numerics = numerics == "release";
    sopt.prefill_chunk_tokens = prefill_chunk;
    const MemoryPlan memory = plan_memory(plan, sopt);

    std::printf("model: %s, %d of %d layers (MTP not planned)\n", config_path.c_str(), plan.n_layers,
                cfg.num_hidden_layers);
    std::printf("layout: %s = %d rank%s (rank = ep_rank x %d + tp_rank)\n", layout.name().c_str(), layout.ranks(),
                layout.ranks() == 1 ? "" : "s", layout.tp);
    std::printf("whole model: %s (%lld bytes)\n", gb(plan.model_bytes).c_str(), (long long)plan.model_bytes);
    std::printf("state: %d sequence%s x %lld tokens, %s numerics (KV entry %lld B, indexer key %lld B): rings %s, "
                "compressor state %s, %lld blocks of %lld tokens x %lld B\n",
                max_sequences, max_sequences == 1 ? "" : "s", (long long)max_context, numerics.c_str(),
                (long long)memory.state.kv_entry_bytes, (long long)memory.state.index_entry_bytes,
                gb(memory.state.ring_bytes).c_str(), gb(memory.state.compressor_state_bytes).c_str(),
                (long long)memory.state.blocks, (long long)memory.state.block_tokens,
                (long long)memory.state.block_bytes);
    for (size_t r = 0; r < plan.ranks.size(); ++r) {
        const RankPlan& rp = plan.ranks[r];
        const RankSlice& s = rp.slice;
        const RankMemory& mem = memory.ranks[r];
        std::printf("\nrank %d (tp %d, ep %d): heads %s, wo_a groups %s, experts %s x intermediate %s, shared expert "
                    "intermediate %s, vocabulary %s\n",
                    s.rank, s.tp_rank, s.ep_rank, range(s.head_begin, s.head_end).c_str(),
                    range(s.group_begin, s.group_end).c_str(), range(s.expert_begin, s.expert_end).c_str(),
                    range(s.inter_begin, s.inter_end).c_str(),
                    range(s.shared_inter_begin, s.shared_inter_end).c_str(),
                    range(s.vocab_begin, s.vocab_end).c_str());
        for (int c = 0; c < int(WeightCategory::kCount); ++c) {
            const auto cat = WeightCategory(c);
            if (cat == WeightCategory::Mtp) continue;  // never planned
            print_line(weight_category_name(cat), rp.held[cat]);
        }
        print_line("weights", rp.total(),
                   fmt::format("replicated {:.3f} GB, sharded {:.3f} GB", double(rp.replicated_bytes) / 1e9,
                               double(rp.sharded_bytes) / 1e9));
        print_line("state", mem.state);
        print_line("step buffers (estimate)", mem.buffers);
        print_line("reserve", mem.reserve);
        print_line("device total", mem.total());
    }
    const CommunicationPlan& c = plan.comm;
    std::printf("\ncommunication per decode token (%s messages): ", allreduce_dtype.c_str());
    if (c.allreduces_per_step == 0) {
        std::printf("none (one rank)\n");
    } else {
        if (c.attention_bytes) std::printf("attention all-reduce %lld B per layer over %d ranks; ",
                                           (long long)c.attention_bytes, c.attention_group);
        if (c.moe_bytes) std::printf("MoE all-reduce %lld B per layer over %d ranks; ", (long long)c.moe_bytes,
                                     c.moe_group);
        std::printf("%d all-reduces per step, %lld B all-reduced per token per step; greedy head gather %lld B\n",
                    c.allreduces_per_step, (long long)c.allreduce_bytes_per_token(plan.n_layers),
                    (long long)c.head_gather_bytes);
    }

    const std::string problem = gpu_memory > 0 ? fit_problem(plan, memory, gpu_memory) : "";
    if (!json_path.empty()) {
        nlohmann::ordered_json j;
        j["model"] = config_path;
        j["layout"] = layout.name();
        j["tp"] = layout.tp;
        j["ep"] = layout.ep;
        j["layers"] = plan.n_layers;
        j["model_bytes"] = plan.model_bytes;
        j["max_sequences"] = max_sequences;
        j["max_context"] = max_context;
        j["numerics"] = numerics;
        j["ranks"] = nlohmann::ordered_json::array();
        for (size_t r = 0; r < plan.ranks.size(); ++r) j["ranks"].push_back(rank_json(plan.ranks[r], memory.ranks[r]));
        j["communication"] = {{"element_bytes", c.element_bytes},
                              {"attention_group", c.attention_group},
                              {"moe_group", c.moe_group},
                              {"attention_bytes_per_token_layer", c.attention_bytes},
                              {"moe_bytes_per_token_layer", c.moe_bytes},
                              {"allreduces_per_step", c.allreduces_per_step},
                              {"head_gather_bytes_per_token", c.head_gather_bytes}};
        if (gpu_memory > 0) {
            j["gpu_memory"] = gpu_memory;
            j["fits"] = problem.empty();
        }
        std::ofstream out(json_path, std::ios::binary | std::ios::trunc);
        out << j.dump(2) << "\n";
        FS_CHECK(out.good(), "--json {}: write failed", json_path);
    }
    if (gpu_memory == 0) {
        std::printf("fit: not checked (no --gpu-memory)\n");
        return 0;
    }
    FS_CHECK(problem.empty(), "{}", problem);
    const RankMemory& worst = memory.largest_rank();
    std::printf("fit: every rank fits %s (the largest, rank %d, needs %s)\n", format_bytes(gpu_memory).c_str(),
                worst.rank, format_bytes(worst.total()).c_str());
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("plan", "dry run of a parallel layout (--tp, --ep): bytes per rank, state, communication, fit",
                  run_plan);
