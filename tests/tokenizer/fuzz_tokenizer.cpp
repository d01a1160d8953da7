// libFuzzer target (built by scripts/tokenizer_fuzz.sh with clang-14): the first input byte picks the parser
// (tokenizer.json loader, encode/decode, chat request, output parser); any exception other than flashseek::Error,
// any crash, hang or sanitizer report is a bug.
#include <nlohmann/json.hpp>

#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

using namespace flashseek;

static const tokenizer::Tokenizer& v4() {
    static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(FUZZ_TOKENIZER_PATH);
    return tok;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        switch (data[0] % 5) {
            case 0: {  // tokenizer.json loader
                const auto t = tokenizer::Tokenizer::from_json_text(input, "fuzz.json");
                const auto ids = t.encode_with_specials("ab c  \n12");
                (void)t.decode(ids);
                break;
            }
            case 1: {  // encode (rejects invalid UTF-8) + decode round trip
                const auto ids = v4().encode_with_specials(input);
                if (v4().decode(ids) != input) __builtin_trap();
                const auto plain = v4().encode(input);
                if (v4().decode(plain) != input) __builtin_trap();
                break;
            }
            case 2: {  // decode arbitrary ids, streaming and whole
                std::vector<tokenizer::TokenId> ids;
                for (std::size_t i = 0; i + 2 <= input.size(); i += 2)
                    ids.push_back((static_cast<unsigned char>(input[i]) << 9 | static_cast<unsigned char>(input[i + 1])) %
                                  static_cast<tokenizer::TokenId>(v4().vocab_size()));
                tokenizer::IncrementalDecoder dec(v4());
                std::string streamed;
                for (auto id : ids) streamed += dec.push(id);
                streamed += dec.flush();
                if (streamed != v4().decode(ids)) __builtin_trap();
                break;
            }
            case 3: {  // chat request → prompt ids
                const auto body = nlohmann::ordered_json::parse(input.begin(), input.end(), nullptr, false);
                if (body.is_discarded()) return 0;
                const auto req = chat::ChatRequest::from_ordered_json(body);
                (void)chat::encode_prompt(v4(), chat::render_prompt(req));
                break;
            }
            case 4: {  // generated-text parser, whole vs streamed
                const auto mode = size % 2 ? chat::ThinkingMode::thinking : chat::ThinkingMode::chat;
                const auto whole = chat::parse_completion(input, mode);
                chat::StreamingParser p(mode);
                std::string content;
                for (std::size_t i = 0; i < input.size(); i += 3) content += p.push(input.substr(i, 3)).content;
                chat::ParsedMessage m;
                content += p.finish(&m).content;
                if (content != whole.content || m.tool_calls.size() != whole.tool_calls.size()) __builtin_trap();
                for (const auto& c : m.tool_calls)
                    if (!nlohmann::json::accept(c.arguments)) __builtin_trap();
                break;
            }
        }
    } catch (const Error&) {
        // Clear, named errors are the expected outcome for bad input.
    }
    return 0;
}
