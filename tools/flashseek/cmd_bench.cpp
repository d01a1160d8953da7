// `flashseek bench`: the offline engine benchmark, the instrument for performance work on the CUDA backend.
// For each context length and concurrency: prefill `concurrency` sequences of `context` random tokens (prefill
// tok/s), then `output-len` greedy decode steps of all of them (decode tok/s, TPOT median and p99), then one
// profiled decode step with events around every op (per-op GPU time table, bytes moved, roofline fraction against
// the device-to-device copy bandwidth that bench measures first). Prints a summary and saves everything as JSON.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "backend_flags.h"
#include "command.h"
#include "backend/backend.h"
#include "backend/diagnostics.h"
#include "backend/registry.h"
#include "util/error.h"

namespace {

using namespace flashseek;

std::vector<int> parse_int_list(const std::string& s, const char* what) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        int v = 0;
        try {
            v = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        FS_CHECK(used == item.size() && used > 0 && v > 0, "{}: '{}' is not a positive integer (list '{}')", what, item,
                 s);
        out.push_back(v);
    }
    FS_CHECK(!out.empty(), "{}: empty list", what);
    return out;
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0;
    const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
    return v[i];
}

int run_bench(int argc, char** argv) {
    CLI::App app{"Offline decode/prefill benchmark of a device backend (dummy weights or a checkpoint)"};
    std::string model, concurrency_s = "1,16,64", context_s = "256,8192", json_path;
    cli::BackendFlags flags;
    flags.backend = "cuda";
    int output_len = 32, warmup = 3;
    bool no_graphs = false;
    uint64_t seed = 0;
    app.add_option("--model", model,
                   "checkpoint directory; with --dummy-weights a config.json path or a directory holding one")
        ->required();
    cli::add_backend_flags(app, flags, /*with_dummy=*/true);
    app.add_option("--concurrency", concurrency_s, "comma-separated decode batch sizes");
    app.add_option("--context", context_s, "comma-separated context lengths (prompt tokens per sequence)");
    app.add_option("--output-len", output_len, "decode steps timed per configuration");
    app.add_option("--warmup", warmup, "untimed decode steps before timing (graph capture happens here)");
    app.add_option("--json", json_path, "write the results as JSON to this file");
    app.add_flag("--no-graphs", no_graphs, "run decode steps without CUDA graphs");
    app.add_option("--seed", seed, "seed of the random prompts (0 = from the clock)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    FS_CHECK(output_len >= 2, "--output-len must be >= 2, got {}", output_len);
    FS_CHECK(warmup >= 0, "--warmup must be >= 0, got {}", warmup);
    const std::vector<int> concs = parse_int_list(concurrency_s, "--concurrency");
    const std::vector<int> ctxs = parse_int_list(context_s, "--context");
    if (seed == 0) seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());

    BackendOptions opt = cli::backend_options(flags);
    const bool dummy = opt.dummy_weights;
    const std::string numerics = opt.numerics == Numerics::Release ? "release" : "exact";
    opt.max_sequences = *std::max_element(concs.begin(), concs.end());
    opt.max_context = *std::max_element(ctxs.begin(), ctxs.end()) + warmup + output_len + 2;
    const auto t_load = std::chrono::steady_clock::now();
    auto be = create_backend(model, opt);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    BackendDiagnostics* ext = be->diagnostics();
    FS_CHECK(ext != nullptr, "bench: backend '{}' has no device diagnostics (profiling, ceilings); use --backend cuda",
             flags.backend);
    std::printf("measuring device-to-device copy bandwidth ...\n");
    const double bw = ext->measure_copy_bandwidth();
    std::printf("copy bandwidth: %.1f GB/s (read + write)\n", bw / 1e9);
    ext->set_use_graphs(!no_graphs);
    const ModelConfig& cfg = be->config();
    std::printf("model: %s, %d layers, %s weights (%.2f GB on %s, loaded in %.1f s), numerics %s, graphs %s, seed %llu\n",
                model.c_str(), cfg.num_hidden_layers, dummy ? "dummy" : "checkpoint",
                ext->weight_bytes_on_device() / 1e9, ext->device_name().c_str(), load_s, numerics.c_str(),
                no_graphs ? "off" : "on", (unsigned long long)seed);

    nlohmann::json results = nlohmann::json::array();
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> tok(2, int32_t(std::min<int64_t>(cfg.vocab_size, 100000)) - 1);
    for (int ctx : ctxs) {
        for (int B : concs) {
            std::vector<int> ids;
            for (int i = 0; i < B; ++i) ids.push_back(be->create_sequence());
            std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(ctx)));
            for (auto& p : prompts)
                for (auto& t : p) t = tok(rng);
            std::vector<SequenceStep> steps(static_cast<size_t>(B));
            for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], prompts[size_t(i)].data(), ctx, false};
            std::vector<int32_t> next;
            auto t0 = std::chrono::steady_clock::now();
            ext->decode_greedy(steps, next);
            const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::vector<double> step_ms;
            for (int s = 0; s < warmup + output_len; ++s) {
                for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], &next[size_t(i)], 1, false};
                std::vector<int32_t> out;
                t0 = std::chrono::steady_clock::now();
                ext->decode_greedy(steps, out);
                const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                if (s >= warmup) step_ms.push_back(ms);
                next = out;
            }
            for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], &next[size_t(i)], 1, false};
            const StepProfile prof = ext->profile_step(steps);
            for (int id : ids) be->free_sequence(id);

            const double tpot = percentile(step_ms, 0.5), p99 = percentile(step_ms, 0.99);
            const double bytes = prof.bytes_weights + prof.bytes_state;
            const double roofline_ms = bytes / bw * 1e3;
            nlohmann::json r;
            r["context"] = ctx;
            r["concurrency"] = B;
            r["prefill_tokens"] = int64_t(B) * ctx;
            r["prefill_s"] = prefill_s;
            r["prefill_tok_s"] = double(B) * ctx / prefill_s;
            r["decode_steps"] = output_len;
            r["tpot_median_ms"] = tpot;
            r["tpot_p99_ms"] = p99;
            r["decode_tok_s"] = double(B) * 1e3 / tpot;
            r["step_ms"] = step_ms;
            r["bytes_per_step"] = bytes;
            r["bytes_weights"] = prof.bytes_weights;
            r["bytes_state"] = prof.bytes_state;
            r["distinct_experts"] = prof.distinct_experts;
            r["roofline_ms"] = roofline_ms;
            r["roofline_fraction"] = roofline_ms / tpot;
            r["profiled_gpu_us"] = prof.gpu_us;
            nlohmann::json ops = nlohmann::json::array();
            for (const auto& o : prof.ops)
                ops.push_back({{"op", o.op}, {"variant", o.variant}, {"calls", o.calls}, {"total_us", o.total_us},
                               {"share", prof.gpu_us > 0 ? o.total_us / prof.gpu_us : 0}});
            r["ops"] = ops;
            results.push_back(r);

            std::printf("\n== context %d, concurrency %d ==\n", ctx, B);
            std::printf("prefill: %lld tokens in %.3f s = %.0f tok/s\n", (long long)B * ctx, prefill_s,
                        double(B) * ctx / prefill_s);
            std::printf("decode: TPOT median %.3f ms, p99 %.3f ms, %.1f tok/s\n", tpot, p99, double(B) * 1e3 / tpot);
            std::printf("bytes/step %.3f GB (weights %.3f, state %.3f; %d distinct experts) -> roofline %.3f ms = "
                        "%.1f%% achieved\n",
                        bytes / 1e9, prof.bytes_weights / 1e9, prof.bytes_state / 1e9, prof.distinct_experts,
                        roofline_ms, 100.0 * roofline_ms / tpot);
            std::printf("per-op GPU time of one profiled decode step (events, no graph), total %.1f us:\n", prof.gpu_us);
            std::printf("  %-40s %-26s %6s %12s %7s\n", "op", "variant", "calls", "total us", "share");
            for (size_t i = 0; i < prof.ops.size() && i < 25; ++i)
                std::printf("  %-40s %-26s %6d %12.1f %6.1f%%\n", prof.ops[i].op.c_str(), prof.ops[i].variant.c_str(),
                            prof.ops[i].calls, prof.ops[i].total_us,
                            100.0 * prof.ops[i].total_us / std::max(prof.gpu_us, 1e-9));
        }
    }
    if (!json_path.empty()) {
        nlohmann::json doc;
        doc["device"] = ext->device_name();
        doc["copy_bandwidth_bytes_s"] = bw;
        doc["model"] = model;
        doc["dummy_weights"] = dummy;
        doc["layers"] = cfg.num_hidden_layers;
        doc["numerics"] = numerics;
        doc["graphs"] = !no_graphs;
        doc["seed"] = seed;
        doc["weight_bytes_on_device"] = ext->weight_bytes_on_device();
        doc["results"] = results;
        std::ofstream f(json_path);
        FS_CHECK(f.good(), "--json: cannot open '{}' for writing", json_path);
        f << doc.dump(2) << "\n";
        FS_CHECK(f.good(), "--json: write to '{}' failed", json_path);
        std::printf("\nwrote %s\n", json_path.c_str());
    }
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("bench", "offline GPU benchmark: decode tok/s, TPOT, prefill, per-op table, roofline", run_bench);
