// Single-thread encode throughput of flashseek's tokenizer on a corpus.jsonl written by
// scripts/tokenizer_hf_oracle.py (not a test; scripts/tokenizer_bench.py runs it next to HF tokenizers).
// Usage: bench_tokenizer TOKENIZER_JSON CORPUS_JSONL [REPEATS]   → prints bytes, seconds per pass (median), MB/s.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: bench_tokenizer TOKENIZER_JSON CORPUS_JSONL [REPEATS]\n";
        return 2;
    }
    const auto tok = flashseek::tokenizer::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    std::vector<std::string> texts;
    std::size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
        texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
        bytes += texts.back().size();
    }
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
    std::vector<double> seconds;
    std::size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
        // Passes after the first find the per-thread word cache warm; run with REPEATS=1 for a cold measurement.
        const auto t0 = std::chrono::steady_clock::now();
        tokens = 0;
        for (const auto& t : texts) tokens += tok.encode_with_specials(t).size();
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::cout << "{\"bytes\": " << bytes << ", \"tokens\": " << tokens << ", \"median_s\": " << median
              << ", \"min_s\": " << seconds.front() << ", \"mb_per_s\": " << bytes / median / 1e6 << "}\n";
    return 0;
}
