// `flashseek generate`: greedy or sampled decoding from prompt token ids, a text prompt or a chat message on a model
// directory (or the embedded default model), printing the generated ids (and text when a tokenizer is used) and the
// prefill / decode speed.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "backend_flags.h"
#include "command.h"
#include "token_ids.h"
#include "backend/backend.h"
#include "backend/registry.h"
#include "model/default_model.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using namespace flashseek;

std::vector<int32_t> parse_prompt_tokens(const std::string& text) {
    std::string t = text;
    for (char& ch : t)
        if (ch == ',') ch = ' ';
    std::istringstream in(t);
    return cli::parse_token_ids(in, "--prompt-tokens");
}

int run_generate(int argc, char** argv) {
    CLI::App app{"Generate tokens from prompt token ids (greedy at temperature 0, else sampled)"};
    std::string model_dir, prompt, prompt_text, tokenizer_path;
    cli::BackendFlags flags;
    bool chat = false, thinking = false;
    int max_new = 16, top_k = 0;
    float temperature = 0.f, top_p = 1.f;
    uint64_t seed = 0;
    bool ignore_eos = false;
    app.add_option("--model", model_dir, "model directory (default: the embedded default model)");
    auto* opt_ids = app.add_option("--prompt-tokens", prompt, "prompt token ids, space or comma separated");
    auto* opt_text = app.add_option("--prompt", prompt_text, "prompt text (tokenized with the model's tokenizer)");
    opt_ids->excludes(opt_text);
    app.add_flag("--chat", chat, "wrap --prompt as a user message in the DeepSeek-V4 chat format");
    app.add_flag("--thinking", thinking, "with --chat: thinking mode (the reply starts with reasoning)");
    app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (default: the one in the model directory)");
    app.add_option("--max-new", max_new, "tokens to generate");
    app.add_option("--temperature", temperature, "0 = greedy");
    app.add_option("--top-p", top_p, "nucleus probability mass in (0, 1]");
    app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)");
    app.add_option("--seed", seed, "sampling seed (same seed, same tokens)");
    cli::add_backend_flags(app, flags);
    app.add_flag("--ignore-eos", ignore_eos, "keep generating after the end-of-sequence token");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    FS_CHECK(max_new >= 1, "--max-new must be >= 1, got {}", max_new);
    FS_CHECK(!(prompt.empty() && prompt_text.empty()), "give the prompt with --prompt TEXT or --prompt-tokens IDS");
    FS_CHECK(!chat || !prompt_text.empty(), "--chat needs --prompt TEXT");
    FS_CHECK(!thinking || chat, "--thinking needs --chat");
    if (model_dir.empty()) model_dir = ensure_default_model();

    // Text prompts go through the model's tokenizer; chat prompts through the DeepSeek-V4 chat encoder, which keeps
    // the user's text from ever producing control-token ids.
    std::optional<tokenizer::Tokenizer> tok;
    std::vector<int32_t> ids;
    if (!prompt_text.empty()) {
        if (tokenizer_path.empty()) tokenizer_path = (std::filesystem::path(model_dir) / "tokenizer.json").string();
        FS_CHECK(std::filesystem::exists(tokenizer_path), "--tokenizer: {} does not exist (the model directory has no "
                 "tokenizer.json; pass --tokenizer PATH)", tokenizer_path);
        tok = tokenizer::Tokenizer::load(tokenizer_path);
        if (chat) {
            chat::ChatRequest req;
            chat::Message m;
            m.role = "user";
            m.content = prompt_text;
            req.messages.push_back(std::move(m));
            req.thinking = thinking ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
            const chat::EncodedPrompt enc = chat::encode_chat(*tok, req);
            ids.assign(enc.ids.begin(), enc.ids.end());
        } else {
            const auto enc = tok->encode(prompt_text);
            ids.assign(enc.begin(), enc.end());
        }
        FS_CHECK(!ids.empty(), "--prompt: the text encodes to no tokens");
    } else {
        ids = parse_prompt_tokens(prompt);
    }

    BackendOptions opt = cli::backend_options(flags);
    opt.max_sequences = 1;
    auto be = create_backend(model_dir, opt);
    const ModelConfig& cfg = be->config();
    for (size_t i = 0; i < ids.size(); ++i)
        FS_CHECK(ids[i] < cfg.vocab_size, "--prompt-tokens: token id {} (token {}) is >= the vocabulary size {}",
                 ids[i], i, cfg.vocab_size);

    SampleParams sp;
    sp.temperature = temperature;
    sp.top_p = top_p;
    sp.top_k = top_k;
    sp.seed = seed;
    const int seq = be->create_sequence();
    std::vector<SampleResult> res;
    std::vector<int32_t> generated;
    const auto t0 = std::chrono::steady_clock::now();
    SequenceStep step;
    step.seq_id = seq;
    step.tokens = ids.data();
    step.n_tokens = int(ids.size());
    be->forward_sample(std::span<const SequenceStep>(&step, 1), std::span<const SampleParams>(&sp, 1), res);
    const auto t1 = std::chrono::steady_clock::now();
    generated.push_back(res[0].token);
    while (int(generated.size()) < max_new && (ignore_eos || generated.back() != cfg.eos_token_id)) {
        sp.draw_index = generated.size();
        step.tokens = &generated.back();
        step.n_tokens = 1;
        be->forward_sample(std::span<const SequenceStep>(&step, 1), std::span<const SampleParams>(&sp, 1), res);
        generated.push_back(res[0].token);
    }
    const auto t2 = std::chrono::steady_clock::now();
    be->free_sequence(seq);

    std::string line;
    for (int32_t t : generated) line += (line.empty() ? "" : " ") + std::to_string(t);
    std::printf("%s\n", line.c_str());
    if (tok) {
        // Keep control tokens (</think>, DSML markers) visible: with a random model they show what was generated.
        std::vector<tokenizer::TokenId> out(generated.begin(), generated.end());
        std::printf("%s\n", tok->decode(out, /*skip_special=*/false).c_str());
    }
    std::fflush(stdout);  // the ids come before the statistics on a shared terminal or pipe
    const double sp_s = std::chrono::duration<double>(t1 - t0).count();
    const double dec_s = std::chrono::duration<double>(t2 - t1).count();
    const size_t n_dec = generated.size() - 1;
    std::fprintf(stderr,
                 "generate [%s]: prompt %zu tokens in %.3f s (%.1f tokens/s); %zu tokens generated, %zu decode steps "
                 "in %.3f s (%.1f tokens/s)\n",
                 be->name().c_str(), ids.size(), sp_s, ids.size() / std::max(sp_s, 1e-9), generated.size(), n_dec,
                 dec_s, n_dec > 0 ? n_dec / std::max(dec_s, 1e-9) : 0.0);
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("generate", "generate from prompt ids, text or a chat message (greedy or sampled)", run_generate);
