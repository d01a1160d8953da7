// Stop strings over streamed text: emits text as soon as it can no longer be the start of a stop string, and cuts
// the output right before the first stop string found (OpenAI semantics: the stop string itself is not returned).
// Because any possible stop-string prefix is held back, a match can never straddle text already emitted.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace flashseek::runtime {

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

    // Feeds newly decoded text; returns the text that is now safe to emit. After a match, matched() is true and
    // later pushes return nothing.
    std::string push(std::string_view text) {
        if (matched_) return {};
        pending_.append(text);
        size_t cut = std::string::npos;
        for (const auto& s : stops_) {
            const size_t pos = pending_.find(s);
            if (pos != std::string::npos && pos < cut) cut = pos;
        }
        if (cut != std::string::npos) {
            matched_ = true;
            std::string out = pending_.substr(0, cut);
            pending_.clear();
            return out;
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        size_t hold = 0;
        for (const auto& s : stops_)
            for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
                if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                    hold = k;
                    break;
                }
        std::string out = pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return out;
    }
    // End of generation without a match: the held-back text is real output.
    std::string flush() {
        std::string out;
        if (!matched_) out.swap(pending_);
        return out;
    }
    bool matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string pending_;
    bool matched_ = false;
};

}  // namespace flashseek::runtime
