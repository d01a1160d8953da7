// `flashseek bench`: the offline engine benchmark, the instrument for performance work on the CUDA backend.
// It first measures the device's two ceilings: the device-to-device copy bandwidth (decode's memory roofline) and
// the dense FP8 tensor-core rate (prefill's). Then:
//  * prefill: for each --prefill length, sequences of that many random tokens: one untimed (with --warmup > 0: the
//    first pass of a shape pays one-time costs, such as loading its kernels' modules), then --prefill-runs timed
//    ones (the median: tok/s, and the fraction of the tensor-core rate its FLOPs per token reach:
//    src/model/flop_count.h; the untimed run's time is reported beside it, and the host's share: the time it spent
//    enqueuing the pass, BackendDiagnostics::last_host_enqueue_seconds), then one profiled with events around every
//    op (the per-op table of a prefill);
//  * decode: for each context length and concurrency, prefill `concurrency` sequences of `context` tokens (tok/s
//    and FLOP fraction of a batched prefill), then `output-len` greedy decode steps of all of them (decode tok/s,
//    TPOT median and p99, and how the timed steps ran: graph replays, captures, first passes of a new shape), then
//    one profiled decode step (per-op table with each op's weight bytes and their
//    bandwidth, bytes moved in all and per rank of a parallel layout, roofline fraction, the bubble: the step time
//    beyond its bytes at the copy bandwidth, per step and per layer; the eager per-op sum against the step);
//  * with --temperature (and --top-p, --top-k): the timed decode steps sample as served requests do (the backend's
//    forward_sample: each sequence its own seed, one draw per step) instead of the greedy argmax, so the two TPOTs
//    give the sampler's cost per step; the profiled step and the timeline stay greedy;
//  * with --timeline N: N more graph steps traced on the device (CUPTI): the step's wall time split into the time
//    before the first kernel, the kernels' span (some kernel running / none running) and after the last, the largest
//    gaps and every kernel's time per step (backend/kernel_timeline.h), then one layer's kernels by end with what
//    each adds along the chain (the median step cut into layers at mHC's partial kernels, two per layer; medians over
//    the most common kind of layer); and after each prefill length one more prefill pass traced the same way (the
//    eager pass as it runs, which the per-op events cannot show).
// Prints a summary and saves everything as JSON.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "backend_flags.h"
#include "byte_size.h"
#include "command.h"
#include "backend/backend.h"
#include "backend/diagnostics.h"
#include "backend/kernel_timeline.h"
#include "backend/registry.h"
#include "backend/step_roofline.h"
#include "model/flop_count.h"
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

// Per op: its time and share, and where it streams weights their bytes, GB/s and fraction of the copy bandwidth
// (null where it reads none).
nlohmann::json ops_json(const StepProfile& prof, double copy_bandwidth) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& o : prof.ops) {
        const OpBandwidth b = op_bandwidth(o, copy_bandwidth);
        nlohmann::json r = {{"op", o.op}, {"variant", o.variant}, {"calls", o.calls}, {"total_us", o.total_us},
                            {"share", prof.gpu_us > 0 ? o.total_us / prof.gpu_us : 0}, {"bytes", o.bytes}};
        r["gb_s"] = b.streams_weights ? nlohmann::json(b.gb_s) : nlohmann::json();
        r["copy_bw_fraction"] = b.streams_weights ? nlohmann::json(b.copy_fraction) : nlohmann::json();
        ops.push_back(r);
    }
    return ops;
}

// A V4 layer as the timeline sees it: two sub-blocks, each opened by mhc_pre's partial kernel (the split or tiled
// form, or the one-launch form where forced; the head's mhc_pre opens a last period of its own).
PeriodSummary layer_periods(const TimelineSummary& t) {
    return summarize_periods(t, {"mhc_partial", "mhc_pre_one_launch"}, 2);
}

nlohmann::json timeline_json(const TimelineSummary& t, const PeriodSummary& layers) {
    const TimelineStep& m = t.median;
    nlohmann::json j = {{"steps", t.steps},         {"wall_us", m.wall_us},     {"lead_us", m.lead_us},
                        {"span_us", m.span_us},     {"busy_us", m.busy_us},     {"idle_us", m.idle_us},
                        {"tail_us", m.tail_us},     {"kernel_us", m.kernel_us}, {"kernels", m.kernels},
                        {"gaps", m.gaps}};
    j["largest_gaps"] = nlohmann::json::array();
    for (const TimelineGap& g : t.largest) j["largest_gaps"].push_back({{"us", g.us}, {"before", g.before}, {"after", g.after}});
    j["per_kernel"] = nlohmann::json::array();
    for (const TimelineKernel& k : t.kernels)
        j["per_kernel"].push_back({{"kernel", k.name},
                                   {"calls_per_step", k.calls_per_step},
                                   {"us_per_step", k.us_per_step},
                                   {"us_per_call", k.us_per_call},
                                   {"charged_us_per_step", k.charged_us_per_step}});
    j["median_step_kernels"] = nlohmann::json::array();  // [kernel, stream, start ns, end ns] from the step's mark
    for (const KernelSpan& k : t.median_step_spans)
        j["median_step_kernels"].push_back({k.name, k.stream, k.start_ns, k.end_ns});
    nlohmann::json per_layer = {{"layers", layers.periods},
                                {"alike", layers.alike},
                                {"median_us", layers.median_us},
                                {"charged_us", layers.charged_us},
                                {"kernels", nlohmann::json::array()}};
    for (const PeriodKernel& k : layers.kernels)
        per_layer["kernels"].push_back({{"kernel", k.name},
                                        {"occurrence", k.occurrence},
                                        {"start_us", k.start_us},
                                        {"end_us", k.end_us},
                                        {"charged_us", k.charged_us}});
    j["per_layer"] = per_layer;
    return j;
}

void print_ops(const StepProfile& prof, double copy_bandwidth, const char* what) {
    // A step has ~25-35 op rows (more with the indexer at long contexts); the JSON lists every one.
    std::fputs(format_op_table(prof, copy_bandwidth, what, 40).c_str(), stdout);
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, const ModelConfig& cfg, int n) {
    std::uniform_int_distribution<int32_t> tok(2, int32_t(std::min<int64_t>(cfg.vocab_size, 100000)) - 1);
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (auto& t : out) t = tok(rng);
    return out;
}

int run_bench(int argc, char** argv) {
    CLI::App app{"Offline decode/prefill benchmark of a device backend (dummy weights or a checkpoint)"};
    std::string model, concurrency_s = "1,16,64,128,256", context_s = "256", prefill_s = "4096", json_path,
        state_memory;
    cli::BackendFlags flags;
    flags.backend = "cuda";
    int output_len = 32, warmup = 3, prefill_runs = 3, timeline_steps = 0, top_k = 0;
    double temperature = 0.0, top_p = 1.0;
    bool no_graphs = false;
    uint64_t seed = 0;
    app.add_option("--model", model,
                   "checkpoint directory; with --dummy-weights a config.json path or a directory holding one")
        ->required();
    cli::add_backend_flags(app, flags, /*with_dummy=*/true);
    app.add_option("--concurrency", concurrency_s, "comma-separated decode batch sizes, or none (prefill runs only)");
    app.add_option("--context", context_s, "comma-separated context lengths of the decode runs (prompt tokens per sequence)");
    app.add_option("--prefill", prefill_s,
                   "comma-separated prompt lengths of the single-sequence prefill runs ('none' to skip them)");
    app.add_option("--prefill-runs", prefill_runs, "timed prefills per --prefill length (their median is reported)");
    app.add_option("--output-len", output_len, "decode steps timed per configuration");
    app.add_option("--warmup", warmup, "untimed decode steps before timing (graph capture happens here)");
    app.add_option("--json", json_path, "write the results as JSON to this file");
    app.add_flag("--no-graphs", no_graphs, "run decode steps without CUDA graphs");
    app.add_option("--timeline", timeline_steps,
                   "after each decode configuration, trace this many more steps with CUPTI (and one more prefill after "
                   "each --prefill length): every kernel's time on the device, the gaps with none running, per kernel "
                   "(0 = off)");
    app.add_option("--seed", seed, "seed of the random prompts (0 = from the clock)");
    app.add_option("--temperature", temperature,
                   "decode steps sample at this temperature, in [0, 2] (0 = the greedy argmax)");
    app.add_option("--top-p", top_p, "nucleus sampling of the sampled decode steps, in (0, 1] (1 = off)");
    app.add_option("--top-k", top_k, "top-k of the sampled decode steps, >= 0 (0 = off)");
    app.add_option("--state-memory", state_memory,
                   "state-memory pool size: bytes or with KiB/MiB/GiB (or KB/MB/GB: powers of 1000; default: the "
                   "backend's); a configuration the pool cannot hold is skipped with the reason");
    CLI11_PARSE(app, argc, argv);
    FS_CHECK(output_len >= 2, "--output-len must be >= 2, got {}", output_len);
    FS_CHECK(warmup >= 0, "--warmup must be >= 0, got {}", warmup);
    FS_CHECK(prefill_runs >= 1, "--prefill-runs must be >= 1, got {}", prefill_runs);
    FS_CHECK(timeline_steps >= 0 && timeline_steps <= 1000, "--timeline must be in [0, 1000], got {}", timeline_steps);
    FS_CHECK(temperature >= 0.0 && temperature <= 2.0, "--temperature must be in [0, 2], got {}", temperature);
    FS_CHECK(top_p > 0.0 && top_p <= 1.0, "--top-p must be in (0, 1], got {}", top_p);
    FS_CHECK(top_k >= 0, "--top-k must be >= 0, got {}", top_k);
    FS_CHECK(temperature > 0.0 || (top_p == 1.0 && top_k == 0),
             "--top-p and --top-k need --temperature > 0 (greedy decoding ignores them)");
    const bool sampled = temperature > 0.0;
    const std::vector<int> concs =
        concurrency_s == "none" ? std::vector<int>{} : parse_int_list(concurrency_s, "--concurrency");
    const std::vector<int> ctxs = parse_int_list(context_s, "--context");
    const std::vector<int> prefills = prefill_s == "none" ? std::vector<int>{} : parse_int_list(prefill_s, "--prefill");
    FS_CHECK(!concs.empty() || !prefills.empty(), "bench: nothing to run (--concurrency none and --prefill none)");
    if (seed == 0) seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());

    BackendOptions opt = cli::backend_options(flags);
    const bool dummy = opt.dummy_weights;
    const std::string numerics = opt.numerics == Numerics::Release ? "release" : "exact";
    opt.max_sequences = concs.empty() ? 1 : *std::max_element(concs.begin(), concs.end());
    opt.state_memory_bytes = state_memory.empty() ? 0 : cli::parse_byte_size("--state-memory", state_memory);
    // Tokens a decode configuration appends to each sequence beyond its prompt: the warm-up and timed steps, the
    // profiled step, the traced ones, and one to spare.
    const int decode_appends = warmup + output_len + timeline_steps + 2;
    int longest = *std::max_element(ctxs.begin(), ctxs.end()) + decode_appends;
    for (int n : prefills) longest = std::max(longest, n);
    opt.max_context = longest;
    const auto t_load = std::chrono::steady_clock::now();
    auto be = create_backend(model, opt);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    BackendDiagnostics* ext = be->diagnostics();
    FS_CHECK(ext != nullptr, "bench: backend '{}' has no device diagnostics (profiling, ceilings); use --backend cuda",
             flags.backend);
    std::printf("measuring device-to-device copy bandwidth ...\n");
    const double bw = ext->measure_copy_bandwidth();
    std::printf("copy bandwidth: %.1f GB/s (read + write)\n", bw / 1e9);
    std::printf("measuring the dense FP8 tensor-core rate ...\n");
    const double gemm_rate = ext->measure_gemm_rate();
    if (gemm_rate > 0) std::printf("FP8 GEMM rate: %.0f TFLOP/s (cuBLASLt, 8192^3)\n", gemm_rate / 1e12);
    else std::printf("FP8 GEMM rate: not measurable on this device (prefill rows carry no FLOP fraction)\n");
    ext->set_use_graphs(!no_graphs);
    if (timeline_steps > 0) {
        // Before any decode step, so before the graphs are captured (some CUDA versions report no kernels of graphs
        // captured before tracing began).
        const std::string why = ext->enable_kernel_trace();
        FS_CHECK(why.empty(), "--timeline: cannot trace kernels: {}", why);
        std::printf("timeline: CUPTI records every kernel from here on, so this run's timed figures (prefill, TPOT) "
                    "carry its per-kernel cost: take them from a run without --timeline\n");
    }
    const ModelConfig& cfg = be->config();
    std::printf("model: %s, %d layers, %s weights (%.2f GB on %s, loaded in %.1f s), numerics %s, graphs %s, "
                "layout tp %d x ep %d, seed %llu\n",
                model.c_str(), cfg.num_hidden_layers, dummy ? "dummy" : "checkpoint",
                ext->weight_bytes_on_device() / 1e9, ext->device_name().c_str(), load_s, numerics.c_str(),
                no_graphs ? "off" : "on", opt.tp, opt.ep, (unsigned long long)seed);

    const int layers = cfg.num_hidden_layers;
    // FLOPs per token of a prefill of n tokens and the fraction of the tensor-core rate tok_s reaches.
    auto flop_fields = [&](nlohmann::json& r, int n, double tok_s) {
        const ForwardFlops f = prefill_flops_per_token(cfg, layers, n);
        r["prefill_flops_per_token"] = f.total();
        r["prefill_flops_linear"] = f.linear;
        r["prefill_flops_attention"] = f.attention;
        r["prefill_tflop_s"] = f.total() * tok_s / 1e12;
        r["prefill_gemm_fraction"] = gemm_rate > 0 ? f.total() * tok_s / gemm_rate : 0.0;
        return gemm_rate > 0 ? 100.0 * f.total() * tok_s / gemm_rate : 0.0;
    };

    // Why `seqs` sequences of `tokens` tokens each do not fit the state pool ("" when they do). A configuration that
    // does not fit is skipped with the reason, and the rest of the sweep still runs and is saved.
    auto does_not_fit = [&](int seqs, int64_t tokens) -> std::string {
        const StateMemoryStats m = be->memory();
        const int64_t need = int64_t(seqs) * be->blocks_for(tokens), free_blocks = m.total_blocks - m.used_blocks;
        if (need <= free_blocks) return "";
        return fmt::format("{} x {} tokens need {} state blocks of {} tokens, the pool has {} free "
                           "(--state-memory sets its size)",
                           seqs, tokens, need, m.block_tokens, free_blocks);
    };

    std::mt19937_64 rng(seed);
    nlohmann::json prefill_results = nlohmann::json::array();
    for (int n : prefills) {
        const std::vector<int32_t> prompt = random_tokens(rng, cfg, n);
        if (const std::string why = does_not_fit(1, n); !why.empty()) {
            std::printf("\n== prefill of one sequence, %d tokens ==\nskipped: %s\n", n, why.c_str());
            prefill_results.push_back({{"tokens", n}, {"skipped", why}});
            continue;
        }
        auto timed_prefill = [&] {
            const int id = be->create_sequence();
            std::vector<SequenceStep> steps{{id, prompt.data(), n, false}};
            std::vector<int32_t> next;
            const auto t0 = std::chrono::steady_clock::now();
            ext->decode_greedy(steps, next);
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            be->free_sequence(id);
            return s;
        };
        const double untimed = warmup > 0 ? timed_prefill() : 0.0;
        std::vector<double> runs, enqueue;
        for (int i = 0; i < prefill_runs; ++i) {
            runs.push_back(timed_prefill());
            enqueue.push_back(ext->last_host_enqueue_seconds());
        }
        const double secs = percentile(runs, 0.5), enqueue_s = percentile(enqueue, 0.5);
        const int id2 = be->create_sequence();
        std::vector<SequenceStep> steps{{id2, prompt.data(), n, false}};
        const StepProfile prof = ext->profile_step(steps);
        be->free_sequence(id2);
        // One more prefill traced on the device: the eager pass as it runs (the per-op events above serialize what
        // PDL and the side branches overlap), its gaps and every kernel's time.
        TimelineSummary timeline;
        PeriodSummary timeline_layers;  // the median traced pass per layer
        if (timeline_steps > 0) {
            ext->mark_kernel_trace();
            timed_prefill();
            ext->mark_kernel_trace();
            timeline = summarize_timeline(ext->take_kernel_trace());
            timeline_layers = layer_periods(timeline);
        }
        nlohmann::json r;
        r["tokens"] = n;
        r["prefill_s"] = secs;
        r["prefill_runs_s"] = runs;
        r["prefill_host_enqueue_s"] = enqueue_s;
        if (warmup > 0) r["prefill_first_s"] = untimed;
        r["prefill_tok_s"] = n / secs;
        const double pct = flop_fields(r, n, n / secs);
        r["profiled_gpu_us"] = prof.gpu_us;
        r["ops"] = ops_json(prof, bw);
        if (timeline_steps > 0) r["timeline"] = timeline_json(timeline, timeline_layers);
        prefill_results.push_back(r);
        std::printf("\n== prefill of one sequence, %d tokens ==\n", n);
        std::printf("prefill: %.3f s = %.0f tok/s; %.2f GFLOP/token (linears %.2f, attention %.2f) -> %.1f TFLOP/s "
                    "= %.1f%% of the FP8 rate\n",
                    secs, n / secs, double(r["prefill_flops_per_token"]) / 1e9,
                    double(r["prefill_flops_linear"]) / 1e9, double(r["prefill_flops_attention"]) / 1e9,
                    double(r["prefill_tflop_s"]), pct);
        std::printf("  median of %d timed runs (", prefill_runs);
        for (size_t i = 0; i < runs.size(); ++i) std::printf("%s%.4f", i ? " / " : "", runs[i]);
        std::printf(" s)");
        if (warmup > 0) std::printf("; the untimed first run %.4f s", untimed);
        std::printf("\n  host enqueue (median of the timed runs): %.4f s = %.0f%% of the prefill\n", enqueue_s,
                    100.0 * enqueue_s / secs);
        print_ops(prof, bw, "the profiled prefill");
        if (timeline_steps > 0)
            std::printf("%s%s", format_timeline(timeline, 30, "pass").c_str(), format_periods(timeline_layers).c_str());
    }

    nlohmann::json results = nlohmann::json::array();
    for (int ctx : ctxs) {
        for (int B : concs) {
            if (const std::string why = does_not_fit(B, int64_t(ctx) + decode_appends); !why.empty()) {
                std::printf("\n== context %d, concurrency %d ==\nskipped: %s\n", ctx, B, why.c_str());
                results.push_back({{"context", ctx}, {"concurrency", B}, {"skipped", why}});
                continue;
            }
            std::vector<int> ids;
            for (int i = 0; i < B; ++i) ids.push_back(be->create_sequence());
            std::vector<std::vector<int32_t>> prompts;
            for (int i = 0; i < B; ++i) prompts.push_back(random_tokens(rng, cfg, ctx));
            std::vector<SequenceStep> steps(static_cast<size_t>(B));
            for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], prompts[size_t(i)].data(), ctx, false};
            std::vector<int32_t> next;
            auto t0 = std::chrono::steady_clock::now();
            ext->decode_greedy(steps, next);
            const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::vector<double> step_ms;
            GraphCounts before;
            std::vector<SampleParams> sample_params(static_cast<size_t>(B));
            for (int i = 0; i < B; ++i) {
                SampleParams& sp = sample_params[size_t(i)];
                sp.temperature = float(temperature);
                sp.top_p = float(top_p);
                sp.top_k = top_k;
                sp.seed = seed + uint64_t(i);
            }
            std::vector<SampleResult> sampled_out;
            for (int s = 0; s < warmup + output_len; ++s) {
                if (s == warmup) before = ext->graph_counts();
                for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], &next[size_t(i)], 1, false};
                std::vector<int32_t> out;
                t0 = std::chrono::steady_clock::now();
                if (sampled) {
                    for (SampleParams& sp : sample_params) sp.draw_index = uint64_t(s);
                    be->forward_sample(steps, sample_params, sampled_out);
                    out.resize(size_t(B));
                    for (int i = 0; i < B; ++i) out[size_t(i)] = sampled_out[size_t(i)].token;
                } else {
                    ext->decode_greedy(steps, out);
                }
                const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                if (s >= warmup) step_ms.push_back(ms);
                next = out;
            }
            // The timed steps' passes by how they ran: a capture or a new shape's first pass is a slow step that the
            // median hides and the p99 shows.
            const GraphCounts timed = ext->graph_counts() - before;
            for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], &next[size_t(i)], 1, false};
            const StepProfile prof = ext->profile_step(steps);
            // The timeline: more graph steps with each kernel's start and end recorded on the device (the token
            // values repeat the profiled step's; the sequences grow by one position per step as in the timed ones).
            TimelineSummary timeline;
            PeriodSummary timeline_layers;  // the median traced step per layer
            if (timeline_steps > 0) {
                for (int s = 0; s < timeline_steps; ++s) {
                    for (int i = 0; i < B; ++i) steps[size_t(i)] = {ids[size_t(i)], &next[size_t(i)], 1, false};
                    std::vector<int32_t> out;
                    ext->mark_kernel_trace();
                    ext->decode_greedy(steps, out);
                    next = out;
                }
                ext->mark_kernel_trace();
                timeline = summarize_timeline(ext->take_kernel_trace());
                timeline_layers = layer_periods(timeline);
            }
            for (int id : ids) be->free_sequence(id);

            const double tpot = percentile(step_ms, 0.5), p99 = percentile(step_ms, 0.99);
            const double bytes = prof.bytes_weights + prof.bytes_state;
            const std::string step_kind = no_graphs ? "eager" : "graph";
            const StepBubble bubble = step_bubble(tpot, bytes, bw, layers);
            const double roofline_ms = bubble.transfer_ms;  // the step's bytes at the copy bandwidth
            nlohmann::json r;
            r["context"] = ctx;
            r["concurrency"] = B;
            r["prefill_tokens"] = int64_t(B) * ctx;
            r["prefill_s"] = prefill_s;
            r["prefill_tok_s"] = double(B) * ctx / prefill_s;
            const double prefill_pct = flop_fields(r, ctx, double(B) * ctx / prefill_s);
            r["decode_steps"] = output_len;
            r["decode_sampling"] = {{"temperature", temperature}, {"top_p", top_p}, {"top_k", top_k}};
            r["tpot_median_ms"] = tpot;
            r["tpot_p99_ms"] = p99;
            r["decode_tok_s"] = double(B) * 1e3 / tpot;
            r["step_ms"] = step_ms;
            r["timed_passes"] = {{"replayed", timed.replayed},
                                 {"captured", timed.captured},
                                 {"first_eager", timed.first_eager},
                                 {"eager", timed.eager}};
            r["bytes_per_step"] = bytes;
            r["bytes_weights"] = prof.bytes_weights;
            r["bytes_state"] = prof.bytes_state;
            r["bytes_per_rank"] = prof.bytes_per_rank;
            r["distinct_experts"] = prof.distinct_experts;
            r["roofline_ms"] = roofline_ms;
            r["roofline_fraction"] = roofline_ms / tpot;
            r["bubble_ms"] = bubble.bubble_ms;
            r["bubble_per_layer_us"] = bubble.per_layer_us;
            r["bubble_step_fraction"] = bubble.step_fraction;
            r["profiled_gpu_us"] = prof.gpu_us;
            r["ops"] = ops_json(prof, bw);
            if (timeline_steps > 0) r["timeline"] = timeline_json(timeline, timeline_layers);
            results.push_back(r);

            std::printf("\n== context %d, concurrency %d ==\n", ctx, B);
            std::printf("prefill: %lld tokens in %.3f s = %.0f tok/s (%.1f%% of the FP8 rate)\n", (long long)B * ctx,
                        prefill_s, double(B) * ctx / prefill_s, prefill_pct);
            std::printf("decode%s: TPOT median %.3f ms, p99 %.3f ms, %.1f tok/s\n",
                        sampled ? fmt::format(" (sampled: temperature {}, top_p {}, top_k {})", temperature, top_p,
                                              top_k)
                                      .c_str()
                                : "",
                        tpot, p99, double(B) * 1e3 / tpot);
            std::printf("timed passes: %lld graph replays, %lld captured, %lld first of a shape, %lld eager\n",
                        (long long)timed.replayed, (long long)timed.captured, (long long)timed.first_eager,
                        (long long)timed.eager);
            std::printf("bytes/step %.3f GB (weights %.3f, state %.3f; %d distinct experts) -> roofline %.3f ms = "
                        "%.1f%% achieved\n",
                        bytes / 1e9, prof.bytes_weights / 1e9, prof.bytes_state / 1e9, prof.distinct_experts,
                        roofline_ms, 100.0 * roofline_ms / tpot);
            if (prof.bytes_per_rank.size() > 1) {
                std::printf("bytes/step per rank:");
                for (size_t k = 0; k < prof.bytes_per_rank.size(); ++k)
                    std::printf(" %zu: %.3f GB", k, prof.bytes_per_rank[k] / 1e9);
                std::printf(" (ranks share one device here: the step moves their sum)\n");
            }
            std::printf("%s\n%s\n", format_bubble(bubble, step_kind).c_str(),
                        format_per_op_sum_vs_step(prof.gpu_us, tpot, step_kind).c_str());
            print_ops(prof, bw, "one profiled decode step");
            if (timeline_steps > 0)
                std::printf("%s%s", format_timeline(timeline).c_str(), format_periods(timeline_layers).c_str());
        }
    }
    if (!json_path.empty()) {
        nlohmann::json doc;
        doc["device"] = ext->device_name();
        doc["copy_bandwidth_bytes_s"] = bw;
        doc["fp8_gemm_flop_s"] = gemm_rate;
        doc["model"] = model;
        doc["dummy_weights"] = dummy;
        doc["layers"] = cfg.num_hidden_layers;
        doc["numerics"] = numerics;
        doc["graphs"] = !no_graphs;
        doc["tp"] = opt.tp;
        doc["ep"] = opt.ep;
        doc["prefill_chunk"] = opt.prefill_chunk;
        doc["seed"] = seed;
        doc["kernel_trace"] = timeline_steps > 0;  // the timed figures ran with CUPTI's kernel tracing on
        doc["weight_bytes_on_device"] = ext->weight_bytes_on_device();
        doc["prefill"] = prefill_results;
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
