// Prometheus metrics, hand-written text exposition (format 0.0.4). Names follow vLLM v1 under the "flashseek:"
// prefix so dashboards port with a sed. Updated by the step-loop thread, read by /metrics handlers: one mutex.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/diagnostics.h"

namespace flashseek::runtime {

class Histogram {
public:
    explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
    void observe(double v);
    void render(std::string& out, const std::string& name, const std::string& labels) const;
    uint64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket (non-cumulative); last = above every bound
    double sum_ = 0;
    uint64_t count_ = 0;
};

struct MetricsSnapshotInput {  // gauges read from the step loop when rendering
    int running = 0;
    int waiting = 0;
    int64_t state_used_blocks = 0;
    int64_t state_total_blocks = 0;
    int64_t state_bytes_per_block = 0;
    uint64_t preemptions = 0;
    uint64_t engine_steps = 0;
    double seconds_since_heartbeat = 0;
    bool healthy = true;
    // Decode passes by how they ran as CUDA graphs (BackendDiagnostics::graph_counts): a new pass shape's first
    // pass and its capture are the slow steps behind an inter-token latency spike. None for backends without
    // graphs.
    std::optional<GraphCounts> graph_passes;
};

class Metrics {
public:
    explicit Metrics(std::string model_name);

    void on_request_finished(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                             double e2e_s, double queue_s, double ttft_s, double tpot_s);
    void on_first_token(double ttft_s);
    void on_inter_token(double itl_s);
    void on_tokens(int64_t prompt_tokens, int64_t generation_tokens);
    void on_aborted(const std::string& reason);  // client disconnect, deadline, shutdown, error
    void on_rejected(int status);                // requests refused before reaching the step loop
    void on_iteration(int tokens);

    std::string render(const MetricsSnapshotInput& in) const;

private:
    std::string model_;
    std::string labels_;
    mutable std::mutex mu_;
    uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
    std::map<std::string, uint64_t> success_;  // by finished_reason
    std::map<std::string, uint64_t> aborted_;  // by reason
    std::map<int, uint64_t> rejected_;         // by HTTP status
    Histogram ttft_, itl_, tpot_, e2e_, queue_, prompt_len_, gen_len_, iteration_tokens_;
};

}  // namespace flashseek::runtime
