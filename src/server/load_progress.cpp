// LoadProgress rendering (see load_progress.h).
#include "server/load_progress.h"

#include <cstdio>
#include <string>

namespace flashseek::server {

LoadProgress::LoadProgress(std::function<bool()> cancelled, bool tty)
    : cancelled_(std::move(cancelled)), tty_(tty), start_(std::chrono::steady_clock::now()) {}

bool LoadProgress::operator()(size_t done, size_t total) {
    if (cancelled_ && cancelled_()) return false;
    done_ = done;
    total_ = total;
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double gb = double(done) / 1e9, total_gb = double(total) / 1e9;
    const double rate = secs > 0 ? gb / secs : 0;
    const double frac = total ? double(done) / double(total) : 1.0;
    if (tty_) {
        if (now - last_draw_ < std::chrono::milliseconds(100) && done < total) return true;
        last_draw_ = now;
        const int width = 30, filled = int(frac * width);
        std::string bar(size_t(filled), '#');
        bar.resize(size_t(width), ' ');
        std::fprintf(stderr, "\rloading model [%s] %3d%% %.2f/%.2f GB %.2f GB/s", bar.c_str(), int(frac * 100), gb,
                     total_gb, rate);
        std::fflush(stderr);
    } else {
        const int decile = int(frac * 10);
        if (decile > last_decile_) {
            last_decile_ = decile;
            std::fprintf(stderr, "loading model: %3d%% (%.2f of %.2f GB, %.2f GB/s, %.1f s)\n", decile * 10, gb,
                         total_gb, rate, secs);
        }
    }
    return true;
}

void LoadProgress::finish() {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (tty_) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "model loaded: %.2f GB in %.1f s\n", double(total_) / 1e9, secs);
}

}  // namespace flashseek::server
