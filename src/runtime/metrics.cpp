// Prometheus text rendering for flashseek:* metrics (see metrics.h). Histogram buckets copy vLLM's so that the
// same dashboard queries and SLO thresholds apply.
#include "runtime/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace flashseek::runtime {

namespace {
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                          2.5,   5.0,   7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                         1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,    10.0,  15.0,
                                         20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
std::vector<double> token_buckets() {
    std::vector<double> b;
    for (double v = 1; v <= 1 << 20; v *= 2) b.push_back(v);
    return b;
}

std::string fmt_double(double v) { return fmt::format("{}", v); }

void header(std::string& out, const std::string& name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}
}  // namespace

void Histogram::observe(double v) {
    const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    ++counts_[i];
    sum_ += v;
    ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cum += counts_[i];
        out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, fmt_double(bounds_[i]), cum);
    }
    cum += counts_.back();
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cum);
    out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, fmt_double(sum_), name, labels, count_);
}

Metrics::Metrics(std::string model_name)
    : model_(std::move(model_name)),
      ttft_(kTtftBuckets), itl_(kItlBuckets), tpot_(kItlBuckets), e2e_(kE2eBuckets), queue_(kE2eBuckets),
      prompt_len_(token_buckets()), gen_len_(token_buckets()), iteration_tokens_(token_buckets()) {
    std::string escaped;
    for (char c : model_) {
        if (c == '\\' || c == '"') escaped += '\\';
        if (c == '\n') { escaped += "\\n"; continue; }
        escaped += c;
    }
    labels_ = fmt::format("model_name=\"{}\"", escaped);
}

void Metrics::on_request_finished(const std::string& reason, int64_t prompt_tokens, int64_t generation_tokens,
                                  double e2e_s, double queue_s, double ttft_s, double tpot_s) {
    std::lock_guard lock(mu_);
    ++success_[reason];
    prompt_len_.observe(double(prompt_tokens));
    gen_len_.observe(double(generation_tokens));
    e2e_.observe(e2e_s);
    queue_.observe(queue_s);
    (void)ttft_s;
    if (generation_tokens > 1) tpot_.observe(tpot_s);
}
void Metrics::on_first_token(double ttft_s) {
    std::lock_guard lock(mu_);
    ttft_.observe(ttft_s);
}
void Metrics::on_inter_token(double itl_s) {
    std::lock_guard lock(mu_);
    itl_.observe(itl_s);
}
void Metrics::on_tokens(int64_t prompt_tokens, int64_t generation_tokens) {
    std::lock_guard lock(mu_);
    prompt_tokens_ += uint64_t(prompt_tokens);
    generation_tokens_ += uint64_t(generation_tokens);
}
void Metrics::on_aborted(const std::string& reason) {
    std::lock_guard lock(mu_);
    ++aborted_[reason];
}
void Metrics::on_rejected(int status) {
    std::lock_guard lock(mu_);
    ++rejected_[status];
}
void Metrics::on_iteration(int tokens) {
    std::lock_guard lock(mu_);
    iteration_tokens_.observe(double(tokens));
}

std::string Metrics::render(const MetricsSnapshotInput& in) const {
    std::lock_guard lock(mu_);
    std::string o;
    o.reserve(16384);
    const std::string& L = labels_;
    auto gauge = [&](const char* name, const char* help, auto value) {
        header(o, fmt::format("flashseek:{}", name), "gauge", help);
        o += fmt::format("flashseek:{}{{{}}} {}\n", name, L, value);
    };
    auto counter = [&](const char* name, const char* help, uint64_t value) {
        header(o, fmt::format("flashseek:{}", name), "counter", help);
        o += fmt::format("flashseek:{}{{{}}} {}\n", name, L, value);
    };
    gauge("num_requests_running", "Requests in the running batch.", in.running);
    gauge("num_requests_waiting", "Requests waiting to be admitted.", in.waiting);
    const double usage = in.state_total_blocks > 0 ? double(in.state_used_blocks) / double(in.state_total_blocks) : 0;
    gauge("kv_cache_usage_perc", "Fraction of the state-memory block pool in use (0-1).", fmt_double(usage));
    gauge("state_memory_used_blocks", "State-memory blocks in use.", in.state_used_blocks);
    gauge("state_memory_total_blocks", "State-memory blocks in the pool.", in.state_total_blocks);
    gauge("state_memory_used_bytes", "State-memory bytes in use.", in.state_used_blocks * in.state_bytes_per_block);
    gauge("engine_healthy", "1 when the engine loop is alive and accepting work.", in.healthy ? 1 : 0);
    gauge("engine_seconds_since_heartbeat", "Seconds since the engine loop last went round.",
          fmt_double(in.seconds_since_heartbeat));
    counter("num_preemptions_total", "Requests preempted (state dropped, recomputed later).", in.preemptions);
    counter("engine_steps_total", "Engine steps run.", in.engine_steps);
    if (const std::optional<GraphCounts>& g = in.graph_passes) {
        header(o, "flashseek:cuda_graph_passes_total", "counter",
               "Decode passes by how they ran: first of a new pass shape (eager), captured, replayed, eager.");
        const std::pair<const char*, int64_t> how[] = {
            {"first", g->first_eager}, {"captured", g->captured}, {"replayed", g->replayed}, {"eager", g->eager}};
        for (const auto& [name, n] : how)
            o += fmt::format("flashseek:cuda_graph_passes_total{{{},how=\"{}\"}} {}\n", L, name, n);
    }
    counter("prompt_tokens_total", "Prompt tokens processed (first computation).", prompt_tokens_);
    counter("generation_tokens_total", "Tokens generated.", generation_tokens_);

    header(o, "flashseek:request_success_total", "counter", "Requests finished, by finish reason.");
    for (const char* r : {"stop", "length", "tool_calls"})
        o += fmt::format("flashseek:request_success_total{{{},finished_reason=\"{}\"}} {}\n", L, r,
                         success_.count(r) ? success_.at(r) : 0);
    header(o, "flashseek:num_aborted_requests_total", "counter", "Requests aborted, by reason.");
    for (const char* r : {"client_disconnect", "deadline", "error", "shutdown"})
        o += fmt::format("flashseek:num_aborted_requests_total{{{},reason=\"{}\"}} {}\n", L, r,
                         aborted_.count(r) ? aborted_.at(r) : 0);
    header(o, "flashseek:num_rejected_requests_total", "counter", "Requests refused before generation, by HTTP status.");
    for (const auto& [status, n] : rejected_)
        o += fmt::format("flashseek:num_rejected_requests_total{{{},status=\"{}\"}} {}\n", L, status, n);

    auto hist = [&](const Histogram& h, const char* name, const char* help) {
        const std::string full = fmt::format("flashseek:{}", name);
        header(o, full, "histogram", help);
        h.render(o, full, L);
    };
    hist(ttft_, "time_to_first_token_seconds", "Time from arrival to the first generated token.");
    hist(itl_, "inter_token_latency_seconds", "Time between successive generated tokens of one request.");
    hist(tpot_, "request_time_per_output_token_seconds", "Per request: (E2E - TTFT) / (output tokens - 1).");
    hist(e2e_, "e2e_request_latency_seconds", "Time from arrival to the last token.");
    hist(queue_, "request_queue_time_seconds", "Time from arrival to the first scheduled step.");
    hist(prompt_len_, "request_prompt_tokens", "Prompt tokens per finished request.");
    hist(gen_len_, "request_generation_tokens", "Generated tokens per finished request.");
    hist(iteration_tokens_, "iteration_tokens_total", "Tokens per engine step.");
    return o;
}

}  // namespace flashseek::runtime
