// Loading and checking committed goldens, running the flashseek binary, and the per-position error metric.
#include "golden_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sys/wait.h>

#include "util/error.h"

namespace flashseek::golden {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const json& field(const json& j, const char* key, const fs::path& file) {
    FS_CHECK(j.contains(key), "{}: missing field '{}'", file.string(), key);
    return j.at(key);
}

int64_t int_field(const json& j, const char* key, const fs::path& file, int64_t lo, int64_t hi) {
    const json& v = field(j, key, file);
    FS_CHECK(v.is_number_integer(), "{}: field '{}' must be an integer, got {}", file.string(), key, v.dump());
    const int64_t x = v.get<int64_t>();
    FS_CHECK(x >= lo && x <= hi, "{}: field '{}' = {} is outside [{}, {}]", file.string(), key, x, lo, hi);
    return x;
}

}  // namespace

GoldenCase load_golden_case(const fs::path& dir) {
    const fs::path meta_path = dir / "meta.json";
    std::ifstream in(meta_path);
    FS_CHECK(in.good(), "{}: cannot open", meta_path.string());
    json j;
    try {
        in >> j;
    } catch (const json::exception& e) {
        fail("{}: not valid JSON ({})", meta_path.string(), e.what());
    }
    FS_CHECK(j.is_object(), "{}: the top level must be an object", meta_path.string());

    GoldenCase g;
    g.dir = dir;
    g.config_path = dir / "config.json";
    g.logits_path = dir / "logits.bin";
    const json& name = field(j, "name", meta_path);
    FS_CHECK(name.is_string(), "{}: field 'name' must be a string", meta_path.string());
    g.name = name.get<std::string>();
    g.seed = uint64_t(int_field(j, "gen_checkpoint_seed", meta_path, 0, INT64_MAX));
    const json& hash = field(j, "content_hash", meta_path);
    FS_CHECK(hash.is_string() && !hash.get<std::string>().empty(),
             "{}: field 'content_hash' must be the `flashseek inspect` hash of the gen-checkpoint output (goldens "
             "made from a hand-written checkpoint are not accepted)", meta_path.string());
    g.content_hash = hash.get<std::string>();
    g.n_tokens = int(int_field(j, "n_tokens", meta_path, 1, 1 << 20));
    g.prefill = int(int_field(j, "prefill", meta_path, 1, g.n_tokens));
    g.vocab_size = int_field(j, "vocab_size", meta_path, 1, INT32_MAX);
    const json& toks = field(j, "tokens", meta_path);
    FS_CHECK(toks.is_array() && toks.size() == size_t(g.n_tokens), "{}: field 'tokens' must be a list of n_tokens = "
             "{} ids", meta_path.string(), g.n_tokens);
    for (size_t i = 0; i < toks.size(); ++i) {
        FS_CHECK(toks[i].is_number_integer(), "{}: tokens[{}] is not an integer", meta_path.string(), i);
        const int64_t t = toks[i].get<int64_t>();
        FS_CHECK(t >= 0 && t < g.vocab_size, "{}: tokens[{}] = {} is outside [0, vocab_size {})", meta_path.string(),
                 i, t, g.vocab_size);
        g.tokens.push_back(int32_t(t));
    }
    if (j.contains("tolerance_rel_l2_per_position")) {
        const json& tol = j.at("tolerance_rel_l2_per_position");
        FS_CHECK(tol.is_number() && tol.get<double>() > 0 && tol.get<double>() <= 1e-4,
                 "{}: field 'tolerance_rel_l2_per_position' must be in (0, 1e-4] (the acceptance bound)",
                 meta_path.string());
        g.tolerance = tol.get<double>();
    }
    FS_CHECK(fs::exists(g.config_path), "{}: missing (golden '{}')", g.config_path.string(), g.name);
    FS_CHECK(fs::exists(g.logits_path), "{}: missing (golden '{}')", g.logits_path.string(), g.name);
    const auto want = uintmax_t(g.n_tokens) * uintmax_t(g.vocab_size) * 4;
    FS_CHECK(fs::file_size(g.logits_path) == want, "{}: {} bytes, expected n_tokens {} x vocab_size {} x 4 = {}",
             g.logits_path.string(), fs::file_size(g.logits_path), g.n_tokens, g.vocab_size, want);
    return g;
}

std::vector<fs::path> list_golden_dirs(const fs::path& root) {
    std::vector<fs::path> out;
    if (!fs::is_directory(root)) return out;
    for (const auto& e : fs::directory_iterator(root))
        if (e.is_directory() && fs::exists(e.path() / "meta.json")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<float> read_f32_file(const fs::path& path, int64_t count) {
    std::ifstream in(path, std::ios::binary);
    FS_CHECK(in.good(), "{}: cannot open", path.string());
    in.seekg(0, std::ios::end);
    const auto size = int64_t(in.tellg());
    FS_CHECK(size == count * 4, "{}: {} bytes, expected {} float32 values ({} bytes)", path.string(), size, count,
             count * 4);
    in.seekg(0);
    std::vector<float> v(static_cast<size_t>(count));
    in.read(reinterpret_cast<char*>(v.data()), std::streamsize(size));
    FS_CHECK(in.good(), "{}: read failed", path.string());
    return v;
}

std::vector<double> per_position_rel_err(const float* ours, const float* golden, int64_t rows, int64_t cols) {
    std::vector<double> err(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        double num = 0, den = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const double a = ours[r * cols + c], b = golden[r * cols + c];
            num += (a - b) * (a - b);
            den += b * b;
        }
        // A non-finite value in ours must fail, never compare as NaN (NaN <= tol is false, but max() would skip it).
        err[size_t(r)] = std::isfinite(num) ? std::sqrt(num) / std::max(std::sqrt(den), 1e-30) : INFINITY;
    }
    return err;
}

CommandResult run_command(const std::string& command_line) {
    CommandResult r;
    const std::string cmd = command_line + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    FS_CHECK(p != nullptr, "cannot run: {}", command_line);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return r;
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string parse_content_hash(const std::string& inspect_output) {
    static const std::regex re(R"(content-hash:\s*(\S+))");
    std::smatch m;
    FS_CHECK(std::regex_search(inspect_output, m, re), "`flashseek inspect` printed no 'content-hash:' line:\n{}",
             inspect_output);
    return m[1].str();
}

}  // namespace flashseek::golden
