// `flashseek bench-serve`: a serving benchmark client modelled on `vllm bench serve`. Sends streaming requests
// (closed loop with --max-concurrency, open loop with Poisson/gamma arrivals at --request-rate, or both), random
// token-id prompts of exact lengths or prompts from a file, and reports TTFT, TPOT, ITL and E2E latency (mean,
// median, std, p90, p99), request and token throughput and failures; --save-result writes JSON with vLLM's keys.
// Definitions follow vLLM's calculate_metrics: TTFT = send to first non-empty delta; TPOT = (E2E - TTFT) /
// (output tokens - 1); ITL = gaps between successive content chunks; output tokens come from the usage chunk.
// Where the server publishes a TTFT histogram (/metrics), its own mean over the run is shown beside the client's,
// and a CUDA flashseek server's decode passes by how they ran as graphs (first of a shape, captured, replayed).
// Requests are greedy by default (temperature 0); --temperature, --top-p and --top-k send sampled requests instead,
// each with its own seed (the bench seed + the request's index) so that a run repeats its tokens, and measure what
// sampling costs the server per step; --frequency-penalty, --presence-penalty and --repetition-penalty add the logit
// adjustments (greedy or sampled), which cost the server an adjusted copy of each row and the raw row's logprob.
#include <CLI/CLI.hpp>
#include <fmt/chrono.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "command.h"
#include "runtime/prometheus_read.h"
#include "server/http_client.h"
#include "util/error.h"

namespace {

using namespace flashseek;
using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

struct Prompt {
    json prompt;  // text or token ids
    int64_t input_len = 0;
    int64_t output_len = 0;
};

struct Outcome {
    bool success = false;
    std::string error;
    double ttft = 0, e2el = 0;
    std::vector<double> itl;
    int64_t prompt_tokens = 0, output_tokens = 0;
};

struct Stats {
    double mean = 0, median = 0, stdev = 0, p90 = 0, p99 = 0;
};

Stats stats_ms(std::vector<double> v) {
    Stats s;
    if (v.empty()) return s;
    for (double& x : v) x *= 1000.0;
    std::sort(v.begin(), v.end());
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double var = 0;
    for (double x : v) var += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(var / double(v.size()));
    auto pct = [&](double p) {  // linear interpolation, as numpy.percentile
        const double pos = p / 100.0 * double(v.size() - 1);
        const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
        return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
    };
    s.median = pct(50);
    s.p90 = pct(90);
    s.p99 = pct(99);
    return s;
}

// Parses SSE lines of one streamed completion and records timings.
class StreamParser {
public:
    explicit StreamParser(SteadyClock::time_point start) : start_(start), last_(start) {}
    bool feed(std::string_view data, Outcome& out) {
        buf_.append(data);
        size_t pos;
        while ((pos = buf_.find("\n\n")) != std::string::npos) {
            const std::string event = buf_.substr(0, pos);
            buf_.erase(0, pos + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string payload = event.substr(6);
            if (payload == "[DONE]") {
                done = true;
                continue;
            }
            json j = json::parse(payload, nullptr, false);
            if (j.is_discarded()) {
                out.error = "unparsable SSE event: " + payload.substr(0, 200);
                return false;
            }
            if (j.contains("error")) {
                out.error = j["error"].value("message", "error event");
                continue;
            }
            if (j.contains("usage") && j["usage"].is_object()) {
                out.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
                out.output_tokens = j["usage"].value("completion_tokens", int64_t(0));
            }
            if (!j.contains("choices") || !j["choices"].is_array()) continue;
            bool has_text = false;
            for (const auto& c : j["choices"]) {
                if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) has_text = true;
                if (c.contains("delta") && c["delta"].is_object())
                    for (const char* k : {"content", "reasoning_content"})
                        if (c["delta"].contains(k) && c["delta"][k].is_string() && !c["delta"][k].get<std::string>().empty())
                            has_text = true;
            }
            if (!has_text) continue;
            const auto now = SteadyClock::now();
            if (!got_first_) {
                got_first_ = true;
                out.ttft = std::chrono::duration<double>(now - start_).count();
            } else {
                out.itl.push_back(std::chrono::duration<double>(now - last_).count());
            }
            last_ = now;
        }
        return true;
    }
    bool done = false;

private:
    SteadyClock::time_point start_, last_;
    bool got_first_ = false;
    std::string buf_;
};

// Random chat text: `words` words of three random letters.
std::string random_words(std::mt19937_64& rng, int64_t words) {
    std::string text;
    for (int64_t k = 0; k < words; ++k) {
        if (k) text += ' ';
        for (int c = 0; c < 3; ++c) text += char('a' + rng() % 26);
    }
    return text;
}

// Tokens per random word as the server's /tokenize counts them (random letter triples take about two tokens each
// with DeepSeek's tokenizer), so that chat prompts have --random-input-len tokens of content like completions
// prompts; 0 when the server has no /tokenize (then one word per token, with a warning).
double tokens_per_random_word(server::HttpClient& cli, const server::HttpClient::Headers& headers,
                              const std::string& model, uint64_t seed) {
    constexpr int64_t kSampleWords = 2000;
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    const json body = {{"model", model}, {"prompt", random_words(rng, kSampleWords)}};
    const auto r = cli.post("/tokenize", body.dump(), headers);
    const json j = r.status == 200 ? json::parse(r.body, nullptr, false) : json();
    if (!j.is_object() || !j.contains("count") || !j["count"].is_number() || j["count"].get<double>() <= 0) {
        std::fprintf(stderr, "bench-serve: /tokenize unavailable (%s); chat prompts get one random word per requested "
                             "token, so they are longer than --random-input-len tokens\n",
                     r.status ? std::to_string(r.status).c_str() : r.error.c_str());
        return 0;
    }
    return j["count"].get<double>() / double(kSampleWords);
}

// What the server publishes at /metrics, read before and after the run (any prefix: `flashseek:`, vLLM's `vllm:`):
// its own time to first token (the totals of `time_to_first_token_seconds`; its mean beside the client's says what
// the transport and the client add) and, from a CUDA flashseek server, its decode passes by how they ran as graphs
// (`cuda_graph_passes_total` by `how`: first passes of new shapes and captures are the slow steps behind ITL
// spikes). Each part is empty where the server publishes none.
struct ServerMetrics {
    std::optional<runtime::HistogramTotals> ttft;
    std::map<std::string, double> graph_passes;
};
ServerMetrics read_server_metrics(server::HttpClient& cli, const server::HttpClient::Headers& headers) {
    const auto r = cli.get("/metrics", headers);
    if (r.status != 200) return {};
    return {runtime::histogram_totals(r.body, "time_to_first_token_seconds"),
            runtime::totals_by_label(r.body, "cuda_graph_passes_total", "how")};
}

std::vector<Prompt> make_prompts(const std::string& dataset, const std::string& path, int n, int64_t in_len,
                                 int64_t out_len, double range_ratio, int64_t vocab, uint64_t seed, bool chat,
                                 double tokens_per_word) {
    std::mt19937_64 rng(seed);
    std::vector<Prompt> out;
    auto vary = [&](int64_t len) {
        if (range_ratio <= 0) return len;
        const int64_t lo = std::max<int64_t>(1, int64_t(double(len) * (1 - range_ratio)));
        const int64_t hi = std::max<int64_t>(lo, int64_t(double(len) * (1 + range_ratio)));
        return lo + int64_t(rng() % uint64_t(hi - lo + 1));
    };
    if (dataset == "random") {
        for (int i = 0; i < n; ++i) {
            Prompt p;
            p.input_len = vary(in_len);
            p.output_len = vary(out_len);
            if (chat) {
                // Chat prompts are text: random short words, as many as make input_len tokens (the chat template
                // adds its own; the server's usage reports the total).
                const int64_t words =
                    tokens_per_word > 0 ? std::max<int64_t>(1, std::llround(double(p.input_len) / tokens_per_word))
                                        : p.input_len;
                p.prompt = random_words(rng, words);
            } else {
                json ids = json::array();
                // Ids from the plain BPE range (avoid the control tokens at the top of the vocabulary).
                const int64_t hi = std::max<int64_t>(1000, std::min<int64_t>(vocab, 100000) - 1);
                for (int64_t k = 0; k < p.input_len; ++k) ids.push_back(int64_t(100 + rng() % uint64_t(hi - 100)));
                p.prompt = ids;
            }
            out.push_back(std::move(p));
        }
        return out;
    }
    std::ifstream f(path);
    FS_CHECK(f.good(), "--dataset-path: cannot open '{}'", path);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(f, line))
        if (!line.empty()) lines.push_back(line);
    FS_CHECK(!lines.empty(), "--dataset-path: '{}' has no prompts", path);
    for (int i = 0; i < n; ++i) {
        const std::string& l = lines[size_t(i) % lines.size()];
        Prompt p;
        json j = json::parse(l, nullptr, false);
        if (!j.is_discarded() && j.is_object() && j.contains("prompt")) {
            p.prompt = j["prompt"];
            p.output_len = j.value("output_len", out_len);
        } else {
            p.prompt = l;
            p.output_len = out_len;
        }
        out.push_back(std::move(p));
    }
    return out;
}

void progress_bar(int done, int total, bool tty) {
    if (!tty) return;
    const int width = 30, filled = total ? done * width / total : width;
    std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), ' ').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
}

int run_bench_serve(int argc, char** argv) {
    CLI::App app{"Serving benchmark client (like vllm bench serve) against a flashseek or other OpenAI server"};
    std::string host = "127.0.0.1", endpoint = "/v1/completions", model, api_key, dataset = "random", dataset_path,
                save_result, schema_path;
    int port = 8000, num_prompts = 100, max_concurrency = 0;
    double request_rate = INFINITY, burstiness = 1.0, range_ratio = 0.0, temperature = 0.0, top_p = 1.0,
           frequency_penalty = 0.0, presence_penalty = 0.0, repetition_penalty = 1.0;
    int top_k = 0;
    int64_t input_len = 128, output_len = 128;
    uint64_t seed = 0;
    bool ignore_eos = true, no_progress = false;
    app.add_option("--host", host, "server address");
    app.add_option("--port", port, "server port");
    app.add_option("--endpoint", endpoint, "/v1/completions or /v1/chat/completions")
        ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}));
    app.add_option("--model", model, "model id (default: the first of /v1/models)");
    app.add_option("--api-key", api_key, "sent as Authorization: Bearer");
    app.add_option("--dataset-name", dataset, "random or file")->check(CLI::IsMember({"random", "file"}));
    app.add_option("--dataset-path", dataset_path, "file: one prompt per line, or JSON lines {\"prompt\", \"output_len\"}");
    app.add_option("--num-prompts", num_prompts, "requests to send");
    app.add_option("--random-input-len", input_len, "random dataset: prompt tokens");
    app.add_option("--random-output-len", output_len, "output tokens (max_tokens)");
    app.add_option("--random-range-ratio", range_ratio, "lengths vary uniformly by +- this fraction")
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--request-rate", request_rate, "requests per second (inf = all at once)");
    app.add_option("--burstiness", burstiness, "gamma shape of inter-arrival times (1 = Poisson)");
    app.add_option("--max-concurrency", max_concurrency, "most requests in flight (0 = unlimited)");
    app.add_option("--seed", seed, "prompt and arrival seed (default: random)");
    app.add_flag("!--no-ignore-eos", ignore_eos, "let requests stop at EOS (default: ignore_eos)");
    app.add_option("--save-result", save_result, "write the results JSON here");
    app.add_flag("--disable-tqdm,--no-progress", no_progress, "no progress bar");
    app.add_option("--temperature", temperature, "sampling temperature of every request, in [0, 2] (0 = greedy)");
    app.add_option("--top-p", top_p, "nucleus sampling of every request, in (0, 1] (1 = off)");
    app.add_option("--top-k", top_k, "top-k sampling of every request (0 = off)");
    app.add_option("--frequency-penalty", frequency_penalty, "frequency_penalty of every request, in [-2, 2] (0 = off)");
    app.add_option("--presence-penalty", presence_penalty, "presence_penalty of every request, in [-2, 2] (0 = off)");
    app.add_option("--repetition-penalty", repetition_penalty, "repetition_penalty of every request, > 0 (1 = off)");
    app.add_option("--response-format-json-schema", schema_path,
                   "constrained decoding: send every request with response_format json_schema from this file "
                   "(measures the cost of grammar masks)");
    CLI11_PARSE(app, argc, argv);
    if (seed == 0) seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    json response_format;
    if (!schema_path.empty()) {
        std::ifstream f(schema_path);
        FS_CHECK(f.good(), "--response-format-json-schema: cannot open '{}'", schema_path);
        const json schema = json::parse(f, nullptr, false);
        FS_CHECK(!schema.is_discarded() && schema.is_object(),
                 "--response-format-json-schema: '{}' is not a JSON object (a JSON schema)", schema_path);
        response_format = {{"type", "json_schema"}, {"json_schema", {{"name", "bench"}, {"schema", schema}}}};
    }
    FS_CHECK(request_rate > 0, "--request-rate must be > 0 (got {})", request_rate);
    // Checked here rather than by CLI11's PositiveNumber, whose message reads "Value 0 not in range 0 to 1.8e308".
    FS_CHECK(num_prompts >= 1, "--num-prompts must be >= 1 (got {})", num_prompts);
    FS_CHECK(input_len >= 1, "--random-input-len must be >= 1 (got {})", input_len);
    FS_CHECK(output_len >= 1, "--random-output-len must be >= 1 (got {})", output_len);
    FS_CHECK(std::isfinite(burstiness) && burstiness > 0, "--burstiness must be a number > 0 (got {})", burstiness);
    FS_CHECK(max_concurrency >= 0, "--max-concurrency must be >= 0 (0 = unlimited; got {})", max_concurrency);
    FS_CHECK(port >= 1 && port <= 65535, "--port must be in [1, 65535] (got {})", port);
    FS_CHECK(temperature >= 0.0 && temperature <= 2.0, "--temperature must be in [0, 2] (got {})", temperature);
    FS_CHECK(top_p > 0.0 && top_p <= 1.0, "--top-p must be in (0, 1] (got {})", top_p);
    FS_CHECK(top_k >= 0, "--top-k must be >= 0 (0 = off; got {})", top_k);
    FS_CHECK(frequency_penalty >= -2.0 && frequency_penalty <= 2.0, "--frequency-penalty must be in [-2, 2] (got {})",
             frequency_penalty);
    FS_CHECK(presence_penalty >= -2.0 && presence_penalty <= 2.0, "--presence-penalty must be in [-2, 2] (got {})",
             presence_penalty);
    FS_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0,
             "--repetition-penalty must be a number > 0 (got {})", repetition_penalty);
    const bool sampled = temperature > 0.0;
    FS_CHECK(dataset != "file" || !dataset_path.empty(), "--dataset-path is required with --dataset-name file");
    server::HttpClient::Headers headers;
    if (!api_key.empty()) headers.emplace_back("Authorization", "Bearer " + api_key);

    server::HttpClient probe(host, port, 30);
    const auto models = probe.get("/v1/models", headers);
    FS_CHECK(models.status == 200, "GET http://{}:{}/v1/models failed: {} {}", host, port,
             models.status ? std::to_string(models.status) : models.error, models.body.substr(0, 300));
    const json mj = json::parse(models.body, nullptr, false);
    FS_CHECK(!mj.is_discarded() && mj.contains("data") && !mj["data"].empty(), "/v1/models: unexpected reply");
    if (model.empty()) model = mj["data"][0].value("id", "");
    const bool chat = endpoint == "/v1/chat/completions";
    const double tokens_per_word = chat && dataset == "random" ? tokens_per_random_word(probe, headers, model, seed) : 0;
    const std::vector<Prompt> prompts = make_prompts(dataset, dataset_path, num_prompts, input_len, output_len,
                                                     range_ratio, 129280, seed, chat, tokens_per_word);

    // Arrival offsets: gamma(shape=burstiness, scale=1/(rate*burstiness)); all zero when the rate is infinite.
    std::vector<double> offsets(prompts.size(), 0.0);
    if (std::isfinite(request_rate)) {
        std::mt19937_64 rng(seed ^ 0x5bd1e995);
        std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
        double t = 0;
        for (size_t i = 0; i < offsets.size(); ++i) {
            offsets[i] = t;
            t += gap(rng);
        }
    }
    std::vector<Outcome> outcomes(prompts.size());
    std::atomic<size_t> next{0};
    std::atomic<int> finished{0};
    const int workers = max_concurrency > 0 ? std::min<int>(max_concurrency, num_prompts) : num_prompts;
    const bool tty = !no_progress && isatty(STDERR_FILENO);
    std::fprintf(stderr, "bench-serve: %d prompts, %s, request rate %s, max concurrency %s, seed %llu, %s\n",
                 num_prompts, endpoint.c_str(),
                 std::isfinite(request_rate) ? fmt::format("{}", request_rate).c_str() : "inf",
                 max_concurrency > 0 ? std::to_string(max_concurrency).c_str() : "unlimited", (unsigned long long)seed,
                 sampled ? fmt::format("sampled (temperature {}, top_p {}, top_k {})", temperature, top_p, top_k).c_str()
                         : "greedy");
    const ServerMetrics server_before = read_server_metrics(probe, headers);
    const auto bench_start = SteadyClock::now();
    std::mutex progress_mu;
    auto worker = [&] {
        server::HttpClient cli(host, port, 3600);
        while (true) {
            const size_t i = next.fetch_add(1);
            if (i >= prompts.size()) return;
            std::this_thread::sleep_until(bench_start + std::chrono::duration_cast<SteadyClock::duration>(
                                                            std::chrono::duration<double>(offsets[i])));
            const Prompt& p = prompts[i];
            json body = {{"model", model}, {"max_tokens", p.output_len}, {"stream", true},
                         {"stream_options", {{"include_usage", true}}}, {"temperature", temperature}};
            if (top_p < 1.0) body["top_p"] = top_p;
            if (top_k > 0) body["top_k"] = top_k;
            if (frequency_penalty != 0.0) body["frequency_penalty"] = frequency_penalty;
            if (presence_penalty != 0.0) body["presence_penalty"] = presence_penalty;
            if (repetition_penalty != 1.0) body["repetition_penalty"] = repetition_penalty;
            if (sampled) body["seed"] = int64_t((seed + i) & 0x7fffffffffffffffull);
            if (ignore_eos) body["ignore_eos"] = true;
            if (!response_format.is_null()) body["response_format"] = response_format;
            if (chat) body["messages"] = json::array({{{"role", "user"}, {"content", p.prompt}}});
            else body["prompt"] = p.prompt;
            Outcome& o = outcomes[i];
            const auto start = SteadyClock::now();
            StreamParser parser(start);
            std::string raw;
            auto res = cli.post(endpoint, body.dump(), headers, [&](std::string_view d) {
                if (raw.size() < 4096) raw.append(d.substr(0, 4096));
                return parser.feed(d, o);
            });
            o.e2el = std::chrono::duration<double>(SteadyClock::now() - start).count();
            if (res.status != 200) {
                o.error = res.status ? fmt::format("HTTP {}: {}", res.status, (res.body.empty() ? raw : res.body).substr(0, 300))
                                     : "transport error: " + res.error;
            } else if (!parser.done) {
                if (o.error.empty()) o.error = "stream ended without [DONE]";
            } else if (o.error.empty()) {
                o.success = true;
            }
            const int d = ++finished;
            std::lock_guard lock(progress_mu);
            progress_bar(d, num_prompts, tty);
        }
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    const double duration = std::chrono::duration<double>(SteadyClock::now() - bench_start).count();
    const ServerMetrics server_after = read_server_metrics(probe, headers);
    // The server's decode passes during the run, by how they ran as CUDA graphs (other clients would count too).
    json graph_passes = nullptr;
    if (!server_after.graph_passes.empty()) {
        graph_passes = json::object();
        for (const auto& [how, n] : server_after.graph_passes) {
            const auto b = server_before.graph_passes.find(how);
            graph_passes[how] = int64_t(n - (b == server_before.graph_passes.end() ? 0.0 : b->second));
        }
    }
    // Mean over the requests the server finished meanwhile (other clients of the same server would count too).
    std::optional<double> server_mean_ttft_ms;
    if (const auto &b = server_before.ttft, &a = server_after.ttft; b && a && a->count > b->count)
        server_mean_ttft_ms = 1e3 * (a->sum - b->sum) / (a->count - b->count);

    int completed = 0, failed = 0;
    int64_t total_in = 0, total_out = 0;
    std::vector<double> ttfts, tpots, itls, e2els;
    json input_lens = json::array(), output_lens = json::array(), ttft_list = json::array(), itl_list = json::array(),
         errors = json::array();
    for (const Outcome& o : outcomes) {
        errors.push_back(o.error);
        if (!o.success) {
            ++failed;
            continue;
        }
        ++completed;
        total_in += o.prompt_tokens;
        total_out += o.output_tokens;
        input_lens.push_back(o.prompt_tokens);
        output_lens.push_back(o.output_tokens);
        ttfts.push_back(o.ttft);
        ttft_list.push_back(o.ttft);
        e2els.push_back(o.e2el);
        itls.insert(itls.end(), o.itl.begin(), o.itl.end());
        itl_list.push_back(o.itl);
        if (o.output_tokens > 1) tpots.push_back((o.e2el - o.ttft) / double(o.output_tokens - 1));
    }
    const Stats ttft = stats_ms(ttfts), tpot = stats_ms(tpots), itl = stats_ms(itls), e2el = stats_ms(e2els);
    json r;
    r["date"] = fmt::format("{:%Y%m%d-%H%M%S}", fmt::localtime(std::time(nullptr)));
    r["backend"] = "openai";
    r["endpoint"] = endpoint;
    r["response_format_json_schema"] = schema_path.empty() ? json(nullptr) : json(schema_path);
    r["model_id"] = model;
    r["num_prompts"] = num_prompts;
    r["request_rate"] = std::isfinite(request_rate) ? json(request_rate) : json("inf");
    r["burstiness"] = burstiness;
    r["max_concurrency"] = max_concurrency > 0 ? json(max_concurrency) : json(nullptr);
    r["seed"] = seed;
    r["temperature"] = temperature;
    r["top_p"] = top_p;
    r["top_k"] = top_k;
    r["frequency_penalty"] = frequency_penalty;
    r["presence_penalty"] = presence_penalty;
    r["repetition_penalty"] = repetition_penalty;
    r["duration"] = duration;
    r["completed"] = completed;
    r["failed"] = failed;
    r["total_input_tokens"] = total_in;
    r["total_output_tokens"] = total_out;
    r["request_throughput"] = double(completed) / duration;
    r["request_goodput"] = nullptr;
    r["output_throughput"] = double(total_out) / duration;
    r["total_token_throughput"] = double(total_in + total_out) / duration;
    auto put = [&](const char* name, const Stats& s) {
        r[fmt::format("mean_{}_ms", name)] = s.mean;
        r[fmt::format("median_{}_ms", name)] = s.median;
        r[fmt::format("std_{}_ms", name)] = s.stdev;
        r[fmt::format("p90_{}_ms", name)] = s.p90;
        r[fmt::format("p99_{}_ms", name)] = s.p99;
    };
    put("ttft", ttft);
    put("tpot", tpot);
    put("itl", itl);
    put("e2el", e2el);
    r["server_mean_ttft_ms"] = server_mean_ttft_ms ? json(*server_mean_ttft_ms) : json(nullptr);
    r["server_graph_passes"] = graph_passes;
    r["input_lens"] = input_lens;
    r["output_lens"] = output_lens;
    r["ttfts"] = ttft_list;
    r["itls"] = itl_list;
    r["errors"] = errors;

    std::printf("============ Serving Benchmark Result ============\n");
    std::printf("%-40s %10d\n", "Successful requests:", completed);
    std::printf("%-40s %10d\n", "Failed requests:", failed);
    std::printf("%-40s %10.2f\n", "Benchmark duration (s):", duration);
    std::printf("%-40s %10lld\n", "Total input tokens:", (long long)total_in);
    std::printf("%-40s %10lld\n", "Total generated tokens:", (long long)total_out);
    std::printf("%-40s %10.2f\n", "Request throughput (req/s):", double(completed) / duration);
    std::printf("%-40s %10.2f\n", "Output token throughput (tok/s):", double(total_out) / duration);
    std::printf("%-40s %10.2f\n", "Total Token throughput (tok/s):", double(total_in + total_out) / duration);
    auto block = [&](const char* title, const char* name, const Stats& s) {
        std::printf("%s\n", fmt::format("{:-^50}", fmt::format(" {} ", title)).c_str());
        std::printf("%-40s %10.2f\n", fmt::format("Mean {} (ms):", name).c_str(), s.mean);
        std::printf("%-40s %10.2f\n", fmt::format("Median {} (ms):", name).c_str(), s.median);
        std::printf("%-40s %10.2f\n", fmt::format("P90 {} (ms):", name).c_str(), s.p90);
        std::printf("%-40s %10.2f\n", fmt::format("P99 {} (ms):", name).c_str(), s.p99);
    };
    block("Time to First Token", "TTFT", ttft);
    if (server_mean_ttft_ms) std::printf("%-40s %10.2f\n", "Mean TTFT, server side (ms):", *server_mean_ttft_ms);
    block("Time per Output Token (excl. 1st token)", "TPOT", tpot);
    block("Inter-token Latency", "ITL", itl);
    block("End-to-end Latency", "E2EL", e2el);
    if (graph_passes.is_object()) {
        std::printf("%s\n", fmt::format("{:-^50}", " Server decode passes (CUDA graphs) ").c_str());
        for (const char* how : {"first", "captured", "replayed", "eager"})
            std::printf("%-40s %10lld\n", fmt::format("{}:", how).c_str(),
                        (long long)graph_passes.value(how, int64_t(0)));
    }
    std::printf("==================================================\n");
    for (const Outcome& o : outcomes)
        if (!o.success) {
            std::fprintf(stderr, "bench-serve: first failure: %s\n", o.error.c_str());
            break;
        }
    if (!save_result.empty()) {
        std::ofstream f(save_result);
        FS_CHECK(f.good(), "--save-result: cannot write '{}'", save_result);
        f << r.dump(2) << "\n";
    }
    return failed == 0 ? 0 : 3;
}

FLASHSEEK_COMMAND("bench-serve", "serving benchmark client (TTFT/TPOT/ITL/E2E, throughput; vLLM-style JSON)",
                  run_bench_serve);

}  // namespace
