// `flashseek plan-step`: the persistent decode step's planner (docs/decode-step-design.md, stage 2). Builds one
// layer's attention sub-block at one token, or (--layers N) the whole one-token step of N layers and the head, as op
// tiles (backend/decode_step_plan.h), deals them over the grid's CTAs
// with the query path's tiles first and with the side branches' first, checks that each schedule can run (no wait
// that never ends), and prints what the timing model (backend/step_schedule_sim.h) predicts for each: the sub-block
// time, its bytes at the copy rate, and per op its completion and how long its loaded tiles waited for inputs.
// Nothing runs on a GPU and no weight is read: the bytes come from config.json, the costs from the flags.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "backend/decode_step_plan.h"
#include "backend/step_schedule_sim.h"
#include "command.h"
#include "model/config.h"
#include "util/error.h"

namespace {

using namespace flashseek;

nlohmann::ordered_json timing_json(const StepGraph& g, const ScheduleTiming& t) {
    nlohmann::ordered_json j;
    j["step_us"] = t.step_us;
    j["bytes"] = t.bytes;
    j["hbm_busy_us"] = t.hbm_busy_us;
    j["ops"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < g.ops.size(); ++i)
        j["ops"].push_back({{"op", g.ops[i].name},
                            {"tiles", g.ops[i].tiles},
                            {"bytes", g.ops[i].tile_bytes * g.ops[i].tiles},
                            {"done_us", t.op_done_us[i]},
                            {"input_wait_us", t.op_input_wait_us[i]}});
    return j;
}

// A whole step's ops by kind (the name without its layer label): count, MB, and the summed time their loaded tiles
// waited for inputs, largest waits first.
void print_op_kinds(const StepGraph& g, const ScheduleTiming& t) {
    struct Kind {
        int ops = 0;
        double mb = 0, wait_us = 0;
    };
    std::map<std::string, Kind> kinds;
    for (size_t i = 0; i < g.ops.size(); ++i) {
        Kind& k = kinds[op_kind(g.ops[i].name)];
        ++k.ops;
        k.mb += g.ops[i].tile_bytes * g.ops[i].tiles / 1e6;
        k.wait_us += t.op_input_wait_us[i];
    }
    std::vector<std::pair<std::string, Kind>> sorted(kinds.begin(), kinds.end());
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.wait_us > b.second.wait_us; });
    std::printf("  %-26s %5s %10s %16s\n", "op kind", "ops", "MB", "input wait us");
    for (const auto& [name, k] : sorted)
        std::printf("  %-26s %5d %10.2f %16.1f\n", name.c_str(), k.ops, k.mb, k.wait_us);
}

int run_plan_step(int argc, char** argv) {
    CLI::App app{"The persistent decode step's planner: one layer's attention sub-block at one token as op tiles on the "
                 "grid, in both stream orders, with the timing model's prediction"};
    std::string model, json_path;
    std::vector<std::string> cost_args;
    int layer = 2, ctas = 132, layers = 0;
    StepMachine machine;
    app.add_option("--model", model, "a config.json, or a directory holding one")->required();
    app.add_option("--layer", layer, "the layer (2: V4's first ratio-4 layer, the one with the indexer)");
    app.add_option("--layers", layers, "plan the whole one-token step of the first N layers and the head instead "
                   "(the TPOT the persistent step would reach)");
    app.add_option("--ctas", ctas, "resident CTAs, one per SM (132: H100 / H200)");
    app.add_option("--copy-gb-s", machine.copy_gb_s, "the device's copy rate in GB/s (flashseek bench measures it)");
    app.add_option("--per-cta-gb-s", machine.per_cta_gb_s, "the most one CTA's loader takes, GB/s");
    app.add_option("--ring-bytes", machine.ring_bytes, "bytes a CTA's loader may have ahead of its compute");
    app.add_option("--compute-lanes", machine.compute_lanes, "tiles a CTA computes at once (compute warps)");
    app.add_option("--cost", cost_args, "NAME=VALUE: a tile cost (repeatable; the names: see below)");
    bool no_prefetch = false;
    app.add_flag("--no-prefetch", no_prefetch,
                 "request each op's weights only once its inputs are complete (a sequence of kernels without early "
                 "loads: the per-kernel step the persistent one is compared with)");
    app.add_option("--json", json_path, "also write both schedules' timings as JSON to this file");
    app.footer(fmt::format("costs (--cost NAME=VALUE): {}; defaults and their measurements: src/backend/decode_step_plan.h",
                           fmt::join(subblock_cost_names(), ", ")));
    CLI11_PARSE(app, argc, argv);

    SubblockCosts costs;
    for (const std::string& a : cost_args) {
        const size_t eq = a.find('=');
        FS_CHECK(eq != std::string::npos && eq > 0, "--cost '{}': expected NAME=VALUE", a);
        const std::string name = a.substr(0, eq), text = a.substr(eq + 1);
        double value = 0;
        size_t used = 0;
        try {
            value = std::stod(text, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        FS_CHECK(used == text.size() && !text.empty(), "--cost {}: '{}' is not a number", name, text);
        set_subblock_cost(costs, name, value);
    }
    FS_CHECK(ctas >= 1, "--ctas {}: must be >= 1", ctas);
    std::error_code ec;
    const std::string config_path =
        std::filesystem::is_directory(model, ec) ? (std::filesystem::path(model) / "config.json").string() : model;
    const ModelConfig cfg = load_model_config(config_path);
    FS_CHECK(layer >= 0 && layer < cfg.num_hidden_layers, "--layer {}: must be in [0, num_hidden_layers {})", layer,
             cfg.num_hidden_layers);

    FS_CHECK(layers >= 0 && layers <= cfg.num_hidden_layers, "--layers {}: must be in [1, num_hidden_layers {}]",
             layers, cfg.num_hidden_layers);
    const bool whole_step = layers > 0;
    StepGraph g = whole_step ? decode_step_graph(cfg, layers, costs) : attention_subblock_graph(cfg, layer, costs);
    if (no_prefetch) g = without_weight_prefetch(std::move(g));
    if (whole_step)
        std::printf("model: %s, the one-token decode step of %d layers and the head: %zu ops\n", config_path.c_str(),
                    layers, g.ops.size());
    else
        std::printf("model: %s, layer %d (compress ratio %d), attention sub-block at one token: %zu ops\n",
                    config_path.c_str(), layer, cfg.ratio(layer), g.ops.size());
    std::printf("machine: %d CTAs, copy %.0f GB/s, at most %.0f GB/s per CTA, ring %.0f KB, %d compute lanes; tiles of "
                "%.0f B at %.3f us per 1,024 weights (FP4 %.3f)%s\n",
                ctas, machine.copy_gb_s, machine.per_cta_gb_s, machine.ring_bytes / 1024, machine.compute_lanes,
                costs.tile_bytes, costs.us_per_kweight, costs.us_per_kweight_fp4,
                no_prefetch ? "; no weight prefetch across dependencies" : "");
    nlohmann::ordered_json j;
    j["model"] = config_path;
    j["layer"] = layer;
    j["ctas"] = ctas;
    j["prefetch"] = !no_prefetch;
    for (const bool query_first : {true, false}) {
        const char* what = query_first ? "query_first" : "branches_first";
        // simulate_schedule refuses, naming why, a schedule that cannot run (schedule_problem).
        const ScheduleTiming t = simulate_schedule(g, deal_tiles(g, ctas, subblock_order(g, query_first)), machine);
        const double transfer_us = t.bytes / (machine.copy_gb_s * 1e3);
        std::printf("\n%s: %s %.2f us; %.2f MB = %.2f us at the copy rate (%.1f%%); HBM busy %.2f us\n", what,
                    whole_step ? "step (TPOT)" : "sub-block", t.step_us, t.bytes / 1e6, transfer_us,
                    100 * transfer_us / t.step_us, t.hbm_busy_us);
        if (whole_step) {
            print_op_kinds(g, t);
        } else {
            std::printf("  %-26s %6s %10s %10s %14s\n", "op", "tiles", "MB", "done us", "input wait us");
            for (size_t i = 0; i < g.ops.size(); ++i)
                std::printf("  %-26s %6d %10.3f %10.2f %14.1f\n", g.ops[i].name.c_str(), g.ops[i].tiles,
                            g.ops[i].tile_bytes * g.ops[i].tiles / 1e6, t.op_done_us[i], t.op_input_wait_us[i]);
        }
        j[what] = timing_json(g, t);
    }
    if (!json_path.empty()) {
        std::ofstream out(json_path, std::ios::binary | std::ios::trunc);
        out << j.dump(2) << "\n";
        FS_CHECK(out.good(), "--json {}: write failed", json_path);
    }
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("plan-step", "the persistent decode step's planner: op tiles, schedules and predicted times",
                  run_plan_step);
