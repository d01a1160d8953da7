// `flashseek tokenize | detokenize | chat-encode`: line-oriented tokenizer tools used by checks outside the test suite.
//   tokenize:    stdin JSON lines {"text": "..."} → one JSON array of ids per line, equal to HF
//                Tokenizer.encode(text, add_special_tokens=False).ids (added tokens in the text are matched, as in HF).
//   detokenize:  stdin JSON arrays of ids → {"text": "..."} lines (special tokens kept unless --skip-special-tokens).
//   chat-encode: stdin one OpenAI chat request body → {"prompt": "...", "ids": [...]}.
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using flashseek::tokenizer::TokenId;
using flashseek::tokenizer::Tokenizer;

// Calls fn(json, line_no) for every non-empty stdin line; a line that is not JSON stops with an error naming it.
template <typename Fn>
void for_each_json_line(Fn&& fn) {
    std::string line;
    std::size_t line_no = 0;
    std::ios::sync_with_stdio(false);
    while (std::getline(std::cin, line)) {
        ++line_no;
        if (line.empty() || line == "\r") continue;
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            flashseek::fail("stdin line {}: invalid JSON: {}", line_no, e.what());
        }
        fn(j, line_no);
    }
    std::cout.flush();
}

// Errors on a line name the line number; the tool stops at the first bad line with a non-zero exit code.
int run_tokenize(int argc, char** argv) {
    CLI::App app{"Encode JSON lines {\"text\": ...} into token id arrays (HF encode, add_special_tokens=False)"};
    std::string path;
    bool no_specials = false;
    app.add_option("--tokenizer", path, "tokenizer.json")->required();
    app.add_flag("--no-special-matching", no_specials, "treat added-token text as plain text (untrusted content mode)");
    CLI11_PARSE(app, argc, argv);
    const Tokenizer tok = Tokenizer::load(path);
    for_each_json_line([&](const nlohmann::json& j, std::size_t line_no) {
        FS_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(),
                 "stdin line {}: expected an object with a string field \"text\"", line_no);
        const auto& text = j["text"].get_ref<const std::string&>();
        const auto ids = no_specials ? tok.encode(text) : tok.encode_with_specials(text);
        std::cout << nlohmann::json(ids).dump() << '\n';
    });
    return 0;
}

int run_detokenize(int argc, char** argv) {
    CLI::App app{"Decode JSON arrays of token ids into {\"text\": ...} lines"};
    std::string path;
    bool skip_special = false;
    app.add_option("--tokenizer", path, "tokenizer.json")->required();
    app.add_flag("--skip-special-tokens", skip_special, "drop tokens marked special (BOS, EOS, ...)");
    CLI11_PARSE(app, argc, argv);
    const Tokenizer tok = Tokenizer::load(path);
    for_each_json_line([&](const nlohmann::json& j, std::size_t line_no) {
        FS_CHECK(j.is_array(), "stdin line {}: expected a JSON array of token ids", line_no);
        std::vector<TokenId> ids;
        ids.reserve(j.size());
        for (std::size_t i = 0; i < j.size(); ++i) {
            FS_CHECK(j[i].is_number_integer() && j[i].get<std::int64_t>() >= 0 &&
                         j[i].get<std::int64_t>() < static_cast<std::int64_t>(tok.vocab_size()),
                     "stdin line {}: element {} is not a token id in [0, {})", line_no, i, tok.vocab_size());
            ids.push_back(static_cast<TokenId>(j[i].get<std::int64_t>()));
        }
        std::cout << nlohmann::json{{"text", tok.decode(ids, skip_special)}}.dump() << '\n';
    });
    return 0;
}

int run_chat_encode(int argc, char** argv) {
    CLI::App app{"Render one OpenAI chat request body (stdin) into the DeepSeek-V4 prompt text and ids"};
    std::string path;
    bool text_only = false;
    app.add_option("--tokenizer", path, "tokenizer.json")->required();
    app.add_flag("--text-only", text_only, "print only the prompt text (raw, no JSON)");
    CLI11_PARSE(app, argc, argv);
    const Tokenizer tok = Tokenizer::load(path);
    std::string body((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(body);
    } catch (const nlohmann::json::exception& e) {
        flashseek::fail("stdin: invalid JSON request body: {}", e.what());
    }
    const auto request = flashseek::chat::ChatRequest::from_ordered_json(j);
    const auto segments = flashseek::chat::render_prompt(request);
    const std::string prompt = flashseek::chat::prompt_text(segments);
    if (text_only) {
        std::cout << prompt;
        return 0;
    }
    const auto ids = flashseek::chat::encode_prompt(tok, segments);
    std::cout << nlohmann::json{{"prompt", prompt}, {"ids", ids}}.dump() << '\n';
    return 0;
}

}  // namespace

FLASHSEEK_COMMAND("tokenize", "encode JSON lines {\"text\"} into token ids (HF-identical)", run_tokenize);
FLASHSEEK_COMMAND("detokenize", "decode JSON arrays of token ids into {\"text\"} lines", run_detokenize);
FLASHSEEK_COMMAND("chat-encode", "render a chat request body into the DeepSeek-V4 prompt text and ids", run_chat_encode);
